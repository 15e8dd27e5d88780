//! RFC 8785 (JCS) canonical JSON and the digests taken over it.
//!
//! The writer streams straight into a [`Sink`] (a growable buffer or a SHA-256 hasher), so a
//! digest never needs the canonical bytes materialised. Parsing is strict where contract section 3
//! asks: duplicate member names and lone surrogates are errors, never "last one wins".

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use sha2::{Digest as _, Sha256};

use crate::model::Digest;

/// Why bytes are not acceptable JSON for the executor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// Not UTF-8.
    #[error("not UTF-8: {0}")]
    NotUtf8(String),
    /// Nested deeper than the limit.
    #[error("nested deeper than {0} levels")]
    TooDeep(usize),
    /// Invalid JSON, a duplicate member name, a lone surrogate or a number beyond a double.
    #[error("{0}")]
    Syntax(String),
}

/// Where canonical bytes go.
pub trait Sink {
    /// Appends bytes.
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// A sink that hashes what it is given, through a small buffer so the hasher sees large blocks.
#[derive(Debug)]
pub struct HashSink {
    hasher: Sha256,
    buf: Vec<u8>,
    len: u64,
}

const HASH_BUF: usize = 16 * 1024;

impl Default for HashSink {
    fn default() -> Self {
        Self {
            hasher: Sha256::new(),
            buf: Vec::with_capacity(HASH_BUF),
            len: 0,
        }
    }
}

impl HashSink {
    /// Finishes the hash.
    pub fn finish(mut self) -> (Digest, u64) {
        self.hasher.update(&self.buf);
        (
            Digest::from_sha256(self.hasher.finalize().as_slice()),
            self.len,
        )
    }
}

impl Sink for HashSink {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.len += bytes.len() as u64;
        if self.buf.len() + bytes.len() > HASH_BUF {
            self.hasher.update(&self.buf);
            self.buf.clear();
            if bytes.len() >= HASH_BUF {
                self.hasher.update(bytes);
                return;
            }
        }
        self.buf.extend_from_slice(bytes);
    }
}

/// The canonical bytes of a value.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_value(value, &mut out);
    out
}

/// Whether `bytes` are exactly the canonical form of `value`, compared as it is written, so
/// `verify` does not build a second copy of every document it checks.
pub fn is_canonical_form(value: &Value, bytes: &[u8]) -> bool {
    let mut sink = MatchSink {
        rest: bytes,
        same: true,
    };
    write_value(value, &mut sink);
    sink.same && sink.rest.is_empty()
}

/// A sink that compares what it is given with the bytes expected next.
struct MatchSink<'a> {
    rest: &'a [u8],
    same: bool,
}

impl Sink for MatchSink<'_> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        // Once the bytes differ, the rest of the document is not compared.
        if !self.same {
            return;
        }
        match self.rest.strip_prefix(bytes) {
            Some(rest) => self.rest = rest,
            None => self.same = false,
        }
    }
}

/// The digest of a value's canonical bytes, computed without materialising them.
pub fn digest(value: &Value) -> Digest {
    let mut sink = HashSink::default();
    write_value(value, &mut sink);
    sink.finish().0
}

/// Writes the canonical form of a value.
pub fn write_value<S: Sink>(value: &Value, out: &mut S) {
    let mut scratch = Vec::new();
    write_with(value, out, &mut scratch);
}

/// `scratch` is a stack of object members shared by the whole recursion, so each object's
/// map is walked once and no object allocates.
fn write_with<'a, S: Sink>(value: &'a Value, out: &mut S, scratch: &mut Vec<(&'a str, &'a Value)>) {
    match value {
        Value::Null => out.put(b"null"),
        Value::Bool(true) => out.put(b"true"),
        Value::Bool(false) => out.put(b"false"),
        Value::Number(n) => write_number(number_as_f64(n), out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write_with(item, out, scratch);
            }
            out.put(b"]");
        }
        Value::Object(map) => write_object(map, out, scratch),
    }
}

fn write_object<'a, S: Sink>(
    map: &'a Map<String, Value>,
    out: &mut S,
    scratch: &mut Vec<(&'a str, &'a Value)>,
) {
    let base = scratch.len();
    // The map iterates in UTF-8 byte order, which equals UTF-16 order unless some key holds a
    // supplementary character (4 UTF-8 bytes, lead byte >= 0xF0): its surrogate pair then sorts
    // below U+E000..=U+FFFF.
    let mut supplementary = false;
    for (k, v) in map {
        supplementary |= k.bytes().any(|b| b >= 0xF0);
        scratch.push((k.as_str(), v));
    }
    if supplementary {
        scratch[base..].sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
    }
    out.put(b"{");
    for i in base..scratch.len() {
        if i > base {
            out.put(b",");
        }
        let (k, v) = scratch[i];
        write_string(k, out);
        out.put(b":");
        write_with(v, out, scratch);
    }
    out.put(b"}");
    scratch.truncate(base);
}

