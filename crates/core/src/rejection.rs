//! The fail-closed reason codes of contract section 6.

use std::fmt;

/// Why a project gets no snapshot for its current active vector. Permanent for that vector,
/// except for the verdicts on a revision row (see [`Rejection::recorded`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RejectionCode {
    /// More than 128 active packages.
    TooManyPackages,
    /// A source row breaks the formats of contract section 5.
    SourceInvalid,
    /// A generation points at a revision that is not stored.
    RevisionMissing,
    /// A revision is over 24 MiB.
    RevisionTooLarge,
    /// A revision's bytes do not hash to its digest.
    RevisionDigestMismatch,
    /// A revision is not a materialized-revision document.
    RevisionMalformed,
    /// A revision names another package.
    PackageMismatch,
    /// A definition carries a handler, URL, credential or similar.
    ForbiddenField,
    /// A definition breaks a rule of contract section 5.
    InvalidDefinition,
    /// A definition's namespace is not its package.
    NamespaceViolation,
    /// A definition asks for a permission the generation was not approved for.
    PermissionNotApproved,
    /// More than 128 definitions.
    TooManyDefinitions,
    /// The same identity and version twice.
    DuplicateDefinition,
    /// Two identities equal after lowercasing.
    IdentityCaseCollision,
    /// Two identities whose aliases are equal ignoring ASCII case.
    AliasCollision,
    /// The canonical snapshot is over 8 MiB.
    SnapshotTooLarge,
}

impl RejectionCode {
    /// Every code, in the order of contract section 6.
    pub const ALL: [Self; 16] = [
        Self::TooManyPackages,
        Self::SourceInvalid,
        Self::RevisionMissing,
        Self::RevisionTooLarge,
        Self::RevisionDigestMismatch,
        Self::RevisionMalformed,
        Self::PackageMismatch,
        Self::ForbiddenField,
        Self::InvalidDefinition,
        Self::NamespaceViolation,
        Self::PermissionNotApproved,
        Self::TooManyDefinitions,
        Self::DuplicateDefinition,
        Self::IdentityCaseCollision,
        Self::AliasCollision,
        Self::SnapshotTooLarge,
    ];

    /// The exact code string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TooManyPackages => "too-many-packages",
            Self::SourceInvalid => "source-invalid",
            Self::RevisionMissing => "revision-missing",
            Self::RevisionTooLarge => "revision-too-large",
            Self::RevisionDigestMismatch => "revision-digest-mismatch",
            Self::RevisionMalformed => "revision-malformed",
            Self::PackageMismatch => "package-mismatch",
            Self::ForbiddenField => "forbidden-field",
            Self::InvalidDefinition => "invalid-definition",
            Self::NamespaceViolation => "namespace-violation",
            Self::PermissionNotApproved => "permission-not-approved",
            Self::TooManyDefinitions => "too-many-definitions",
            Self::DuplicateDefinition => "duplicate-definition",
            Self::IdentityCaseCollision => "identity-case-collision",
            Self::AliasCollision => "alias-collision",
            Self::SnapshotTooLarge => "snapshot-too-large",
        }
    }

    /// Whether a rejection recorded with this reason skips later builds of its vector.
    /// `revision-missing` and `revision-digest-mismatch` are verdicts on a revision *row* (absent,
    /// or holding bytes other than the ones its digest pins), which the control plane can store
    /// or replace; they are never recorded now (see [`Rejection::recorded`]), and a row an older
    /// build recorded for them never stands. A reason this build does not know (written by a
    /// newer one) stands: failing closed keeps the project rejected.
    pub fn stands(reason: &str) -> bool {
        ReportedCode::parse(reason).stands()
    }

    /// Parses a code string.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// A rejection's code as a run reports it: one this build knows, or the word a newer build
/// recorded (a recorded rejection this build cannot read still stands: failing closed keeps
/// the project rejected). Parsed once, where the row enters.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReportedCode {
    /// A code of contract section 6.
    Known(RejectionCode),
    /// A code a newer build recorded.
    Newer(String),
}

impl ReportedCode {
    /// The code a row holds.
    pub fn parse(s: &str) -> Self {
        RejectionCode::parse(s).map_or_else(|| Self::Newer(s.to_owned()), Self::Known)
    }

    /// The exact code string.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Known(code) => code.as_str(),
            Self::Newer(word) => word,
        }
    }

    /// Whether a rejection recorded with this code skips later builds of its vector: see
    /// [`RejectionCode::stands`], which asks this.
    pub fn stands(&self) -> bool {
        !matches!(
            self,
            Self::Known(RejectionCode::RevisionMissing | RejectionCode::RevisionDigestMismatch)
        )
    }
}

impl From<RejectionCode> for ReportedCode {
    fn from(code: RejectionCode) -> Self {
        Self::Known(code)
    }
}

impl fmt::Display for ReportedCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for RejectionCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rejection: the code and a human detail naming the package, definition and member.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {detail}")]
pub struct Rejection {
    /// The reason code.
    pub code: RejectionCode,
    /// What is wrong and what to do next.
    pub detail: String,
    /// Whether the rejection follows from the content the active vector pins, and so is
    /// recorded and stands for the vector (contract section 7). A revision's bytes are fixed by
    /// its digest and a generation's digests and permissions by a trigger, so every check of
    /// content gives the same answer on every later build. A check of a revision *row* does
    /// not: the row may be stored later (`revision-missing`), or a row whose bytes are not the
    /// ones its digest pins (`revision-digest-mismatch`, or a `byte_length` that is not its
    /// stored length) may be replaced. Such a rejection is reported, never recorded, and the
    /// row's arrival marks the project for the next run.
    pub recorded: bool,
}

impl Rejection {
    /// A rejection of the vector's content: recorded, it stands for the vector.
    pub fn new(code: RejectionCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: crate::quote::bound_detail(detail.into()),
            recorded: true,
        }
    }

    /// A rejection of a revision row (absent, or not the bytes its digest pins): reported,
    /// never recorded.
    pub fn of_row(code: RejectionCode, detail: impl Into<String>) -> Self {
        Self {
            recorded: false,
            ..Self::new(code, detail)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{RejectionCode, ReportedCode};

    #[test]
    fn a_reported_code_is_known_or_a_newer_builds_word() {
        for code in RejectionCode::ALL {
            assert_eq!(
                ReportedCode::parse(code.as_str()),
                ReportedCode::Known(code)
            );
            assert_eq!(ReportedCode::from(code).as_str(), code.as_str());
        }
        let newer = ReportedCode::parse("a-reason-of-a-newer-build");
        assert_eq!(
            newer,
            ReportedCode::Newer("a-reason-of-a-newer-build".into())
        );
        assert_eq!(newer.to_string(), "a-reason-of-a-newer-build");
        assert!(newer.stands(), "fails closed");
    }

    use super::RejectionCode as C;

    #[test]
    fn only_verdicts_on_content_stand_when_recorded() {
        for code in C::ALL {
            let row = matches!(code, C::RevisionMissing | C::RevisionDigestMismatch);
            assert_eq!(C::stands(code.as_str()), !row, "{code}");
        }
        assert!(C::stands("a-reason-of-a-newer-build"), "fails closed");
    }
}
