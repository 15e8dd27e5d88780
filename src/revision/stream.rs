//! A revision read in slices, so a 24 MiB revision never has to be in memory at once.
//!
//! [`RevisionStream`] takes the bytes in any slicing and gives the same answer as
//! [`super::extract`] over the whole: it hashes them, checks UTF-8 and nesting depth, and checks
//! the JSON syntax of every member with a push scanner that keeps only the three members a
//! snapshot needs (`schema`, `package`, `tools`), which are then parsed strictly exactly as the
//! whole-document reader parses them. Problems rank as in the whole read: bad UTF-8 anywhere,
//! then nesting too deep anywhere, then the first syntax problem in the text.
//!
//! The scanner accepts what `serde_json` accepts when it skips a value (RFC 8259; escapes are
//! checked for form only, as `serde_json` does for skipped strings); a property test holds the
//! two readers to the same verdicts over arbitrary slicings.

use std::fmt;

use serde::de::DeserializeSeed;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::{Contribution, Kept, MAX_REVISION_DEPTH, malformed, validate_kept};
use crate::canonical::{DepthScan, JsonError, StrictValue};
use crate::model::Digest;
use crate::rejection::Rejection;

/// Reads one revision slice by slice. Feed every slice in order, then [`finish`](Self::finish).
#[derive(Debug)]
pub struct RevisionStream {
    hasher: Sha256,
    len: u64,
    utf8: Utf8Check,
    depth: DepthScan,
    scanner: Scanner,
}

/// A revision read to its end: its digest, and its kept members or why it is not a document.
#[derive(Debug)]
pub struct Streamed {
    /// SHA-256 of every byte fed.
    pub digest: Digest,
    /// How many bytes were fed.
    pub len: u64,
    kept: Result<Kept, String>,
}

impl Default for RevisionStream {
    fn default() -> Self {
        Self::new()
    }
}

impl RevisionStream {
    /// A reader at the start of a revision.
    pub fn new() -> Self {
        Self {
            hasher: Sha256::new(),
            len: 0,
            utf8: Utf8Check::default(),
            depth: DepthScan::new(MAX_REVISION_DEPTH),
            scanner: Scanner::default(),
        }
    }

    /// The next slice of the revision.
    pub fn feed(&mut self, slice: &[u8]) {
        self.hasher.update(slice);
        self.utf8.feed(self.len, slice);
        self.depth.feed(slice);
        self.scanner.feed(slice);
        self.len += slice.len() as u64;
    }

    /// Ends the revision.
    pub fn finish(self) -> Streamed {
        let digest = Digest::from_sha256(self.hasher.finalize().as_slice());
        let kept = if let Some(at) = self.utf8.finish(self.len) {
            Err(JsonError::NotUtf8(format!("invalid utf-8 sequence at byte {at}")).to_string())
        } else if self.depth.too_deep_at().is_some() {
            Err(JsonError::TooDeep(MAX_REVISION_DEPTH).to_string())
        } else {
            self.scanner.finish()
        };
        Streamed {
            digest,
            len: self.len,
            kept,
        }
    }
}

impl Streamed {
    /// The package's contribution, checked exactly as [`super::extract`] checks a whole revision.
    pub fn extract(
        self,
        package_name: &str,
        approved_permissions: &[String],
    ) -> Result<Contribution, Rejection> {
        let kept = self.kept.map_err(|e| malformed(package_name, e))?;
        validate_kept(kept, package_name, approved_permissions)
    }
}

/// UTF-8 validation across slice boundaries: a sequence cut by a boundary is carried over.
#[derive(Debug, Default)]
struct Utf8Check {
    carry: [u8; 4],
    carried: usize,
    /// Offset of the first byte of the first invalid sequence.
    bad: Option<u64>,
}