/// The number as the double JCS formats (integers beyond 2^53 round to the nearest double).
pub fn number_as_f64(n: &Number) -> f64 {
    if let Some(u) = n.as_u64() {
        u as f64
    } else if let Some(i) = n.as_i64() {
        i as f64
    } else {
        n.as_f64().unwrap_or(f64::NAN)
    }
}

/// Bytes that JCS escapes: control characters, `"` and `\\`.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Writes a JSON string with JCS's minimal escaping.
#[inline]
pub fn write_string<S: Sink>(s: &str, out: &mut S) {
    out.put(b"\"");
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if !NEEDS_ESCAPE[b as usize] {
            continue;
        }
        if start < i {
            out.put(&bytes[start..i]);
        }
        start = i + 1;
        const HEX: &[u8; 16] = b"0123456789abcdef";
        match b {
            b'"' => out.put(b"\\\""),
            b'\\' => out.put(b"\\\\"),
            0x08 => out.put(b"\\b"),
            0x09 => out.put(b"\\t"),
            0x0a => out.put(b"\\n"),
            0x0c => out.put(b"\\f"),
            0x0d => out.put(b"\\r"),
            _ => out.put(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 0xf) as usize],
            ]),
        }
    }
    if start < bytes.len() {
        out.put(&bytes[start..]);
    }
    out.put(b"\"");
}

/// Writes a double the way ECMAScript's `Number.prototype.toString` does (RFC 8785 §3.2.2.3).
pub fn write_number<S: Sink>(f: f64, out: &mut S) {
    if f == 0.0 || !f.is_finite() {
        // -0 prints as 0; non-finite values never reach here from parsed JSON.
        out.put(b"0");
        return;
    }
    // Below 2^53 an integral double's shortest digits are the integer itself.
    if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
        let mut buf = itoa::Buffer::new();
        out.put(buf.format(f as i64).as_bytes());
        return;
    }
    // Everything else: ECMAScript's Number-to-String itself (the Boa engine's formatter).
    let mut buf = ryu_js::Buffer::new();
    out.put(buf.format_finite(f).as_bytes());
}

/// Checks that bytes are UTF-8 and nest no deeper than `limit` (objects and arrays, the
/// outermost being depth 1), without parsing them. Malformed JSON passes here and is caught by
/// the parser; this only keeps the parser's recursion bounded.
pub fn check_utf8_and_depth(bytes: &[u8], limit: usize) -> Result<&str, JsonError> {
    let text = std::str::from_utf8(bytes).map_err(|e| JsonError::NotUtf8(e.to_string()))?;
    match too_deep_at(bytes, limit) {
        Some(_) => Err(JsonError::TooDeep(limit)),
        None => Ok(text),
    }
}

/// The offset of the first `[` or `{` (outside strings) that nests deeper than `limit`.
fn too_deep_at(bytes: &[u8], limit: usize) -> Option<usize> {
    let mut scan = DepthScan::new(limit);
    scan.feed(bytes);
    scan.too_deep_at()
}

/// The depth check over bytes given in any number of slices: brackets outside strings, whatever
/// the syntax around them (the parser reports syntax; this only bounds its recursion). Used whole
/// by [`check_utf8_and_depth`] and slice by slice by the streamed revision reader.
#[derive(Debug)]
pub(crate) struct DepthScan {
    limit: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Bytes fed so far.
    seen: usize,
    /// Offset of the first bracket nesting deeper than `limit`.
    too_deep: Option<usize>,
}

impl DepthScan {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            depth: 0,
            in_string: false,
            escaped: false,
            seen: 0,
            too_deep: None,
        }
    }

    /// The offset of the first bracket that nests too deep, once one has been fed.
    pub(crate) fn too_deep_at(&self) -> Option<usize> {
        self.too_deep
    }

    pub(crate) fn feed(&mut self, slice: &[u8]) {
        let base = self.seen;
        self.seen += slice.len();
        let mut i = 0;
        while i < slice.len() && self.too_deep.is_none() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else {
                    // Most of a revision is string content: jump to the next quote or backslash.
                    match memchr::memchr2(b'"', b'\\', &slice[i..]) {
                        None => return,
                        Some(at) => i += at,
                    }
                    if slice[i] == b'\\' {
                        self.escaped = true;
                    } else {
                        self.in_string = false;
                    }
                }
            } else {
                match slice[i] {
                    b'"' => self.in_string = true,
                    b'[' | b'{' => {
                        self.depth += 1;
                        if self.depth > self.limit {
                            self.too_deep = Some(base + i);
                        }
                    }
                    b']' | b'}' => self.depth = self.depth.saturating_sub(1),
                    _ => {}
                }
            }
            i += 1;
        }
    }
}

