//! The revision reader: bytes in any slicing → one package's contribution, in memory bounded by
//! the limits whatever the input.
//!
//! [`RevisionStream`] hashes the bytes, checks UTF-8 and nesting depth, and checks the JSON
//! syntax of the whole document with a push scanner. Of the three members a snapshot needs it
//! builds only what the limits need (contract section 2):
//!
//! - `schema`: at most [`SMALL_TEXT_BYTES`] of its text (the one legal value is 33 characters);
//! - `package`: the strings `name` and `version`, each at most [`SMALL_TEXT_BYTES`] of text;
//!   every other member of it is skipped as an ignored member is (well-formed JSON only);
//! - `tools`: one definition at a time, built into a value only while its canonical size can
//!   still be within [`MAX_DEFINITION_BYTES`], validated as soon as it closes and dropped; of
//!   the valid ones at most [`KEPT_DEFINITIONS`] are kept (a count goes on past them), and their
//!   bodies only while they add up to at most [`MAX_SNAPSHOT_BYTES`].
//!
//! So what a reader holds besides the slice it is given is at most [`HELD_BYTES`], which the
//! coordinator reserves against the memory budget before it reads. Problems rank as contract
//! section 6 ranks them: bad UTF-8 anywhere, then nesting too deep anywhere, then the first
//! syntax or strictness problem in the text (a second `schema`, `package`, `tools`,
//! `package.name` or `package.version`; lone surrogates in any member name of the document or
//! of `package` and anywhere in a kept member; numbers beyond a double in a kept member), then
//! the document's shape, then the package name, then the first failing definition in array
//! order. A duplicate member name inside a definition makes that definition invalid, wherever
//! it sits (a definition is built only up to its size limit, so no other rule could hold).

use std::fmt;

use serde_json::{Map, Number, Value};
use sha2::{Digest as _, Sha256};

use super::{
    Contribution, REVISION_SCHEMA, ValidatedDefinition, malformed, unbuilt_definition,
    validate_definition,
};
use crate::canonical::{DepthScan, JsonError};
use crate::limits::{
    MAX_DEFINITION_BYTES, MAX_DEFINITIONS, MAX_REVISION_DEPTH, MAX_SNAPSHOT_BYTES,
};
use crate::model::Digest;
use crate::quote::{quote, quote_bytes};
use crate::rejection::{Rejection, RejectionCode as Code};

/// Most text kept of `schema`, `package.name` and `package.version`: none of them is ever
/// legitimately longer (a package name is at most 214 characters, six bytes each escaped).
pub const SMALL_TEXT_BYTES: usize = 4096;

/// Valid definitions one revision keeps: one more than a project may have, which is enough for
/// the set checks to refuse the project.
pub const KEPT_DEFINITIONS: usize = MAX_DEFINITIONS + 1;

/// Most raw bytes of a member name that are decoded to match it against a name the reader
/// looks for (the longest, `connectionString`, is 96 bytes fully escaped).
const NAME_BYTES: usize = 128;

/// Number tokens up to this many bytes are parsed as written; longer ones are first reduced to
/// this many significant digits and a sticky digit, which rounds to the same double.
const NUMBER_DIGITS: usize = 800;

/// Bytes a definition's value tree may take per byte of its canonical size, at most: an array
/// of zeros (`0,` is two canonical bytes, one 32-byte value, up to twice that while its vector
/// grows).
const TREE_BYTES_PER_CANONICAL_BYTE: u64 = 32;

/// The most a reader holds besides the slice it is fed: the definition being built (its value
/// tree and the raw text of one string, six bytes per character at most), the kept valid
/// definitions with their bodies, and the small texts. The coordinator reserves it against the
/// memory budget for every revision it reads.
pub const HELD_BYTES: u64 = MAX_DEFINITION_BYTES * TREE_BYTES_PER_CANONICAL_BYTE
    + 6 * MAX_DEFINITION_BYTES
    + MAX_SNAPSHOT_BYTES
    + MAX_DEFINITION_BYTES
    + KEPT_DEFINITIONS as u64 * 1024
    + 4 * SMALL_TEXT_BYTES as u64;

/// Reads one revision slice by slice. Feed every slice in order, then [`finish`](Self::finish).
#[derive(Debug)]
pub struct RevisionStream {
    hasher: Sha256,
    len: u64,
    utf8: Utf8Check,
    depth: DepthScan,
    scanner: Scanner,
}

/// A revision read to its end: its digest, and its contribution or the one rejection.
#[derive(Debug)]
pub struct Streamed {
    /// SHA-256 of every byte fed.
    pub digest: Digest,
    /// How many bytes were fed.
    pub len: u64,
    verdict: Result<Contribution, Rejection>,
}

impl RevisionStream {
    /// A reader at the start of the revision of `package_name`, whose generation approved
    /// `approved_permissions`.
    pub fn new(package_name: &str, approved_permissions: &[String]) -> Self {
        Self {
            hasher: Sha256::new(),
            len: 0,
            utf8: Utf8Check::default(),
            depth: DepthScan::new(MAX_REVISION_DEPTH),
            scanner: Scanner::new(package_name, approved_permissions),
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
        let package = self.scanner.package_name.clone();
        let verdict = if let Some(at) = self.utf8.finish(self.len) {
            Err(malformed(
                &package,
                JsonError::NotUtf8(format!("invalid utf-8 sequence at byte {at}")),
            ))
        } else if self.depth.too_deep_at().is_some() {
            Err(malformed(&package, JsonError::TooDeep(MAX_REVISION_DEPTH)))
        } else {
            self.scanner.finish()
        };
        Streamed {
            digest,
            len: self.len,
            verdict,
        }
    }
}

impl Streamed {
    /// The package's contribution, or the first problem in contract section 6 order.
    pub fn extract(self) -> Result<Contribution, Rejection> {
        self.verdict
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

/// A top-level member the snapshot needs.
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

    fn index(self) -> usize {
        self as usize
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

/// A string being read: escape state, and the surrogate check of a kept string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Str {
    key: bool,
    escape: bool,
    /// `\u` digits still due.
    hex: u8,
    /// The `\u` code read so far.
    code: u16,
    /// A high surrogate escape was read and its low half must follow at once.
    high: bool,
    /// Whether lone surrogates are errors here (kept members and top-level names).
    strict: bool,
}

/// The token being read, when a slice boundary can fall inside one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    None,
    Str(Str),
    Num(Num),
    Lit { word: &'static [u8], at: u8 },
}

/// What kind of value starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Object,
    Array,
    String,
    Number,
    Literal,
}

/// The text of a string or number being collected, up to a cap.
#[derive(Debug, Default)]
struct Text {
    /// Collecting at all.
    on: bool,
    bytes: Vec<u8>,
    cap: usize,
    /// Bytes seen, collected or not.
    seen: u64,
}

impl Text {
    fn start(&mut self, cap: usize) {
        self.on = true;
        self.bytes.clear();
        self.cap = cap;
        self.seen = 0;
    }

