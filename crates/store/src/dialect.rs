//! The two SQL dialects, and how one statement text serves both.
//!
//! Statements are written once, in PostgreSQL's spelling with `ql3.`-qualified names, and three
//! spots differ: SQLite has no schemas (`ql3.` goes), and two functions are spelled
//! differently (`LENGTH_FN`, `COMMITTED_AT`). [`statement!`](crate::statement) renders a
//! constant text for both dialects at compile time into a [`Statement`]; [`Dialect::render`]
//! does the same to a text made at run time (the importer's batches, the tests' statements),
//! from the same table of differences.

use std::borrow::Cow;

/// Which SQL dialect a store speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// PostgreSQL 15 or newer, objects in schema `ql3`.
    Postgres,
    /// SQLite, one file.
    Sqlite,
}

/// What PostgreSQL's text replaces (the schema stays).
pub const POSTGRES: [(&str, &str); 2] = [
    ("LENGTH_FN", "octet_length"),
    (
        "COMMITTED_AT",
        "to_char(s.committed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')",
    ),
];

/// What SQLite's text replaces: it has no schemas, and its own function names.
pub const SQLITE: [(&str, &str); 3] = [
    ("ql3.", ""),
    ("LENGTH_FN", "length"),
    ("COMMITTED_AT", "s.committed_at"),
];

impl Dialect {
    /// The dialect a URL names, if any.
    pub fn of_url(url: &str) -> Option<Self> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Self::Postgres)
        } else if url.starts_with("sqlite:") {
            Some(Self::Sqlite)
        } else {
            None
        }
    }

    /// The differences this dialect's text takes.
    const fn differences(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Postgres => &POSTGRES,
            Self::Sqlite => &SQLITE,
        }
    }

    /// A text made at run time, in this dialect (what [`statement!`](crate::statement) does to
    /// a constant at compile time).
    pub fn render(self, text: &str) -> Cow<'_, str> {
        // The same left-to-right pass as `render` below, by the same matcher. A match starts
        // with an ASCII byte, so it always stands at a character boundary.
        let (table, bytes) = (self.differences(), text.as_bytes());
        let mut out = String::new();
        let (mut at, mut copied) = (0, 0);
        while at < bytes.len() {
            match difference_at(bytes, at, table) {
                Some(d) => {
                    out.push_str(&text[copied..at]);
                    out.push_str(table[d].1);
                    at += table[d].0.len();
                    copied = at;
                }
                None => at += 1,
            }
        }
        if copied == 0 {
            return Cow::Borrowed(text);
        }
        out.push_str(&text[copied..]);
        Cow::Owned(out)
    }
}

/// One statement, rendered for each dialect at compile time ([`statement!`](crate::statement)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Statement {
    postgres: &'static str,
    sqlite: &'static str,
}

impl Statement {
    /// Made by [`statement!`](crate::statement) from the two rendered texts.
    #[doc(hidden)]
    pub const fn new(postgres: &'static str, sqlite: &'static str) -> Self {
        Self { postgres, sqlite }
    }

    /// The statement's text in `dialect`.
    pub const fn text(self, dialect: Dialect) -> &'static str {
        match dialect {
            Dialect::Postgres => self.postgres,
            Dialect::Sqlite => self.sqlite,
        }
    }
}

/// Whether `pattern` stands in `text` at byte `at`.
const fn stands_at(text: &[u8], at: usize, pattern: &[u8]) -> bool {
    if at + pattern.len() > text.len() {
        return false;
    }
    let mut i = 0;
    while i < pattern.len() {
        if text[at + i] != pattern[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The difference that stands in `text` at `at`, if one does (the first in table order).
const fn difference_at(text: &[u8], at: usize, table: &[(&str, &str)]) -> Option<usize> {
    let mut d = 0;
    while d < table.len() {
        if stands_at(text, at, table[d].0.as_bytes()) {
            return Some(d);
        }
        d += 1;
    }
    None
}

/// The length of `text` once `table` is applied (left to right, no overlaps).
#[doc(hidden)]
pub const fn rendered_len(text: &str, table: &[(&str, &str)]) -> usize {
    let bytes = text.as_bytes();
    let (mut at, mut len) = (0, 0);
    while at < bytes.len() {
        match difference_at(bytes, at, table) {
            Some(d) => {
                at += table[d].0.len();
                len += table[d].1.len();
            }
            None => {
                at += 1;
                len += 1;
            }
        }
    }
    len
}

/// `text` with `table` applied, as `N` bytes (`N` is [`rendered_len`]).
#[doc(hidden)]
pub const fn render<const N: usize>(text: &str, table: &[(&str, &str)]) -> [u8; N] {
    let bytes = text.as_bytes();
    let mut out = [0u8; N];
    let (mut at, mut len) = (0, 0);
    while at < bytes.len() {
        match difference_at(bytes, at, table) {
            Some(d) => {
                let to = table[d].1.as_bytes();
                let mut i = 0;
                while i < to.len() {
                    out[len + i] = to[i];
                    i += 1;
                }
                at += table[d].0.len();
                len += to.len();
            }
            None => {
                out[len] = bytes[at];
                at += 1;
                len += 1;
            }
        }
    }
    out
}

/// Bytes that [`render`] made from UTF-8 text and UTF-8 replacements, as text.
#[doc(hidden)]
pub const fn as_text(bytes: &'static [u8]) -> &'static str {
    match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(_) => panic!("a rendered statement is not UTF-8"),
    }
}

/// A [`Statement`] from a constant text written in PostgreSQL's spelling with `ql3.` names,
/// rendered for both dialects while the crate compiles.
#[macro_export]
macro_rules! statement {
    ($text:expr) => {{
        const TEXT: &str = $text;
        const PG_LEN: usize = $crate::dialect::rendered_len(TEXT, &$crate::dialect::POSTGRES);
        const LITE_LEN: usize = $crate::dialect::rendered_len(TEXT, &$crate::dialect::SQLITE);
        const PG: [u8; PG_LEN] = $crate::dialect::render(TEXT, &$crate::dialect::POSTGRES);
        const LITE: [u8; LITE_LEN] = $crate::dialect::render(TEXT, &$crate::dialect::SQLITE);
        $crate::dialect::Statement::new(
            $crate::dialect::as_text(&PG),
            $crate::dialect::as_text(&LITE),
        )
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: Statement =
        crate::statement!("SELECT LENGTH_FN(r.content), COMMITTED_AT FROM ql3.t AS s, ql3.u");

    #[test]
    fn a_constant_renders_as_a_text_made_at_run_time_does() {
        let text = "SELECT LENGTH_FN(r.content), COMMITTED_AT FROM ql3.t AS s, ql3.u";
        for d in [Dialect::Postgres, Dialect::Sqlite] {
            assert_eq!(SAMPLE.text(d), d.render(text));
        }
        assert_eq!(
            SAMPLE.text(Dialect::Sqlite),
            "SELECT length(r.content), s.committed_at FROM t AS s, u"
        );
        assert!(
            SAMPLE
                .text(Dialect::Postgres)
                .starts_with("SELECT octet_length(r.content), to_char(")
        );
        assert!(
            SAMPLE
                .text(Dialect::Postgres)
                .ends_with("FROM ql3.t AS s, ql3.u")
        );
    }

    #[test]
    fn a_text_without_differences_is_borrowed() {
        assert!(matches!(
            Dialect::Sqlite.render("SELECT 1"),
            Cow::Borrowed(_)
        ));
    }
}