impl Utf8Check {
    fn feed(&mut self, base: u64, mut slice: &[u8]) {
        if self.bad.is_some() {
            return;
        }
        let mut base = base;
        if self.carried > 0 {
            let want = match self.carry[0] {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            let take = (want - self.carried).min(slice.len());
            self.carry[self.carried..self.carried + take].copy_from_slice(&slice[..take]);
            self.carried += take;
            if self.carried < want {
                return;
            }
            let start = base - (self.carried - take) as u64;
            if std::str::from_utf8(&self.carry[..want]).is_err() {
                self.bad = Some(start);
                return;
            }
            self.carried = 0;
            slice = &slice[take..];
            base += take as u64;
        }
        if let Err(e) = std::str::from_utf8(slice) {
            let at = e.valid_up_to();
            if e.error_len().is_some() {
                self.bad = Some(base + at as u64);
            } else {
                // A valid start of a sequence the next slice completes (at most three bytes).
                let rest = &slice[at..];
                self.carry[..rest.len()].copy_from_slice(rest);
                self.carried = rest.len();
            }
        }
    }

    fn finish(&self, len: u64) -> Option<u64> {
        self.bad
            .or((self.carried > 0).then(|| len - self.carried as u64))
    }
}

/// A top-level member the snapshot keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Member {
    Schema,
    Package,
    Tools,
}

impl Member {
    fn of(key: &str) -> Option<Self> {
        match key {
            "schema" => Some(Self::Schema),
            "package" => Some(Self::Package),
            "tools" => Some(Self::Tools),
            _ => None,
        }
    }

    fn slot(self, kept: &mut Kept) -> &mut Option<Value> {
        match self {
            Self::Schema => &mut kept.schema,
            Self::Package => &mut kept.package,
            Self::Tools => &mut kept.tools,
        }
    }
}

/// What the scanner expects next, between tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// The top-level value.
    Document,
    /// A value (after `:`, or after `,` in an array).
    Value,
    /// A value or `]` (after `[`).
    ValueOrClose,
    /// A member name or `}` (after `{`).
    KeyOrClose,
    /// A member name (after `,` in an object).
    Key,
    /// `:` after a member name.
    Colon,
    /// `,` or the container's closing bracket, after a value.
    CommaOrClose,
    /// Nothing but whitespace, after the top-level value.
    End,
}

/// Where a number is, by the RFC 8259 grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpInt,
}

/// The token being read, when a slice boundary can fall inside one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    None,
    /// Inside a string; `hex` counts the `\u` digits still due, `escape` a pending backslash.
    Str {
        key: bool,
        escape: bool,
        hex: u8,
    },
    Num(Num),
    Lit {
        word: &'static [u8],
        at: u8,
    },
}

/// The push scanner: JSON syntax of the whole document, the top-level member names, and the
/// raw bytes of the kept members (parsed strictly as each ends).
#[derive(Debug)]
struct Scanner {
    expect: Expect,
    token: Token,
    /// Open containers, outermost first: `true` for an object.
    stack: Vec<bool>,
    /// The raw bytes of the top-level member name being read (quotes included).
    key: Vec<u8>,
    /// The kept member whose value comes next or is being read.
    member: Option<Member>,
    /// The raw bytes of that value, while it is read.
    capture: Option<Vec<u8>>,
    kept: Kept,
    error: Option<String>,
}

impl Default for Scanner {
    fn default() -> Self {
        Self {
            expect: Expect::Document,
            token: Token::None,
            stack: Vec::new(),
            key: Vec::new(),
            member: None,
            capture: None,
            kept: Kept::default(),
            error: None,
        }
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Scanner {
    fn fail(&mut self, why: impl fmt::Display) {
        if self.error.is_none() {
            self.error = Some(why.to_string());
        }
    }

    fn finish(mut self) -> Result<Kept, String> {
        if self.error.is_none() {
            match (self.expect, self.token) {
                (Expect::End, Token::None) => {}
                _ => self.fail("EOF while parsing the document"),
            }
        }
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.kept),
        }
    }

