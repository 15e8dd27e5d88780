//! The process's exit codes (contract section 10): one type, so that a command, the run's
//! summary and `main` cannot disagree on a number, and a Job's `podFailurePolicy` can act on it.

use serde::Serialize;

/// How a command ended, as the process's exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exit {
    /// 0: success.
    Ok,
    /// 1: bad input, bad configuration, a panic.
    Error,
    /// 2: usage (clap exits with it on a bad command line).
    Usage,
    /// 3: projects left pending after bounded recovery; a retry may build them.
    Unresolved,
    /// 4: no current snapshot.
    NoCurrent,
    /// 5: an integrity violation.
    Integrity,
    /// 6: rejected input (`publish`, or `run --fail-on-rejected`).
    Rejected,
    /// 7: the triggered Job failed.
    JobFailed,
    /// 8: the database is unavailable or not migrated.
    Database,
    /// 124: timed out waiting.
    Timeout,
}

impl Exit {
    /// Every exit code, in the contract's table order.
    pub const ALL: [Exit; 10] = [
        Self::Ok,
        Self::Error,
        Self::Usage,
        Self::Unresolved,
        Self::NoCurrent,
        Self::Integrity,
        Self::Rejected,
        Self::JobFailed,
        Self::Database,
        Self::Timeout,
    ];

    /// The number the process exits with.
    pub const fn code(self) -> i32 {
        match self {
            Self::Ok => 0,
            Self::Error => 1,
            Self::Usage => 2,
            Self::Unresolved => 3,
            Self::NoCurrent => 4,
            Self::Integrity => 5,
            Self::Rejected => 6,
            Self::JobFailed => 7,
            Self::Database => 8,
            Self::Timeout => 124,
        }
    }

    /// Whether this is success.
    pub const fn is_ok(self) -> bool {
        matches!(self, Self::Ok)
    }
}

/// The summary's `exitCode` is the number.
impl Serialize for Exit {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i32(self.code())
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::Exit;

    #[test]
    fn codes_are_distinct_and_serialize_as_numbers() {
        let mut codes: Vec<i32> = Exit::ALL.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Exit::ALL.len());
        assert_eq!(serde_json::to_string(&Exit::Timeout).unwrap(), "124");
        assert!(Exit::Ok.is_ok() && !Exit::Unresolved.is_ok());
    }
}