    fn push(&mut self, part: &[u8]) {
        if self.on {
            self.seen += part.len() as u64;
            let room = self.cap.saturating_sub(self.bytes.len());
            self.bytes.extend_from_slice(&part[..part.len().min(room)]);
        }
    }

    fn complete(&self) -> bool {
        self.seen as usize == self.bytes.len()
    }

    /// The string collected (quotes included), decoded; `None` when cut or not a string.
    fn decode(&self) -> Option<Result<String, String>> {
        if !self.complete() {
            return None;
        }
        let inner = self.bytes.get(1..self.bytes.len().saturating_sub(1))?;
        Some(if inner.contains(&b'\\') {
            serde_json::from_slice::<String>(&self.bytes).map_err(|e| e.to_string())
        } else {
            String::from_utf8(inner.to_vec()).map_err(|e| e.to_string())
        })
    }
}

/// A number token reduced, as it streams by, to what decides its double.
#[derive(Debug, Default)]
struct NumberText {
    raw: Vec<u8>,
    negative: bool,
    digits: Vec<u8>,
    /// A non-zero digit past the kept ones.
    sticky: bool,
    /// The value is `0.DIGITS × 10^point × 10^exponent`.
    point: i64,
    exponent: i64,
    exponent_negative: bool,
    in_fraction: bool,
    in_exponent: bool,
}

/// Far beyond any double's exponent, small enough never to overflow.
const EXPONENT_CAP: i64 = 1 << 40;

impl NumberText {
    fn start(&mut self) {
        self.raw.clear();
        self.digits.clear();
        self.negative = false;
        self.sticky = false;
        self.point = 0;
        self.exponent = 0;
        self.exponent_negative = false;
        self.in_fraction = false;
        self.in_exponent = false;
    }

    fn push(&mut self, b: u8) {
        if self.raw.len() < NUMBER_DIGITS {
            self.raw.push(b);
        }
        match b {
            b'-' if !self.in_exponent => self.negative = true,
            b'-' => self.exponent_negative = true,
            b'.' => self.in_fraction = true,
            b'e' | b'E' => self.in_exponent = true,
            b'0'..=b'9' if self.in_exponent => {
                self.exponent = (self.exponent * 10 + i64::from(b - b'0')).min(EXPONENT_CAP);
            }
            b'0' if self.digits.is_empty() && self.in_fraction => {
                self.point = (self.point - 1).max(-EXPONENT_CAP);
            }
            b'0' if self.digits.is_empty() => {}
            b'0'..=b'9' => {
                if self.digits.len() < NUMBER_DIGITS {
                    self.digits.push(b);
                } else if b != b'0' {
                    self.sticky = true;
                }
                if !self.in_fraction {
                    self.point = (self.point + 1).min(EXPONENT_CAP);
                }
            }
            _ => {}
        }
    }