/// Parses one JSON document strictly: duplicate member names, lone surrogates, numbers beyond
/// the range of a double and trailing content are errors. Nesting is limited to `max_depth`.
/// The first problem in the text is the one reported, as the text canonicalizer reports it: a
/// syntax error before the bracket that nests too deep wins over the depth.
pub fn parse_strict(bytes: &[u8], max_depth: usize) -> Result<Value, JsonError> {
    let text = std::str::from_utf8(bytes).map_err(|e| JsonError::NotUtf8(e.to_string()))?;
    if let Some(at) = too_deep_at(bytes, max_depth) {
        // Brackets are ASCII, so `at + 1` is a character boundary, and the prefix nests one
        // level past the limit at most. The bracket itself is included: where no value may
        // start, it is the syntax error.
        let mut de = serde_json::Deserializer::from_str(&text[..=at]);
        de.disable_recursion_limit();
        return match StrictValue.deserialize(&mut de).and_then(|_| de.end()) {
            Err(e) if !e.is_eof() => Err(syntax(e)),
            _ => Err(JsonError::TooDeep(max_depth)),
        };
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let value = StrictValue.deserialize(&mut de).map_err(syntax)?;
    de.end().map_err(syntax)?;
    Ok(value)
}

pub(crate) fn syntax(e: serde_json::Error) -> JsonError {
    JsonError::Syntax(e.to_string())
}

/// Deserializes a [`Value`] while refusing duplicate member names (a seed usable for one member
/// of a larger document, so ignored members need not be parsed strictly).
#[derive(Debug, Clone, Copy)]
pub struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor(OnDuplicate::Refuse))
    }
}

/// [`StrictValue`], but a duplicate member name is noted (the first one, in `self.0`; the
/// first value kept) rather than refused: for the whole-document revision reader, where a
/// duplicate inside a definition makes the definition invalid, not the document malformed.
#[derive(Clone, Copy)]
pub struct NotingDuplicates<'a>(pub &'a Cell<Option<String>>);

// `Cell<Option<String>>` is not `Debug` (a `Cell`'s content is shown only when it is `Copy`).
impl fmt::Debug for NotingDuplicates<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NotingDuplicates")
    }
}

impl<'de> DeserializeSeed<'de> for NotingDuplicates<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor(OnDuplicate::Note(self.0)))
    }
}

/// What a duplicate member name does.
#[derive(Clone, Copy)]
enum OnDuplicate<'a> {
    Refuse,
    Note(&'a Cell<Option<String>>),
}

#[derive(Clone, Copy)]
struct StrictVisitor<'a>(OnDuplicate<'a>);

impl<'de> DeserializeSeed<'de> for StrictVisitor<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictVisitor<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                match self.0 {
                    OnDuplicate::Refuse => {
                        return Err(de::Error::custom(format_args!(
                            "duplicate member name {key:?}"
                        )));
                    }
                    OnDuplicate::Note(first) => {
                        let noted = first.take().unwrap_or(key);
                        first.set(Some(noted));
                        // Read strictly all the same; the first value stays.
                        map.next_value_seed(self)?;
                        continue;
                    }
                }
            }
            let value = map.next_value_seed(self)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// Nesting depth of a value: a scalar is 0, an object or array is 1 plus its deepest child.
