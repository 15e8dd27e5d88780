//! The source formats of contract section 5 (`is_project_id`, `is_package_name`, …) and the
//! newtypes that carry a check's result: [`Digest`] and [`Generation`]; a generation's lifecycle
//! ([`GenerationStatus`]).
//!
//! Ids travel as text: they arrive in rows the control plane wrote, and the planner checks each
//! head's formats once, where the rows enter the pure core (an id a control plane got wrong is
//! that project's rejection, never a panic or another project's failure).

use std::fmt;

use sha2::{Digest as _, Sha256};

/// Largest generation number and largest safe JSON integer: 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident, $check:path, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Checks the format and wraps the string.
            pub fn parse(s: &str) -> Result<Self, FormatError> {
                if $check(s) {
                    Ok(Self(s.to_owned()))
                } else {
                    Err(FormatError { what: $what, value: truncate_for_display(s) })
                }
            }

            /// The checked string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

/// A value that breaks one of the source formats of contract section 5.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a valid {what}")]
pub struct FormatError {
    /// Which format was expected.
    pub what: &'static str,
    /// The offending value, shortened for display.
    pub value: String,
}

fn truncate_for_display(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

string_newtype!(
    /// A content digest: `sha256:` and 64 lowercase hex digits.
    Digest, is_digest, "digest (expected sha256: and 64 lowercase hex digits)"
);

impl Digest {
    /// The digest of some bytes.
    pub fn of(bytes: &[u8]) -> Self {
        Self::from_sha256(Sha256::digest(bytes).as_slice())
    }

    /// Wraps a finished SHA-256 output.
    pub fn from_sha256(raw: &[u8]) -> Self {
        // By hand rather than `hex::encode`: digests are formed several times per package on
        // every build, and the iterator-based encoder showed in profiles.
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(7 + 2 * raw.len());
        s.push_str("sha256:");
        for &b in raw {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        Self(s)
    }

    /// The algorithm and the first 16 hex digits (`sha256:0123456789abcdef`): enough to tell
    /// snapshots apart in a table a person reads, never enough to compare them by.
    pub fn short(&self) -> &str {
        // Every `Digest` is 71 ASCII bytes (`is_digest`), so the slice is in bounds and on a
        // character boundary.
        &self.0[..23]
    }
}

string_newtype!(
    /// A project id the planner has checked (a built snapshot's): `^[A-Za-z0-9._-]{1,128}$`.
    /// Rows and the command line carry ids as text, so that a bad one can be reported and
    /// explained, not refused before anyone sees it.
    ProjectId, is_project_id, "project id (expected ^[A-Za-z0-9._-]{1,128}$)"
);

/// `^[A-Za-z0-9._-]{1,128}$`
pub fn is_project_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// `^[A-Za-z0-9._:-]{1,128}$`
pub fn is_installation_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// `^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$`, at most 214 characters.
pub fn is_package_name(s: &str) -> bool {
    fn part(p: &str) -> bool {
        let mut bytes = p.bytes();
        matches!(bytes.next(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit())
            && bytes.all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            })
    }
    if s.is_empty() || s.len() > 214 {
        return false;
    }
    match s.strip_prefix('@') {
        Some(rest) => match rest.split_once('/') {
            Some((scope, name)) => part(scope) && part(name),
            None => false,
        },
        None => part(s),
    }
}

/// `^sha256:[0-9a-f]{64}$`
pub fn is_digest(s: &str) -> bool {
    s.len() == 71
        && s.starts_with("sha256:")
        && s.bytes()
            .skip(7)
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `^[a-z][a-z0-9._:-]{0,63}$`: a permission, as a definition names it and a generation
/// approves it.
pub fn is_permission(s: &str) -> bool {
    let mut bytes = s.bytes();
    s.len() <= 64
        && matches!(bytes.next(), Some(b) if b.is_ascii_lowercase())
        && bytes.all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b':' | b'-')
        })
}

/// Most permissions one generation may approve (contract sections 2 and 5).
pub const MAX_APPROVED_PERMISSIONS: usize = 256;

/// Most bytes of a generation's approved permissions as stored (JSON text): 256 permissions of
/// 64 characters take 17,153 bytes written compactly, 17,408 with a space after each comma.
/// The database refuses more (migration 17); an observation brings a longer text as
/// `{"bytes":N}` instead ([`permissions_past_limit`]), so a row stored before the limit
/// cannot make an observation large.
pub const MAX_APPROVED_PERMISSIONS_BYTES: usize = 18 * 1024;