    fn feed(&mut self, slice: &[u8]) {
        // Where the captured value's bytes start in this slice, when one is being captured.
        let mut from = 0;
        let mut i = 0;
        while i < slice.len() && self.error.is_none() {
            let b = slice[i];
            match self.token {
                Token::Str { key, escape, hex } => {
                    let start = i;
                    if hex > 0 {
                        if !b.is_ascii_hexdigit() {
                            self.fail("invalid \\u escape in a string");
                            break;
                        }
                        self.token = Token::Str {
                            key,
                            escape: false,
                            hex: hex - 1,
                        };
                        i += 1;
                    } else if escape {
                        let hex = match b {
                            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 0,
                            b'u' => 4,
                            _ => {
                                self.fail("invalid escape in a string");
                                break;
                            }
                        };
                        self.token = Token::Str {
                            key,
                            escape: false,
                            hex,
                        };
                        i += 1;
                    } else {
                        let run =
                            memchr::memchr2(b'"', b'\\', &slice[i..]).unwrap_or(slice.len() - i);
                        if slice[i..i + run]
                            .iter()
                            .copied()
                            .min()
                            .is_some_and(|m| m < 0x20)
                        {
                            self.fail("control character while parsing a string");
                            break;
                        }
                        i += run;
                        if i < slice.len() {
                            if slice[i] == b'\\' {
                                self.token = Token::Str {
                                    key,
                                    escape: true,
                                    hex: 0,
                                };
                            } else {
                                self.token = Token::None;
                            }
                            i += 1;
                        }
                    }
                    if key && self.stack.len() == 1 {
                        self.key.extend_from_slice(&slice[start..i]);
                    }
                    if self.token == Token::None {
                        if !key {
                            self.value_done(slice, &mut from, i);
                        } else if self.stack.len() == 1 {
                            self.end_key();
                        } else {
                            self.expect = Expect::Colon;
                        }
                    }
                }
                Token::Num(n) => {
                    let next = match (n, b) {
                        (Num::Minus, b'0') => Some(Num::Zero),
                        (Num::Minus, b'1'..=b'9') => Some(Num::Int),
                        (Num::Int, b'0'..=b'9') => Some(Num::Int),
                        (Num::Zero | Num::Int, b'.') => Some(Num::Dot),
                        (Num::Zero | Num::Int | Num::Frac, b'e' | b'E') => Some(Num::Exp),
                        (Num::Dot | Num::Frac, b'0'..=b'9') => Some(Num::Frac),
                        (Num::Exp, b'+' | b'-') => Some(Num::ExpSign),
                        (Num::Exp | Num::ExpSign | Num::ExpInt, b'0'..=b'9') => Some(Num::ExpInt),
                        _ => None,
                    };
                    match next {
                        Some(n) => {
                            self.token = Token::Num(n);
                            i += 1;
                        }
                        None if matches!(n, Num::Zero | Num::Int | Num::Frac | Num::ExpInt)
                            && !b.is_ascii_digit() =>
                        {
                            // The number ended before this byte, which is read again.
                            self.token = Token::None;
                            self.value_done(slice, &mut from, i);
                        }
                        None => {
                            self.fail("invalid number");
                            break;
                        }
                    }
                }
                Token::Lit { word, at } => {
                    if word[usize::from(at)] != b {
                        self.fail("expected ident");
                        break;
                    }
                    i += 1;
                    if usize::from(at) + 1 == word.len() {
                        self.token = Token::None;
                        self.value_done(slice, &mut from, i);
                    } else {
                        self.token = Token::Lit { word, at: at + 1 };
                    }
                }
                Token::None => {
                    if is_ws(b) {
                        i += 1;
                        continue;
                    }
                    self.structural(slice, &mut from, i);
                    i += 1;
                }
            }
        }
        if let Some(buf) = &mut self.capture {
            buf.extend_from_slice(&slice[from.min(slice.len())..]);
        }
    }

