//! Bounded quotation of input in human text.
//!
//! Every detail, log line, Event and `explain` line that quotes input goes through [`quote`]:
//! at most [`QUOTE_BYTES`] of the input, then the full length, so no input (a 24 MB tool name,
//! a schema array, a package name) can make an output line or a stored rejection row large
//! (contract section 10).

use std::fmt;

/// The most bytes of an input value that any message quotes.
pub const QUOTE_BYTES: usize = 256;

/// The most bytes of one human detail (a rejection's, an outcome's): a detail quotes a few
/// values, each bounded by [`QUOTE_BYTES`], so this is only the last line of defence.
pub const MAX_DETAIL_BYTES: usize = 2048;

/// `text` as a Rust-style quoted string, cut to its first [`QUOTE_BYTES`] bytes (at a character
/// boundary) with the full length after it when it is longer.
pub fn quote(text: &str) -> Quoted<'_> {
    Quoted(text)
}

/// The value [`quote`] returns; formats without allocating the input again.
#[derive(Debug, Clone, Copy)]
pub struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        if text.len() <= QUOTE_BYTES {
            return write!(f, "{text:?}");
        }
        let cut = floor_char_boundary(text, QUOTE_BYTES);
        write!(f, "{:?}… ({} bytes)", &text[..cut], text.len())
    }
}

/// An id or name from input as a person reads it: as it is when it is plain (at most
/// [`QUOTE_BYTES`], no control, format or whitespace character, no quote or backslash), else
/// [`quote`]d, so a terminal escape, a line break or a 100 KB id never reaches a line raw and
/// whole, while `demo-1` still reads `demo-1`.
pub fn shown(text: &str) -> Shown<'_> {
    Shown(text)
}

/// The value [`shown`] returns.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(&'a str);

/// Whether `c` may stand in a line unquoted.
fn plain(c: char) -> bool {
    !c.is_control()
        && !c.is_whitespace()
        && !matches!(c, '"' | '\\' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        if !text.is_empty() && text.len() <= QUOTE_BYTES && text.chars().all(plain) {
            f.write_str(text)
        } else {
            quote(text).fmt(f)
        }
    }
}

/// Raw input bytes (a JSON text that may not be UTF-8 at a cut) quoted like [`quote`].
pub fn quote_bytes(bytes: &[u8], total: u64) -> String {
    let shown = &bytes[..bytes.len().min(QUOTE_BYTES)];
    let text = String::from_utf8_lossy(shown);
    if total as usize <= QUOTE_BYTES && shown.len() == bytes.len() {
        format!("{text:?}")
    } else {
        format!("{text:?}… ({total} bytes)")
    }
}

/// `detail` cut to [`MAX_DETAIL_BYTES`] (at a character boundary), saying how long it was.
pub fn bound_detail(detail: String) -> String {
    if detail.len() <= MAX_DETAIL_BYTES {
        return detail;
    }
    let cut = floor_char_boundary(&detail, MAX_DETAIL_BYTES);
    format!("{}… (detail cut, {} bytes)", &detail[..cut], detail.len())
}

/// The largest character boundary of `text` at or below `at`.
pub fn floor_char_boundary(text: &str, at: usize) -> usize {
    if at >= text.len() {
        return text.len();
    }
    let mut i = at;
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ids_stand_as_they_are_and_anything_else_is_quoted() {
        assert_eq!(shown("demo-1").to_string(), "demo-1");
        assert_eq!(shown("@acme/tools").to_string(), "@acme/tools");
        assert_eq!(shown("").to_string(), "\"\"");
        assert_eq!(shown("a b").to_string(), "\"a b\"");
        assert_eq!(shown("x\u{1b}[2J\r\n").to_string(), "\"x\\u{1b}[2J\\r\\n\"");
        assert_eq!(shown("a\u{202e}b").to_string(), "\"a\\u{202e}b\"");
        let long = "x".repeat(100_000);
        let s = shown(&long).to_string();
        assert!(
            s.len() < QUOTE_BYTES + 40 && s.ends_with("(100000 bytes)"),
            "{s}"
        );
    }

    #[test]
    fn long_input_is_cut_with_its_length() {
        assert_eq!(quote("abc").to_string(), "\"abc\"");
        let long = "é".repeat(1000);
        let q = quote(&long).to_string();
        assert!(q.len() < QUOTE_BYTES + 40, "{}", q.len());
        assert!(q.ends_with("… (2000 bytes)"), "{q}");
        assert_eq!(quote_bytes(b"[0,0", 4), "\"[0,0\"");
        assert!(quote_bytes(&[b'0'; 300], 24_000_000).ends_with("(24000000 bytes)"));
        let d = bound_detail("x".repeat(10_000));
        assert!(d.len() < MAX_DETAIL_BYTES + 40 && d.ends_with("(detail cut, 10000 bytes)"));
    }
}