    /// The number as a JSON value, or why it is not one (beyond the range of a double).
    fn value(&self) -> Result<Number, String> {
        // Short integers (the common case, and most of a hostile array of zeros) are in range
        // by construction; the scanner has checked the grammar, so a token that parses as an
        // integer is one. `-0` is left to serde_json, which reads it as the double -0.0.
        if self.raw.len() <= 18
            && self.raw != b"-0"
            && let Ok(t) = std::str::from_utf8(&self.raw)
        {
            if let Ok(n) = t.parse::<u64>() {
                return Ok(Number::from(n));
            }
            if let Ok(n) = t.parse::<i64>() {
                return Ok(Number::from(n));
            }
        }
        let text = if self.raw.len() < NUMBER_DIGITS {
            String::from_utf8_lossy(&self.raw).into_owned()
        } else if self.digits.is_empty() {
            if self.negative { "-0.0" } else { "0.0" }.to_owned()
        } else {
            let exponent = if self.exponent_negative {
                -self.exponent
            } else {
                self.exponent
            };
            format!(
                "{}0.{}{}e{}",
                if self.negative { "-" } else { "" },
                String::from_utf8_lossy(&self.digits),
                if self.sticky { "1" } else { "" },
                self.point + exponent
            )
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Number(n)) => Ok(n),
            Ok(_) => Err("invalid number".into()),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// A string member that must be a short string (`package.name`, `package.version`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
enum Field {
    #[default]
    Missing,
    NotString,
    /// Longer than [`SMALL_TEXT_BYTES`] of text: its first bytes and its length.
    Long(String, u64),
    Str(String),
}

/// What the document's `package` member was seen to be.
#[derive(Debug, Default)]
enum Package {
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
enum Schema {
    #[default]
    Missing,
    Right,
    /// Its text quoted for the message.
    Wrong(String),
}

/// What the document's `tools` member was seen to be.
#[derive(Debug, Default, PartialEq, Eq)]
enum Tools {
    #[default]
    Absent,
    NotArray,
    Array,
}

/// A container of the definition being built.
#[derive(Debug)]
enum Frame {
    Array(Vec<Value>),
    Object(Map<String, Value>, Option<String>),
}

/// The definition being read: built into a value while it can be within its size limit.
#[derive(Debug)]
struct Definition {
    index: usize,
    frames: Vec<Frame>,
    /// A lower bound of its canonical size, exact but for number spellings and escapes.
    canonical_at_least: u64,
    /// Nothing more is built (past its size limit, or a duplicate member name made it
    /// invalid): only its own member names are looked at, for a forbidden one.
    unbuilt: bool,
    /// The first duplicate member name in any of its objects, quoted.
    duplicate: Option<String>,
    /// The smallest forbidden member name among its own, built or not.
    forbidden: Option<&'static str>,
    /// Members (or items) already in each open container, to count the commas.
    counts: Vec<usize>,
}

impl Definition {
    fn new(index: usize) -> Self {
        Self {
            index,
            frames: vec![Frame::Object(Map::new(), None)],
            canonical_at_least: 2,
            unbuilt: false,
            duplicate: None,
            forbidden: None,
            counts: vec![0],
        }
    }

    /// Room left, in canonical bytes, before the definition is certainly too large.
    fn room(&self) -> u64 {
        MAX_DEFINITION_BYTES.saturating_sub(self.canonical_at_least)
    }

    fn grow(&mut self, canonical: u64) {
        self.canonical_at_least += canonical;
        if self.canonical_at_least > MAX_DEFINITION_BYTES {
            self.stop_building();
        }
    }

    /// Drops what was built: the definition is invalid whatever else it holds, and only a
    /// forbidden member among its own can still rank before that.
    fn stop_building(&mut self) {
        self.unbuilt = true;
        self.frames = Vec::new();
    }

    /// One of its own member names (depth 3), built or not: the smallest forbidden one ranks
    /// first, whatever made the definition invalid.
    fn own_member(&mut self, name: &str) {
        if let Some(f) = super::forbidden(name)
            && self.forbidden.is_none_or(|seen| f < seen)
        {
            self.forbidden = Some(f);
        }
    }

    /// A comma before the next item of the innermost container, when it is not the first.
    fn comma(&mut self) {
        if let Some(n) = self.counts.last_mut() {
            if *n > 0 {
                self.canonical_at_least += 1;
            }
            *n += 1;
        }
    }

    /// A member name of the innermost object. A name it already holds makes the definition
    /// invalid (contract section 3): it is read past like one over its size limit, so the rule
    /// is the same wherever the duplicate sits.
    fn key(&mut self, name: String) {
        self.comma();
        self.grow(name.len() as u64 + 3);
        if let Some(Frame::Object(map, pending)) = self.frames.last_mut() {
            if map.contains_key(&name) {
                self.duplicate = Some(quote(&name).to_string());
                self.stop_building();
            } else {
                *pending = Some(name);
            }
        }
    }

    /// A value of the innermost container (a finished scalar or a closed container).
    fn attach(&mut self, value: Value) {
        match self.frames.last_mut() {
            Some(Frame::Array(items)) => items.push(value),
            Some(Frame::Object(map, pending)) => {
                if let Some(k) = pending.take() {
                    map.insert(k, value);
                }
            }
            None => {}
        }
    }

    /// A scalar of `canonical` bytes at least.
    fn scalar(&mut self, value: Value, canonical: u64, in_array: bool) {
        if in_array {
            self.comma();
        }
        self.grow(canonical);
        if !self.unbuilt {
            self.attach(value);
        }
    }

    fn open(&mut self, object: bool, in_array: bool) {
        if in_array {
            self.comma();
        }
        self.counts.push(0);
        self.grow(2);
        if !self.unbuilt {
            self.frames.push(if object {
                Frame::Object(Map::new(), None)
            } else {
                Frame::Array(Vec::new())
            });
        }
    }

    fn close(&mut self) {
        self.counts.pop();
        if self.unbuilt {
            return;
        }
        let value = match self.frames.pop() {
            Some(Frame::Array(items)) => Value::Array(items),
            Some(Frame::Object(map, _)) => Value::Object(map),
            None => return,
        };
        self.attach(value);
    }
}

/// The push scanner: JSON syntax of the whole document, and what the snapshot needs of the
/// three kept members, built as they stream by.
#[derive(Debug)]
struct Scanner {
    package_name: String,
    approved: Vec<String>,
    expect: Expect,
    token: Token,
    /// Open containers, outermost first: `true` for an object.
    stack: Vec<bool>,
    /// The string or number being collected.
    text: Text,
    number: NumberText,
    /// Whether the number being read is collected.
    number_on: bool,
    /// The kept member whose value comes next or is being read.
    member: Option<Member>,
    /// Kept members seen, by [`Member::index`].
    seen: [bool; 3],
    schema: Schema,
    package: Package,
    /// The `package` member whose value comes next (`name` or `version`).
    package_field: Option<bool>,
    tools: Tools,
    /// Items of `tools` started so far.
    tool_items: usize,
    not_object: Option<usize>,
    definition: Option<Definition>,
    kept: Vec<ValidatedDefinition>,
    valid: usize,
    body_bytes: u64,
    bodies_dropped: bool,
    first_rejection: Option<Rejection>,
    error: Option<String>,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Scanner {
    fn new(package_name: &str, approved: &[String]) -> Self {
        Self {
            package_name: package_name.to_owned(),
            approved: approved.to_vec(),
            expect: Expect::Document,
            token: Token::None,
            stack: Vec::new(),
            text: Text::default(),
            number: NumberText::default(),
            number_on: false,
            member: None,
            seen: [false; 3],
            schema: Schema::default(),
            package: Package::default(),
            package_field: None,
            tools: Tools::default(),
            tool_items: 0,
            not_object: None,
            definition: None,
            kept: Vec::new(),
            valid: 0,
            body_bytes: 0,
            bodies_dropped: false,
            first_rejection: None,
            error: None,
        }
    }

    fn fail(&mut self, why: impl fmt::Display) {
        if self.error.is_none() {
            self.error = Some(why.to_string());
        }
    }

    /// The kept member being read, when the scanner is inside its value. Of `package` only
    /// `name` and `version` are kept: its other members are ignored like the document's
    /// (contract section 3), so inside them nothing is strict.
    fn region(&self) -> Option<Member> {
        if !(self.stack.len() >= 2 || self.text.on || self.number_on) {
            return None;
        }
        match self.member {
            Some(Member::Package) if self.stack.len() != 2 || self.package_field.is_none() => None,
            kept => kept,
        }
    }

    /// A member name is read here whatever it names: the document's own, and `package`'s.
    fn names_are_read(&self) -> bool {
        let depth = self.stack.len();
        depth == 1 || (depth == 2 && self.member == Some(Member::Package))
    }

    fn in_definition(&self) -> bool {
        self.definition.is_some() && self.stack.len() >= 3
    }

    fn feed(&mut self, slice: &[u8]) {
        let mut i = 0;
        while i < slice.len() && self.error.is_none() {
            let b = slice[i];
            match self.token {
                Token::Str(s) => i = self.string(s, slice, i),
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
                            if self.number_on {
                                self.number.push(b);
                            }
                            i += 1;
                        }
                        None if matches!(n, Num::Zero | Num::Int | Num::Frac | Num::ExpInt)
                            && !b.is_ascii_digit() =>
                        {
                            // The number ended before this byte, which is read again.
                            self.token = Token::None;
                            self.number_done();
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
                        self.literal_done(word);
                    } else {
                        self.token = Token::Lit { word, at: at + 1 };
                    }
                }
                Token::None => {
                    if is_ws(b) {
                        i += 1;
                        continue;
                    }
                    self.structural(b);
                    i += 1;
                }
            }
        }
    }

    /// Reads string bytes from `i`; returns where it stopped.
    fn string(&mut self, mut s: Str, slice: &[u8], mut i: usize) -> usize {
        let start = i;
        let b = slice[i];
        if s.hex > 0 {
            let Some(d) = (b as char).to_digit(16) else {
                self.fail("invalid \\u escape in a string");
                return i;
            };
            s.code = (s.code << 4) | d as u16;
            s.hex -= 1;
            i += 1;
            if s.hex == 0 && s.strict {
                match (s.high, s.code) {
                    (false, 0xD800..=0xDBFF) => s.high = true,
                    (true, 0xDC00..=0xDFFF) => s.high = false,
                    (false, 0xDC00..=0xDFFF) => {
                        self.fail("lone trailing surrogate in hex escape");
                        return i;
                    }
                    (true, _) => {
                        self.fail("lone leading surrogate in hex escape");
                        return i;
                    }
                    _ => {}
                }
            }
        } else if s.escape {
            s.escape = false;
            match b {
                b'u' => {
                    s.hex = 4;
                    s.code = 0;
                }
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                    if s.high && s.strict {
                        self.fail("lone leading surrogate in hex escape");
                        return i;
                    }
                }
                _ => {
                    self.fail("invalid escape in a string");
                    return i;
                }
            }
            i += 1;
        } else {
            let run = memchr::memchr2(b'"', b'\\', &slice[i..]).unwrap_or(slice.len() - i);
            if slice[i..i + run]
                .iter()
                .copied()
                .min()
                .is_some_and(|m| m < 0x20)
            {
                self.fail("control character while parsing a string");
                return i;
            }
            if run > 0 && s.high && s.strict {
                self.fail("lone leading surrogate in hex escape");
                return i;
            }
            i += run;
            let mut done = false;
            if i < slice.len() {
                if slice[i] == b'\\' {
                    s.escape = true;
                } else if s.high && s.strict {
                    self.fail("lone leading surrogate in hex escape");
                    return i;
                } else {
                    done = true;
                }
                i += 1;
            }
            self.text.push(&slice[start..i]);
            if done {
                self.token = Token::None;
                self.string_done(s.key);
            } else {
                self.token = Token::Str(s);
                self.check_string_room();
            }
            return i;
        }
        self.text.push(&slice[start..i]);
        self.token = Token::Str(s);
        i
    }

    /// A definition's string that cannot fit its definition's limit any more makes the
    /// definition oversized at once, so its text is never held past the limit.
    fn check_string_room(&mut self) {
        if self.in_definition()
            && let Some(d) = &mut self.definition
            && !d.unbuilt
            && self.text.on
            && !self.text.complete()
        {
            d.grow(MAX_DEFINITION_BYTES + 1);
            self.text.on = false;
        }
    }

    /// One structural byte (not whitespace, not inside a token).
    fn structural(&mut self, b: u8) {
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
                    self.close(false);
                    return;
                }
                let kind = match b {
                    b'{' => Kind::Object,
                    b'[' => Kind::Array,
                    b'"' => Kind::String,
                    b'-' | b'0'..=b'9' => Kind::Number,
                    b't' | b'f' | b'n' => Kind::Literal,
                    _ => {
                        self.fail("expected value");
                        return;
                    }
                };
                self.begin_value(kind);
                match b {
                    b'{' => self.open(true),
                    b'[' => self.open(false),
                    b'"' => {
                        self.token = Token::Str(self.new_str(false));
                        self.text.push(b"\"");
                    }
                    b'-' => self.begin_number(b, Num::Minus),
                    b'0' => self.begin_number(b, Num::Zero),
                    b'1'..=b'9' => self.begin_number(b, Num::Int),
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
                    _ => {
                        self.token = Token::Lit {
                            word: b"null",
                            at: 1,
                        }
                    }
                }
            }
            Expect::KeyOrClose | Expect::Key => {
                if b == b'}' && self.expect == Expect::KeyOrClose {
                    self.close(true);
                } else if b == b'"' {
                    self.begin_key();
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
                    b'}' if object => self.close(true),
                    b']' if !object => self.close(false),
                    _ => self.fail("expected `,` or the end of the container"),
                }
            }
            Expect::End => self.fail("trailing characters"),
        }
    }