    /// One structural byte (not whitespace, not inside a token) at `i`.
    fn structural(&mut self, slice: &[u8], from: &mut usize, i: usize) {
        let b = slice[i];
        match self.expect {
            Expect::Document => {
                if b == b'{' {
                    self.open(true);
                } else {
                    self.fail("invalid type: the document is not an object");
                }
            }
            Expect::Value | Expect::ValueOrClose => {
                if b == b']' && self.expect == Expect::ValueOrClose {
                    self.close(slice, from, i, false);
                    return;
                }
                self.begin_value(from, i);
                match b {
                    b'{' => self.open(true),
                    b'[' => self.open(false),
                    b'"' => {
                        self.token = Token::Str {
                            key: false,
                            escape: false,
                            hex: 0,
                        };
                    }
                    b'-' => self.token = Token::Num(Num::Minus),
                    b'0' => self.token = Token::Num(Num::Zero),
                    b'1'..=b'9' => self.token = Token::Num(Num::Int),
                    b't' => {
                        self.token = Token::Lit {
                            word: b"true",
                            at: 1,
                        }
                    }
                    b'f' => {
                        self.token = Token::Lit {
                            word: b"false",
                            at: 1,
                        }
                    }
                    b'n' => {
                        self.token = Token::Lit {
                            word: b"null",
                            at: 1,
                        }
                    }
                    _ => self.fail("expected value"),
                }
            }
            Expect::KeyOrClose | Expect::Key => {
                if b == b'}' && self.expect == Expect::KeyOrClose {
                    self.close(slice, from, i, true);
                } else if b == b'"' {
                    self.token = Token::Str {
                        key: true,
                        escape: false,
                        hex: 0,
                    };
                    if self.stack.len() == 1 {
                        self.key.clear();
                        self.key.push(b'"');
                    }
                } else if self.expect == Expect::Key && b == b'}' {
                    self.fail("trailing comma");
                } else {
                    self.fail("key must be a string");
                }
            }
            Expect::Colon => {
                if b == b':' {
                    self.expect = Expect::Value;
                } else {
                    self.fail("expected `:`");
                }
            }
            Expect::CommaOrClose => {
                let object = self.stack.last().copied().unwrap_or(false);
                match b {
                    b',' => {
                        self.expect = if object { Expect::Key } else { Expect::Value };
                    }
                    b'}' if object => self.close(slice, from, i, true),
                    b']' if !object => self.close(slice, from, i, false),
                    _ => self.fail("expected `,` or the end of the container"),
                }
            }
            Expect::End => self.fail("trailing characters"),
        }
    }

    /// A value starts at `i`: capture it when it is a kept top-level member's.
    fn begin_value(&mut self, from: &mut usize, i: usize) {
        if self.stack.len() == 1 && self.member.is_some() {
            self.capture = Some(Vec::new());
            *from = i;
        }
    }

    fn open(&mut self, object: bool) {
        if self.stack.len() >= MAX_REVISION_DEPTH {
            // The depth check reports it; nothing deeper is scanned.
            self.fail(JsonError::TooDeep(MAX_REVISION_DEPTH));
            return;
        }
        self.stack.push(object);
        self.expect = if object {
            Expect::KeyOrClose
        } else {
            Expect::ValueOrClose
        };
    }

    fn close(&mut self, slice: &[u8], from: &mut usize, i: usize, object: bool) {
        if self.stack.pop() != Some(object) {
            self.fail("mismatched closing bracket");
            return;
        }
        self.value_done(slice, from, i + 1);
    }

    /// A value ended just before `end`.
    fn value_done(&mut self, slice: &[u8], from: &mut usize, end: usize) {
        self.expect = if self.stack.is_empty() {
            Expect::End
        } else {
            Expect::CommaOrClose
        };
        if self.stack.len() != 1 {
            return;
        }
        if let (Some(member), Some(mut raw)) = (self.member.take(), self.capture.take()) {
            raw.extend_from_slice(&slice[*from..end]);
            let mut de = serde_json::Deserializer::from_slice(&raw);
            de.disable_recursion_limit();
            match StrictValue
                .deserialize(&mut de)
                .and_then(|v| de.end().map(|()| v))
            {
                Ok(v) => *member.slot(&mut self.kept) = Some(v),
                Err(e) => self.fail(e),
            }
        }
    }

