//! What the scanner keeps of the three members a snapshot needs (`schema`, `package`,
//! `tools`), apart from the definition being read.

use super::*;

/// A top-level member the snapshot needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Member {
    Schema,
    Package,
    Tools,
}

impl Member {
    pub(super) fn of(key: &str) -> Option<Self> {
        match key {
            "schema" => Some(Self::Schema),
            "package" => Some(Self::Package),
            "tools" => Some(Self::Tools),
            _ => None,
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// A string member that must be a short string (`package.name`, `package.version`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) enum Field {
    #[default]
    Missing,
    NotString,
    /// Longer than [`SMALL_TEXT_BYTES`] of text: its first bytes and its length.
    Long(String, u64),
    Str(String),
}

/// The member of `package` whose value is read (`name` or `version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PackageField {
    Name,
    Version,
}

impl PackageField {
    /// Its slot in a `package` object.
    pub(super) fn of<'a>(self, name: &'a mut Field, version: &'a mut Field) -> &'a mut Field {
        match self {
            Self::Name => name,
            Self::Version => version,
        }
    }
}

/// What the document's `package` member was seen to be.
#[derive(Debug, Default)]
pub(super) enum Package {
    #[default]
    Missing,
    NotObject,
    Object {
        name: Field,
        version: Field,
    },
}

/// What the document's `schema` member was seen to be.
#[derive(Debug, Default)]
pub(super) enum Schema {
    #[default]
    Missing,
    Right,
    /// Its text quoted for the message.
    Wrong(String),
}

/// What the document's `tools` member was seen to be.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) enum Tools {
    #[default]
    Absent,
    NotArray,
    Array,
}

/// A container of the definition being built.
#[derive(Debug)]
pub(super) enum Frame {
    Array(Vec<Value>),
    Object(Map<String, Value>, Option<String>),
}