/// The stored length of approved permissions an observation left behind for being past
/// [`MAX_APPROVED_PERMISSIONS_BYTES`], if `text` is such a stand-in.
pub fn permissions_past_limit(text: &str) -> Option<u64> {
    text.strip_prefix("{\"bytes\":")?
        .strip_suffix('}')?
        .parse()
        .ok()
}

/// What is wrong with a generation's approved permissions, if anything: more than
/// [`MAX_APPROVED_PERMISSIONS`], or one that is not a permission ([`is_permission`]). The text
/// names the first such item by its position. (Distinctness is the format's own, checked
/// where the text is parsed.)
pub fn approved_permissions_problem(items: &[String]) -> Option<String> {
    if items.len() > MAX_APPROVED_PERMISSIONS {
        return Some(format!(
            "{} approved permissions, more than the {MAX_APPROVED_PERMISSIONS} a generation may \
             approve",
            items.len()
        ));
    }
    let i = items.iter().position(|item| !is_permission(item))?;
    Some(format!(
        "approved permission [{i}] is not a permission (^[a-z][a-z0-9._:-]{{0,63}}$: a \
         lowercase letter first, at most 64 characters)"
    ))
}

/// `package_generations.status` (contract section 7): where a generation is in its lifecycle.
/// The database's `CHECK` admits exactly these; only an `active` generation can be a head's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GenerationStatus {
    /// Published, not yet prepared.
    Queued,
    /// Prepared, waiting for activation.
    Staged,
    /// Being activated.
    Activating,
    /// The installation's live generation.
    Active,
    /// Was active; replaced by a later activation.
    Superseded,
    /// Its preparation failed.
    Failed,
}

impl GenerationStatus {
    /// Every status, in the contract's order.
    pub const ALL: [Self; 6] = [
        Self::Queued,
        Self::Staged,
        Self::Activating,
        Self::Active,
        Self::Superseded,
        Self::Failed,
    ];

    /// The status as the column holds it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Staged => "staged",
            Self::Activating => "activating",
            Self::Active => "active",
            Self::Superseded => "superseded",
            Self::Failed => "failed",
        }
    }

    /// Parses the column's text; `None` for a word the contract does not list.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Whether `sources activate` may make a generation with this status the live one (an
    /// active one already is; a queued or failed one never was prepared).
    pub fn can_be_activated(self) -> bool {
        matches!(self, Self::Staged | Self::Activating | Self::Superseded)
    }
}

impl fmt::Display for GenerationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A generation number: 1 … 2^53 − 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Generation(u64);

impl Generation {
    /// Checks the range and wraps the number.
    pub fn new(n: i64) -> Result<Self, FormatError> {
        match u64::try_from(n) {
            Ok(g) if (1..=MAX_SAFE_INTEGER).contains(&g) => Ok(Self(g)),
            _ => Err(FormatError {
                what: "generation (expected 1 … 2^53−1)",
                value: n.to_string(),
            }),
        }
    }

    /// The number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_statuses_parse_back_from_their_words_and_nothing_else() {
        for s in GenerationStatus::ALL {
            assert_eq!(GenerationStatus::parse(s.as_str()), Some(s));
        }
        for word in ["", "Active", "active ", "retired"] {
            assert_eq!(GenerationStatus::parse(word), None, "{word:?}");
        }
    }

    #[test]
    fn package_names() {
        for ok in [
            "a",
            "acme.github",
            "@scope/name",
            "0-x_y.z",
            &"a".repeat(214),
        ] {
            assert!(is_package_name(ok), "{ok}");
        }
        for bad in [
            "",
            "A",
            ".a",
            "@scope",
            "@/a",
            "@s/",
            "a/b",
            "@S/a",
            &"a".repeat(215),
        ] {
            assert!(!is_package_name(bad), "{bad}");
        }
    }

    #[test]
    fn ids_and_digests() {
        assert!(is_project_id("demo-1.x_Y"));
        assert!(!is_project_id("demo 1"));
        assert!(!is_project_id(&"p".repeat(129)));
        assert!(is_installation_id("inst:7"));
        assert!(!is_project_id("inst:7"));
        let d = Digest::of(b"");
        assert_eq!(
            d.as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(is_digest(d.as_str()));
        assert!(!is_digest(&d.as_str().to_uppercase()));
        assert_eq!(d.short(), "sha256:e3b0c44298fc1c14");
        assert!(Generation::new(0).is_err());
        assert!(Generation::new(1 << 53).is_err());
        assert_eq!(
            Generation::new((1 << 53) - 1).map(Generation::get),
            Ok(MAX_SAFE_INTEGER)
        );
    }
}