    fn new_str(&self, key: bool) -> Str {
        Str {
            key,
            escape: false,
            hex: 0,
            code: 0,
            high: false,
            strict: (key && self.names_are_read()) || self.region().is_some(),
        }
    }

    fn begin_number(&mut self, b: u8, n: Num) {
        self.token = Token::Num(n);
        self.number_on = self.region().is_some();
        if self.number_on {
            self.number.start();
            self.number.push(b);
        }
    }

    /// A member name starts: decide how much of it to collect.
    fn begin_key(&mut self) {
        let depth = self.stack.len();
        let cap = match self.region() {
            _ if self.names_are_read() => Some(NAME_BYTES),
            Some(Member::Tools) if self.in_definition() => match &self.definition {
                Some(d) if !d.unbuilt => Some(6 * d.room() as usize + 8),
                Some(_) if depth == 3 => Some(NAME_BYTES),
                _ => None,
            },
            _ => None,
        };
        match cap {
            Some(cap) => self.text.start(cap),
            None => self.text.on = false,
        }
        self.text.push(b"\"");
        self.token = Token::Str(self.new_str(true));
    }

    /// A value starts (the stack does not hold it yet): note what the kept members are.
    fn begin_value(&mut self, kind: Kind) {
        let depth = self.stack.len();
        self.text.on = false;
        match (depth, self.member) {
            (1, Some(Member::Schema)) => {
                if kind == Kind::String {
                    self.text.start(SMALL_TEXT_BYTES);
                } else {
                    self.schema =
                        Schema::Wrong(format!("not a string but {kind:?}").to_lowercase());
                }
            }
            (1, Some(Member::Package)) => {
                self.package = if kind == Kind::Object {
                    Package::Object {
                        name: Field::Missing,
                        version: Field::Missing,
                    }
                } else {
                    Package::NotObject
                };
            }
            (1, Some(Member::Tools)) => {
                self.tools = if kind == Kind::Array {
                    Tools::Array
                } else {
                    Tools::NotArray
                };
            }
            (2, Some(Member::Package)) => {
                if let Some(is_name) = self.package_field {
                    if kind == Kind::String {
                        self.text.start(SMALL_TEXT_BYTES);
                    } else {
                        self.set_field(is_name, Field::NotString);
                        self.package_field = None;
                    }
                }
            }
            (2, Some(Member::Tools)) if self.tools == Tools::Array => {
                let index = self.tool_items;
                self.tool_items += 1;
                if kind == Kind::Object {
                    // The definition's own `{` is opened by the caller; its frame is here.
                    self.definition = Some(Definition::new(index));
                } else {
                    self.not_object.get_or_insert(index);
                }
            }
            (d, Some(Member::Tools)) if d >= 3 && self.definition.is_some() => {
                let in_array = self.stack.last() == Some(&false);
                match kind {
                    Kind::Object | Kind::Array => {
                        if let Some(def) = &mut self.definition {
                            def.open(kind == Kind::Object, in_array);
                        }
                    }
                    Kind::String => {
                        if let Some(def) = &mut self.definition {
                            if in_array {
                                def.comma();
                            }
                            if !def.unbuilt {
                                let cap = 6 * def.room() as usize + 8;
                                self.text.start(cap);
                            }
                        }
                    }
                    Kind::Number | Kind::Literal => {}
                }
            }
            _ => {}
        }
    }