pub fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The first number in a value (depth first) whose magnitude, as a double, is 2^53 or more.
pub fn first_unsafe_number(value: &Value) -> Option<&Number> {
    const LIMIT: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(n) if number_as_f64(n).abs() >= LIMIT => Some(n),
        Value::Array(items) => items.iter().find_map(first_unsafe_number),
        Value::Object(map) => map.values().find_map(first_unsafe_number),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(f: f64) -> String {
        let mut v = Vec::new();
        write_number(f, &mut v);
        String::from_utf8(v).unwrap_or_default()
    }

    /// The error class the canonicalizer gives for `text`.
    fn class(text: &str) -> &'static str {
        match parse_strict(text.as_bytes(), 128).map(|v| to_vec(&v)) {
            Err(JsonError::Syntax(_)) => "syntax",
            Err(JsonError::TooDeep(_)) => "too-deep",
            Err(JsonError::NotUtf8(_)) => "not-utf8",
            Ok(_) => "accepted",
        }
    }

    /// Found by the `canonical` fuzz target (when a second, text-based writer stood beside this
    /// one): for invalid text that also nests deeper than the limit, the first problem in the
    /// text decides the class.
    #[test]
    fn the_first_problem_wins_over_deep_nesting() {
        let deep = "[".repeat(200);
        for (text, want) in [
            // 1: a syntax error before the deep part.
            (format!("T{}", "{".repeat(200)), "syntax"),
            // Valid up to the bracket that nests too deep.
            (format!("{deep}1"), "too-deep"),
            // 2: the too-deep bracket stands where no value may.
            (format!("{}1{{", "[".repeat(128)), "syntax"),
            // 3: a duplicate name read before the deep part.
            (format!("{{\"b\":1,\"a\":2,\"b\":3,\"c\":{deep}"), "syntax"),
            // 5: a duplicate name whose own value nests too deep.
            (format!("{{\"a\":1,\"a\":{deep}"), "syntax"),
            // 4: equal names in different open objects are no duplicate.
            (
                format!("{{\"a\":1,\"b\":{{\"a\":2,\"c\":{deep}"),
                "too-deep",
            ),
            // Trailing content before the deep part.
            (format!("1 {deep}"), "syntax"),
        ] {
            assert_eq!(class(&text), want, "{text:.60}");
        }
    }

    #[test]
    fn ecmascript_numbers() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.5, "-1.5"),
            (4.50, "4.5"),
            (1e3, "1000"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (0.1, "0.1"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (9007199254740992.0, "9007199254740992"),
            (333333333.3333333, "333333333.3333333"),
            (-1e-7, "-1e-7"),
            (1.0e16, "10000000000000000"),
        ];
        for (f, want) in cases {
            assert_eq!(num(*f), *want, "{f:e}");
        }
    }

    #[test]
    fn strict_parsing() {
        assert!(parse_strict(br#"{"a":1,"a":2}"#, 128).is_err());
        assert!(parse_strict(br#"{"x":{"a":1,"a":1}}"#, 128).is_err());
        assert!(parse_strict(br#"["\ud800"]"#, 128).is_err());
        assert!(parse_strict(br#"["\udc00x"]"#, 128).is_err());
        assert!(parse_strict(br#"["\ud83d\ude00"]"#, 128).is_ok());
        assert!(parse_strict(b"[1E400]", 128).is_err());
        assert!(parse_strict(b"[1] x", 128).is_err());
        assert!(parse_strict(b"\xff", 128).is_err());
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse_strict(deep(128).as_bytes(), 128).is_ok());
        assert_eq!(
            parse_strict(deep(129).as_bytes(), 128),
            Err(JsonError::TooDeep(128))
        );
        assert!(parse_strict(br#"["[[[[", "\"{{"]"#, 2).is_ok());
    }

    #[test]
    fn string_escapes() {
        let v = Value::String("a\"\\\u{8}\t\n\u{c}\r\u{1}\u{1f}\u{7f}\u{2028}é".into());
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap_or_default(),
            "\"a\\\"\\\\\\b\\t\\n\\f\\r\\u0001\\u001f\u{7f}\u{2028}é\""
        );
    }

    /// The depth check byte by byte, as first written: the reference for the fast one.
    fn naive(bytes: &[u8], limit: usize) -> (Option<usize>, usize, bool, bool) {
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        for (i, &b) in bytes.iter().enumerate() {
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > limit {
                        return (Some(i), depth, in_string, escaped);
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        (None, depth, in_string, escaped)
    }

    proptest::proptest! {
        /// Whole or cut anywhere, the depth scan skips string content quickly and still ends
        /// where the byte-by-byte scan ends: the same too-deep offset, depth and string state.
        #[test]
        fn depth_scan_matches_the_byte_by_byte_reference(
            s in "[\\[\\]{}\"\\\\a]{0,48}",
            cut in 0usize..49,
            limit in 0usize..4,
        ) {
            let bytes = s.as_bytes();
            let cut = cut.min(bytes.len());
            let mut scan = DepthScan::new(limit);
            scan.feed(&bytes[..cut]);
            scan.feed(&bytes[cut..]);
            let mut whole = DepthScan::new(limit);
            whole.feed(bytes);
            let expected = naive(bytes, limit);
            for got in [&scan, &whole] {
                let state = (got.too_deep, got.depth, got.in_string, got.escaped);
                proptest::prop_assert_eq!(state, expected);
            }
        }
    }
}