    /// A top-level member name ended: decide whether its value is kept.
    fn end_key(&mut self) {
        self.expect = Expect::Colon;
        let name: String = match serde_json::from_slice(&self.key) {
            Ok(name) => name,
            Err(e) => return self.fail(e),
        };
        self.member = Member::of(&name);
        if let Some(m) = self.member
            && m.slot(&mut self.kept).is_some()
        {
            self.fail(format_args!("duplicate member name {name:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::rejection::RejectionCode;

    const HEAD: &str = r#""package":{"name":"p","version":"1.0.0"},"schema":"qinglong/materialized-revision@v1","tools":[]"#;

    /// The verdict of both readers, the streamed one fed a byte at a time.
    fn both(doc: &[u8]) -> (Option<RejectionCode>, Option<RejectionCode>) {
        let whole = super::super::extract(doc, "p", &[]).err().map(|r| r.code);
        let mut s = RevisionStream::new();
        for b in doc.chunks(1) {
            s.feed(b);
        }
        let streamed = s.finish().extract("p", &[]).err().map(|r| r.code);
        (whole, streamed)
    }

    #[test]
    fn skipped_values_are_checked_as_serde_json_checks_them() {
        let values = [
            "0",
            "-0",
            "12",
            "1.5",
            "1.5e-3",
            "1E+5",
            "0.5E5",
            "-12.25e10",
            "01",
            "1.5.3",
            "-",
            "-a",
            "1e",
            "1e+",
            ".5",
            "1.",
            "+1",
            "true",
            "false",
            "null",
            "tru",
            "truex",
            "nul",
            "[]",
            "[[]]",
            "[1,2]",
            "[1,]",
            "[,]",
            "[1 2]",
            "{}",
            "{,}",
            r#"{"a":1}"#,
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{"a":}"#,
            r#"{1:2}"#,
            r#"{"a":1}}"#,
            "[1]]",
            "]",
            r#""\x""#,
            r#""\u12G4""#,
            r#""\ud800""#,
            r#""\u00e9\n\t\/\"""#,
            "\"a\u{1}b\"",
            "\"a\u{7f}b\"",
            r#""unterminated"#,
            "\"é\"",
            r#"[{"a":[{"b":null}]}]"#,
        ];
        for v in values {
            for doc in [
                format!(r#"{{"x":{v},{HEAD}}}"#),
                format!(r#"{{{HEAD},"x":{v}}}"#),
                format!(r#"{{ "x" : [ {v} ] , {HEAD} }}"#),
            ] {
                let (whole, streamed) = both(doc.as_bytes());
                assert_eq!(whole, streamed, "{doc}");
            }
        }
    }

    #[test]
    fn the_document_and_its_member_names_are_checked_as_serde_json_checks_them() {
        let docs = [
            String::new(),
            " ".into(),
            "[]".into(),
            "{}".into(),
            format!("{{{HEAD}}} x"),
            format!("{{{HEAD}}} \n\t\r"),
            format!(" \n{{{HEAD}}}"),
            format!("{{{HEAD}"),
            format!(r#"{{{HEAD},"sch\u0065ma":"x"}}"#),
            format!(r#"{{{HEAD},"schema":"x"}}"#),
            format!(r#"{{{HEAD},"files":1,"files":2}}"#),
            format!(r#"{{"\ud800":1,{HEAD}}}"#),
            format!(r#"{{"t\u006fols":[],"x":1,{}}}"#, &HEAD[..HEAD.len() - 11]),
            "\u{feff}{}".into(),
            format!("{{{HEAD},\"x\":\"\u{e9}\"}}"),
        ];
        for doc in &docs {
            let (whole, streamed) = both(doc.as_bytes());
            assert_eq!(whole, streamed, "{doc}");
        }
        let mut bad = format!(r#"{{{HEAD},"x":"é"}}"#).into_bytes();
        let at = bad.len() - 3;
        bad[at] = 0xC3;
        bad[at + 1] = 0x28;
        assert_eq!(
            both(&bad),
            (
                Some(RejectionCode::RevisionMalformed),
                Some(RejectionCode::RevisionMalformed)
            )
        );
        let deep = format!(r#"{{{HEAD},"x":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        assert_eq!(
            both(deep.as_bytes()),
            (
                Some(RejectionCode::RevisionMalformed),
                Some(RejectionCode::RevisionMalformed)
            )
        );
    }

    #[test]
    fn problems_rank_as_in_the_whole_read() {
        // Bad UTF-8 late in the text outranks a syntax error early in it; so does depth.
        let mut doc = format!(r#"{{"x":01,{HEAD},"y":"é"}}"#).into_bytes();
        let n = doc.len();
        doc[n - 3] = 0xFF;
        let mut s = RevisionStream::new();
        s.feed(&doc);
        let why = s.finish().kept.unwrap_err();
        assert!(why.contains("utf-8"), "{why}");
        let doc = format!(
            r#"{{"x":01,{HEAD},"y":{}{}}}"#,
            "[".repeat(129),
            "]".repeat(129)
        );
        let mut s = RevisionStream::new();
        s.feed(doc.as_bytes());
        let why = s.finish().kept.unwrap_err();
        assert_eq!(why, JsonError::TooDeep(MAX_REVISION_DEPTH).to_string());
    }
}