    fn set_field(&mut self, is_name: bool, value: Field) {
        if let Package::Object { name, version } = &mut self.package {
            *(if is_name { name } else { version }) = value;
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

    fn close(&mut self, object: bool) {
        let depth = self.stack.len();
        if self.stack.pop() != Some(object) {
            self.fail("mismatched closing bracket");
            return;
        }
        if depth == 3 && self.member == Some(Member::Tools) {
            if let Some(def) = self.definition.take() {
                self.definition_done(def);
            }
        } else if depth > 3
            && let Some(def) = &mut self.definition
        {
            def.close();
        }
        self.value_done();
    }

    /// A value ended (the stack no longer holds it, if it was a container).
    fn value_done(&mut self) {
        self.expect = if self.stack.is_empty() {
            Expect::End
        } else {
            Expect::CommaOrClose
        };
        match self.stack.len() {
            1 => {
                self.member = None;
                self.text.on = false;
            }
            2 if self.member == Some(Member::Package) => self.package_field = None,
            _ => {}
        }
    }

    fn literal_done(&mut self, word: &'static [u8]) {
        if self.in_definition() {
            let value = match word {
                b"true" => Value::Bool(true),
                b"false" => Value::Bool(false),
                _ => Value::Null,
            };
            let in_array = self.stack.last() == Some(&false);
            if let Some(def) = &mut self.definition {
                def.scalar(value, word.len() as u64, in_array);
            }
        }
        self.scalar_done();
    }

    fn number_done(&mut self) {
        if self.number_on {
            self.number_on = false;
            match self.number.value() {
                Ok(n) => {
                    if self.in_definition() {
                        let in_array = self.stack.last() == Some(&false);
                        if let Some(def) = &mut self.definition {
                            def.scalar(Value::Number(n), 1, in_array);
                        }
                    }
                }
                Err(e) => return self.fail(e),
            }
        }
        self.scalar_done();
    }

    fn scalar_done(&mut self) {
        self.value_done();
    }

    fn schema_done(&mut self) {
        self.schema = match self.text.decode() {
            Some(Ok(s)) if s == REVISION_SCHEMA => Schema::Right,
            _ => Schema::Wrong(quote_bytes(&self.text.bytes, self.text.seen)),
        };
    }

    fn string_done(&mut self, key: bool) {
        let depth = self.stack.len();
        if key {
            self.expect = Expect::Colon;
            if !self.text.on {
                return;
            }
            self.text.on = false;
            let name = match self.text.decode() {
                Some(Ok(name)) => Some(name),
                Some(Err(e)) => return self.fail(e),
                None => None,
            };
            if depth == 1 {
                self.member = name.as_deref().and_then(Member::of);
                if let Some(m) = self.member {
                    if self.seen[m.index()] {
                        return self.fail(format_args!(
                            "duplicate member name {}",
                            quote(name.as_deref().unwrap_or_default())
                        ));
                    }
                    self.seen[m.index()] = true;
                }
            } else if depth == 2 && self.member == Some(Member::Package) {
                self.package_key(name.as_deref());
            } else if let Some(def) = &mut self.definition {
                if depth == 3
                    && let Some(name) = &name
                {
                    def.own_member(name);
                }
                match name {
                    Some(name) if !def.unbuilt => def.key(name),
                    None if !def.unbuilt => def.grow(MAX_DEFINITION_BYTES + 1),
                    _ => {}
                }
            }
            return;
        }
        // A string value.
        if depth == 1 && self.member == Some(Member::Schema) {
            self.schema_done();
        } else if depth == 2 && self.member == Some(Member::Package) {
            if let Some(is_name) = self.package_field.take() {
                let field = match self.text.decode() {
                    Some(Ok(s)) => Field::Str(s),
                    Some(Err(e)) => return self.fail(e),
                    None => Field::Long(
                        String::from_utf8_lossy(&self.text.bytes).into_owned(),
                        self.text.seen,
                    ),
                };
                self.set_field(is_name, field);
            }
        } else if self.in_definition() {
            let decoded = if self.text.on {
                self.text.decode()
            } else {
                None
            };
            if let Some(def) = &mut self.definition
                && !def.unbuilt
            {
                match decoded {
                    Some(Ok(s)) => {
                        let len = s.len() as u64 + 2;
                        // The comma was counted when the string began.
                        def.grow(len);
                        if !def.unbuilt {
                            def.attach(Value::String(s));
                        }
                    }
                    Some(Err(e)) => return self.fail(e),
                    None => def.grow(MAX_DEFINITION_BYTES + 1),
                }
            }
        }
        self.text.on = false;
        self.value_done();
    }

    /// A member name of `package` ended: `name` and `version` are read, the rest skipped.
    fn package_key(&mut self, name: Option<&str>) {
        let is_name = match name {
            Some("name") => true,
            Some("version") => false,
            _ => return,
        };
        if let Package::Object { name, version } = &self.package {
            let field = if is_name { name } else { version };
            if *field != Field::Missing {
                return self.fail(format_args!(
                    "duplicate member name {}",
                    if is_name { "\"name\"" } else { "\"version\"" }
                ));
            }
        }
        // Marked present (not a string) until its value says otherwise.
        self.set_field(is_name, Field::NotString);
        self.package_field = Some(is_name);
    }

    /// A definition closed: validate it now and keep what the snapshot needs of it.
    fn definition_done(&mut self, def: Definition) {
        if self.error.is_some() || self.first_rejection.is_some() {
            return;
        }
        let Definition {
            index,
            mut frames,
            unbuilt,
            duplicate,
            forbidden,
            ..
        } = def;
        let checked = match (unbuilt, frames.pop()) {
            (false, Some(Frame::Object(map, _))) => {
                validate_definition(map, &self.package_name, index, &self.approved)
            }
            _ => Err(unbuilt_definition(
                &self.package_name,
                index,
                forbidden,
                duplicate.as_deref(),
            )),
        };
        match checked {
            Ok(mut d) => {
                self.valid += 1;
                self.body_bytes += d.canonical_len;
                if self.body_bytes > MAX_SNAPSHOT_BYTES && !self.bodies_dropped {
                    self.bodies_dropped = true;
                    for k in &mut self.kept {
                        k.body = None;
                    }
                }
                if self.bodies_dropped {
                    d.body = None;
                }
                if self.kept.len() < KEPT_DEFINITIONS {
                    self.kept.push(d);
                }
            }
            Err(r) => self.first_rejection = Some(r),
        }
    }

    fn finish(mut self) -> Result<Contribution, Rejection> {
        if self.error.is_none() && !(self.expect == Expect::End && self.token == Token::None) {
            self.fail("EOF while parsing the document");
        }
        let package = self.package_name.as_str();
        if let Some(e) = &self.error {
            return Err(malformed(package, e));
        }
        match &self.schema {
            Schema::Right => {}
            Schema::Wrong(text) => {
                return Err(malformed(
                    package,
                    format_args!("schema is {text}, not {REVISION_SCHEMA:?}"),
                ));
            }
            Schema::Missing => return Err(malformed(package, "the schema member is missing")),
        }
        let Package::Object { name, version } = &self.package else {
            return Err(malformed(package, "package is missing or not an object"));
        };
        let declared = match name {
            Field::Str(s) => s.as_str(),
            Field::Long(prefix, _) => prefix.as_str(),
            _ => {
                return Err(malformed(
                    package,
                    "package.name is missing or not a string",
                ));
            }
        };
        let package_version = match version {
            Field::Str(v) if semver::Version::parse(v).is_ok() => v.clone(),
            _ => {
                return Err(malformed(
                    package,
                    format_args!(
                        "package.version is missing, not SemVer 2.0.0 or over \
                         {SMALL_TEXT_BYTES} bytes"
                    ),
                ));
            }
        };
        if self.tools == Tools::NotArray {
            return Err(malformed(package, "tools is not an array"));
        }
        if let Some(i) = self.not_object {
            return Err(malformed(
                package,
                format_args!("tools[{i}] is not an object"),
            ));
        }
        if !matches!(name, Field::Str(s) if s == package) {
            let shown = match name {
                Field::Long(_, len) => format!("{}… ({len} bytes of JSON text)", quote(declared)),
                _ => quote(declared).to_string(),
            };
            return Err(Rejection::new(
                Code::PackageMismatch,
                format!(
                    "package {package}: the revision declares package {shown}; the \
                     installation's generation points at another package's revision, fix the \
                     generation"
                ),
            ));
        }
        if let Some(r) = self.first_rejection.take() {
            return Err(r);
        }
        Ok(Contribution {
            package_version,
            definitions: self.kept,
            definition_count: self.valid,
        })
    }
}
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::rejection::RejectionCode;

    const HEAD: &str = r#""package":{"name":"p","version":"1.0.0"},"schema":"qinglong/materialized-revision@v1","tools":[]"#;

    /// The verdict of the reference whole-document reader and of this one fed a byte at a time.
    fn both(doc: &[u8]) -> (Option<RejectionCode>, Option<RejectionCode>) {
        let whole = super::super::reference::extract(doc, "p", &[])
            .err()
            .map(|r| r.code);
        let mut s = RevisionStream::new("p", &[]);
        for b in doc.chunks(1) {
            s.feed(b);
        }
        let streamed = s.finish().extract().err().map(|r| r.code);
        (whole, streamed)
    }

    fn verdict(doc: &[u8]) -> Result<Contribution, Rejection> {
        let approved = vec!["network".to_owned()];
        let mut s = RevisionStream::new("p", &approved);
        for part in doc.chunks(7919) {
            s.feed(part);
        }
        s.finish().extract()
    }

    fn code(doc: &[u8]) -> Option<RejectionCode> {
        verdict(doc).err().map(|r| r.code)
    }

    const PKG: &str = r#"{"name":"p","version":"1.0.0"}"#;

    fn doc(package: &str, tools: &str, extra: &str) -> Vec<u8> {
        format!(
            r#"{{"schema":"qinglong/materialized-revision@v1","package":{package},"tools":{tools}{extra}}}"#
        )
        .into_bytes()
    }

    fn tool(name: &str, schema: &str) -> String {
        format!(r#"{{"name":"{name}","version":"1.0.0","inputSchema":{schema}}}"#)
    }

    #[test]
    fn bulk_in_package_is_skipped_and_bulk_in_tools_refused_as_it_streams() {
        let zeros = format!("[{}0]", "0,".repeat(200_000));
        let pkg = format!(r#"{{"name":"p","version":"1.0.0","pad":{zeros}}}"#);
        let ok = verdict(&doc(&pkg, "[]", "")).unwrap();
        assert_eq!(ok.package_version, "1.0.0");
        assert_eq!(
            code(&doc(PKG, &zeros, "")),
            Some(RejectionCode::RevisionMalformed)
        );
        // A definition over the limit, with a forbidden member after the bulk: forbidden first.
        let big = tool("t", &format!(r#"{{"a":{zeros}}}"#));
        let late = format!(r#"{},"command":"x"}}"#, &big[..big.len() - 1]);
        let r = verdict(&doc(PKG, &format!("[{late}]"), "")).unwrap_err();
        assert_eq!(r.code, RejectionCode::ForbiddenField, "{}", r.detail);
        let early = format!(r#"{{"command":"x",{}"#, &big[1..]);
        let r = verdict(&doc(PKG, &format!("[{early}]"), "")).unwrap_err();
        assert_eq!(r.code, RejectionCode::ForbiddenField, "{}", r.detail);
        let r = verdict(&doc(PKG, &format!("[{big}]"), "")).unwrap_err();
        assert_eq!(r.code, RejectionCode::InvalidDefinition, "{}", r.detail);
        assert!(r.detail.contains("262144"), "{}", r.detail);
        // A syntax error after the oversized definition still makes the revision malformed.
        let r = verdict(&doc(PKG, &format!("[{big},{{]"), ""));
        assert_eq!(r.unwrap_err().code, RejectionCode::RevisionMalformed);
        // A long package name is a mismatch, quoted short.
        let long = "p".repeat(100_000);
        let pkg = format!(r#"{{"name":"{long}","version":"1.0.0"}}"#);
        let r = verdict(&doc(&pkg, "[]", "")).unwrap_err();
        assert_eq!(r.code, RejectionCode::PackageMismatch);
        assert!(r.detail.len() < 1024, "{}", r.detail.len());
        // A long tool name: invalid, quoted short.
        let t = tool(&"n".repeat(100_000), "{}");
        let r = verdict(&doc(PKG, &format!("[{t}]"), "")).unwrap_err();
        assert_eq!(r.code, RejectionCode::InvalidDefinition);
        assert!(r.detail.len() < 1024, "{}", r.detail.len());
        // A long schema value: malformed, quoted short.
        let d = format!(r#"{{"schema":"{long}","package":{PKG}}}"#);
        let r = verdict(d.as_bytes()).unwrap_err();
        assert_eq!(r.code, RejectionCode::RevisionMalformed);
        assert!(r.detail.len() < 1024, "{}", r.detail.len());
    }

    #[test]
    fn a_definition_at_the_limit_is_kept_and_one_byte_past_it_is_not() {
        let fixed = tool("t", r#"{"a":""}"#).len() as u64;
        for (extra, ok) in [(0, true), (1, false)] {
            let text = "x".repeat((MAX_DEFINITION_BYTES - fixed + extra) as usize);
            let t = tool("t", &format!(r#"{{"a":"{text}"}}"#));
            let got = verdict(&doc(PKG, &format!("[{t}]"), ""));
            assert_eq!(got.is_ok(), ok, "{extra}: {:?}", got.err());
        }
        // Escapes spell more text than they decode to: still within the limit.
        let text = r"\u0041".repeat((MAX_DEFINITION_BYTES - fixed) as usize);
        let t = tool("t", &format!(r#"{{"a":"{text}"}}"#));
        assert!(verdict(&doc(PKG, &format!("[{t}]"), "")).is_ok());
    }

    #[test]
    fn past_the_kept_definitions_a_count_goes_on() {
        let tools: Vec<String> = (0..300).map(|i| tool(&format!("t{i}"), "{}")).collect();
        let c = verdict(&doc(PKG, &format!("[{}]", tools.join(",")), "")).unwrap();
        assert_eq!(c.definitions.len(), KEPT_DEFINITIONS);
        assert_eq!(c.definition_count, 300);
        // A forbidden member in the 300th still ranks first.
        let mut bad = tools.clone();
        bad[299] = r#"{"name":"x","version":"1.0.0","inputSchema":{},"url":"u"}"#.into();
        let r = verdict(&doc(PKG, &format!("[{}]", bad.join(",")), "")).unwrap_err();
        assert_eq!(r.code, RejectionCode::ForbiddenField);
        assert!(r.detail.contains("tools[299]"), "{}", r.detail);
    }

    #[test]
    fn long_numbers_round_as_written() {
        for (spelled, want) in [
            (format!("1.{}", "0".repeat(5000)), "1"),
            (format!("0.{}1e5000", "0".repeat(4999)), "1"),
            (format!("{}e-4999", "1".repeat(5000)), "1.1111111111111112"),
            (format!("-0.{}", "0".repeat(5000)), "0"),
        ] {
            let t = tool("t", &format!(r#"{{"default":{spelled}}}"#));
            let c = verdict(&doc(PKG, &format!("[{t}]"), "")).unwrap();
            let body = String::from_utf8(c.definitions[0].body.clone().unwrap()).unwrap();
            assert!(
                body.contains(&format!(r#""default":{want}}}"#)),
                "{:.20}: {body}",
                spelled
            );
        }
        let t = tool("t", &format!(r#"{{"default":1{}}}"#, "0".repeat(5000)));
        assert_eq!(
            code(&doc(PKG, &format!("[{t}]"), "")),
            Some(RejectionCode::RevisionMalformed)
        );
    }

    #[test]
    fn duplicates_and_surrogates_in_what_is_kept_are_malformed() {
        let t = |schema: &str| format!("[{}]", tool("t", schema));
        for bad in [
            doc(r#"{"name":"p","name":"p","version":"1.0.0"}"#, "[]", ""),
            doc(r#"{"name":"p","version":"1.0.0","\ud800":1}"#, "[]", ""),
            doc(PKG, &t(r#"{"a":"\udc00"}"#), ""),
            doc(PKG, &t(r#"{"a":"\ud800\n"}"#), ""),
            doc(PKG, "[]", r#","tools":[]"#),
            doc(PKG, "[]", r#","\udc00":[]"#),
        ] {
            assert_eq!(
                code(&bad),
                Some(RejectionCode::RevisionMalformed),
                "{}",
                String::from_utf8_lossy(&bad)
            );
        }
        // A surrogate pair is fine; ignored members, `package`'s other members among them,
        // need only be well-formed.
        assert_eq!(code(&doc(PKG, &t(r#"{"a":"\ud83d\ude00"}"#), "")), None);
        assert_eq!(code(&doc(PKG, "[]", r#","x":{"a":1,"a":"\ud800"}"#)), None);
        for ignored in [
            r#"{"name":"p","version":"1.0.0","x":"\ud800"}"#,
            r#"{"name":"p","version":"1.0.0","x":{"a":1,"a":2}}"#,
            r#"{"name":"p","x":[1E400],"version":"1.0.0","x":0}"#,
        ] {
            assert_eq!(code(&doc(ignored, "[]", "")), None, "{ignored}");
        }
    }

    #[test]
    fn a_duplicate_inside_a_definition_makes_it_invalid_wherever_it_sits() {
        let t = |schema: &str| format!("[{}]", tool("t", schema));
        let zeros = format!("[{}0]", "0,".repeat(200_000));
        for (bad, why) in [
            (
                r#"[{"name":"t","name":"t","version":"1.0.0","inputSchema":{}}]"#.to_owned(),
                "its own members",
            ),
            (t(r#"{"a":1,"a":2}"#), "a nested object"),
            (
                t(&format!(r#"{{"a":1,"a":2,"z":{zeros}}}"#)),
                "before the limit",
            ),
            (
                t(&format!(r#"{{"z":{zeros},"a":1,"a":2}}"#)),
                "past the limit",
            ),
        ] {
            let r = verdict(&doc(PKG, &bad, "")).unwrap_err();
            assert_eq!(
                r.code,
                RejectionCode::InvalidDefinition,
                "{why}: {}",
                r.detail
            );
            assert!(r.detail.contains("tools[0]"), "{why}: {}", r.detail);
        }
        let r = verdict(&doc(PKG, &t(r#"{"a":1,"a":2}"#), "")).unwrap_err();
        assert!(r.detail.contains(r#""a" twice"#), "{}", r.detail);
        // A forbidden member still ranks first, before or after the duplicate.
        for bad in [
            r#"[{"command":"x","name":"t","name":"t","version":"1.0.0","inputSchema":{}}]"#,
            r#"[{"name":"t","name":"t","version":"1.0.0","inputSchema":{},"url":"u"}]"#,
        ] {
            let r = verdict(&doc(PKG, bad, "")).unwrap_err();
            assert_eq!(r.code, RejectionCode::ForbiddenField, "{bad}: {}", r.detail);
        }
        // A problem of the document after it still makes the revision malformed.
        let bad = format!("[{},{{]", tool("t", r#"{"a":1,"a":2}"#));
        assert_eq!(
            code(&doc(PKG, &bad, "")),
            Some(RejectionCode::RevisionMalformed),
            "{bad}"
        );
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
        let mut s = RevisionStream::new("p", &[]);
        s.feed(&doc);
        let why = s.finish().extract().unwrap_err().detail;
        assert!(why.contains("utf-8"), "{why}");
        let doc = format!(
            r#"{{"x":01,{HEAD},"y":{}{}}}"#,
            "[".repeat(129),
            "]".repeat(129)
        );
        let mut s = RevisionStream::new("p", &[]);
        s.feed(doc.as_bytes());
        let why = s.finish().extract().unwrap_err().detail;
        assert!(
            why.contains(&JsonError::TooDeep(MAX_REVISION_DEPTH).to_string()),
            "{why}"
        );
    }
}
