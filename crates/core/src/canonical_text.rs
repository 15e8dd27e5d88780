//! RFC 8785 straight from JSON text, in one pass, without building a `serde_json::Value`.
//!
//! The output is written as the text is parsed: strings without escapes and short integer
//! literals are copied verbatim (their source spelling already is canonical), and each object's
//! members are written in source order while their order is checked; only an object whose
//! members arrive out of order has its (already canonical) member spans rearranged. Strict like
//! [`crate::canonical::parse_strict`]: duplicate member names, lone surrogates, numbers beyond a
//! double and trailing content are errors. `serde_json_canonicalizer` is the differential
//! reference in the property tests.

use std::cmp::Ordering;

use crate::canonical::{self, JsonError, Sink};

fn err(msg: impl Into<String>) -> JsonError {
    JsonError::Syntax(msg.into())
}

/// Decodes an escaped string span, refusing lone surrogates.
fn decode(span: &[u8]) -> Result<String, JsonError> {
    let mut out = String::with_capacity(span.len());
    let mut i = 0;
    let hex4 = |at: usize| -> Result<u32, JsonError> {
        let s = std::str::from_utf8(&span[at..at + 4]).map_err(|_| err("invalid \\u escape"))?;
        u32::from_str_radix(s, 16).map_err(|_| err("invalid \\u escape"))
    };
    while i < span.len() {
        let run = memchr::memchr(b'\\', &span[i..]).unwrap_or(span.len() - i);
        out.push_str(std::str::from_utf8(&span[i..i + run]).map_err(|_| err("invalid UTF-8"))?);
        i += run;
        if i >= span.len() {
            break;
        }
        let c = span[i + 1];
        i += 2;
        match c {
            b'"' => out.push('"'),
            b'\\' => out.push('\\'),
            b'/' => out.push('/'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            _ => {
                let hi = hex4(i)?;
                i += 4;
                let code = if (0xD800..0xDC00).contains(&hi) {
                    if span.get(i..i + 2) != Some(b"\\u") {
                        return Err(err("lone leading surrogate in a \\u escape"));
                    }
                    let lo = hex4(i + 2)?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return Err(err("lone leading surrogate in a \\u escape"));
                    }
                    i += 6;
                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                } else if (0xDC00..0xE000).contains(&hi) {
                    return Err(err("lone trailing surrogate in a \\u escape"));
                } else {
                    hi
                };
                out.push(char::from_u32(code).ok_or_else(|| err("invalid \\u escape"))?);
            }
        }
    }
    Ok(out)
}

/// The canonical spelling of a number literal when it can be had without converting through a
/// double: a decimal without exponent whose significant digits (at most 15) all survive the
/// round trip, so ECMAScript prints exactly them. `int_len` is the length of the sign and integer
/// part. Integral values written with a zero fraction (`1000.0`) lose the fraction.
fn plain_decimal(lit: &[u8], int_len: usize) -> Option<&[u8]> {
    if lit.iter().any(|&b| b == b'e' || b == b'E') {
        return None;
    }
    let (int_part, frac) = lit.split_at(int_len);
    let frac = frac.strip_prefix(b".").unwrap_or(frac);
    let digits = int_part.strip_prefix(b"-").unwrap_or(int_part);
    if frac.iter().all(|&b| b == b'0') {
        // An integer (maybe written as 1000.0); -0 is 0.
        if digits == b"0" {
            return Some(b"0");
        }
        return (digits.len() <= 15).then_some(int_part);
    }
    if frac.last() == Some(&b'0') {
        return None;
    }
    let significant = if digits == b"0" {
        let leading = frac.iter().take_while(|&&b| b == b'0').count();
        if leading > 5 {
            return None; // below 1e-6 ECMAScript switches to exponent form
        }
        frac.len() - leading
    } else {
        digits.len() + frac.len()
    };
    (significant <= 15).then_some(lit)
}

/// One member of an object being written: offsets into the output.
#[derive(Clone, Copy, Debug)]
struct Member {
    /// Start of `"key":value`.
    start: usize,
    /// The key's bytes between its quotes (canonical form).
    key: (usize, usize),
    /// End of the value.
    end: usize,
    /// The key needs decoding to compare (escapes or supplementary characters).
    slow: bool,
}

struct Canon<'a> {
    t: &'a [u8],
    pos: usize,
    out: Vec<u8>,
    members: Vec<Member>,
    scratch: Vec<u8>,
    depth: usize,
    max_depth: usize,
}

impl Canon<'_> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.t.get(self.pos) {
            self.pos += 1;
        }
    }

    fn at(&self) -> String {
        format!("at byte {}", self.pos)
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), JsonError> {
        if self.t[self.pos..].starts_with(word) {
            self.pos += word.len();
            self.out.extend_from_slice(word);
            Ok(())
        } else {
            Err(err(format!("invalid literal {}", self.at())))
        }
    }

    /// Writes a string (the cursor is on its opening quote). Returns whether it had escapes and,
    /// when `want_high`, whether it holds a byte >= 0xF0 (a supplementary character).
    fn string(&mut self, want_high: bool) -> Result<(bool, bool), JsonError> {
        let start = self.pos + 1;
        let mut high = false;
        // Keys and short values end within a few bytes: a plain loop beats a SIMD search's
        // setup there; longer strings fall through to memchr.
        let t = self.t;
        let mut i = start;
        let short_end = (start + 24).min(t.len());
        let mut end = None;
        while i < short_end {
            match t[i] {
                b'"' | b'\\' => {
                    end = Some(i);
                    break;
                }
                b if b < 0x20 => {
                    return Err(err(format!("control character in a string at byte {i}")));
                }
                b => {
                    high |= b >= 0xF0;
                    i += 1;
                }
            }
        }
        let end = match end {
            Some(e) => e,
            None => {
                let Some(off) = memchr::memchr2(b'"', b'\\', &t[i..]) else {
                    return Err(err(format!("unterminated string starting at byte {start}")));
                };
                if t[i..i + off].iter().any(|&b| b < 0x20) {
                    return Err(err(format!("control character in a string near byte {i}")));
                }
                if want_high {
                    high |= t[i..i + off].iter().any(|&b| b >= 0xF0);
                }
                i + off
            }
        };
        if t[end] == b'"' {
            self.out.push(b'"');
            self.out.extend_from_slice(&t[start..end]);
            self.out.push(b'"');
            self.pos = end + 1;
            return Ok((false, high));
        }
        // Escapes: find the real end, validating escapes on the way. When every escape is the one
        // RFC 8785 itself would write, the span is already canonical; otherwise decode.
        let mut i = end;
        let mut canonical_escapes = true;
        loop {
            match self.t.get(i) {
                Some(b'"') => break,
                Some(b'\\') => match self.t.get(i + 1) {
                    Some(b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                    Some(b'/') => {
                        canonical_escapes = false;
                        i += 2;
                    }
                    Some(b'u') => {
                        let hex = self
                            .t
                            .get(i + 2..i + 6)
                            .ok_or_else(|| err("truncated \\u escape"))?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return Err(err(format!("invalid \\u escape at byte {i}")));
                        }
                        // Canonical only for a control character without a short form,
                        // in lowercase hex.
                        let lower = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
                        canonical_escapes &= hex[0] == b'0'
                            && hex[1] == b'0'
                            && (hex[2] == b'0' || hex[2] == b'1')
                            && lower(hex[3])
                            && !matches!(&hex[2..4], b"08" | b"09" | b"0a" | b"0c" | b"0d");
                        i += 6;
                    }
                    _ => return Err(err(format!("invalid escape at byte {i}"))),
                },
                Some(&b) if b < 0x20 => {
                    return Err(err(format!("control character in a string at byte {i}")));
                }
                Some(_) => i += 1,
                None => return Err(err(format!("unterminated string starting at byte {start}"))),
            }
        }
        if canonical_escapes {
            let span = &self.t[start..i];
            if want_high {
                high |= span.iter().any(|&b| b >= 0xF0);
            }
            self.out.push(b'"');
            self.out.extend_from_slice(span);
            self.out.push(b'"');
        } else {
            let decoded = decode(&self.t[start..i])?;
            canonical::write_string(&decoded, &mut self.out);
        }
        self.pos = i + 1;
        Ok((true, high))
    }

    fn number(&mut self) -> Result<(), JsonError> {
        let t = self.t;
        let start = self.pos;
        let mut i = start;
        if t.get(i) == Some(&b'-') {
            i += 1;
        }
        match t.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while t.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
            }
            _ => return Err(err(format!("invalid number at byte {start}"))),
        }
        let int_end = i;
        if t.get(i) == Some(&b'.') {
            i += 1;
            let d = i;
            while t.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == d {
                return Err(err(format!("invalid fraction at byte {start}")));
            }
        }
        if matches!(t.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(t.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let d = i;
            while t.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == d {
                return Err(err(format!("invalid exponent at byte {start}")));
            }
        }
        self.pos = i;
        let lit = &t[start..i];
        if let Some(fast) = plain_decimal(lit, int_end - start) {
            self.out.extend_from_slice(fast);
            return Ok(());
        }
        let f: f64 = std::str::from_utf8(lit)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| err("invalid number"))?;
        if !f.is_finite() {
            return Err(err(format!("number out of range at byte {start}")));
        }
        canonical::write_number(f, &mut self.out);
        Ok(())
    }

    fn value(&mut self) -> Result<(), JsonError> {
        self.ws();
        match self.t.get(self.pos) {
            None => Err(err("unexpected end of input")),
            Some(b'"') => self.string(false).map(|_| ()),
            Some(b'n') => self.literal(b"null"),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[') => self.array(),
            Some(b'{') => self.object(),
            Some(_) => Err(err(format!("unexpected character {}", self.at()))),
        }
    }

    fn enter(&mut self) -> Result<(), JsonError> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(JsonError::TooDeep(self.max_depth));
        }
        self.pos += 1;
        Ok(())
    }

    fn array(&mut self) -> Result<(), JsonError> {
        self.enter()?;
        self.out.push(b'[');
        self.ws();
        if self.t.get(self.pos) == Some(&b']') {
            self.pos += 1;
        } else {
            loop {
                self.value()?;
                self.ws();
                match self.t.get(self.pos) {
                    Some(b',') => {
                        self.pos += 1;
                        self.out.push(b',');
                    }
                    Some(b']') => {
                        self.pos += 1;
                        break;
                    }
                    _ => return Err(err(format!("expected ',' or ']' {}", self.at()))),
                }
            }
        }
        self.out.push(b']');
        self.depth -= 1;
        Ok(())
    }

    /// A sort key: the key's bytes, or (when any key of the object needs it) its decoded UTF-16
    /// code units as big-endian bytes, whose byte order is code unit order.
    fn key_of(&self, m: &Member, utf16: bool) -> std::borrow::Cow<'_, [u8]> {
        let bytes = &self.out[m.key.0..m.key.1];
        if utf16 {
            // Canonical strings re-parse exactly; compare decoded keys by UTF-16 code units.
            let text = decode(bytes).unwrap_or_default();
            let units: Vec<u8> = text.encode_utf16().flat_map(u16::to_be_bytes).collect();
            std::borrow::Cow::Owned(units)
        } else {
            std::borrow::Cow::Borrowed(bytes)
        }
    }

    fn compare(&self, a: &Member, b: &Member) -> Ordering {
        if a.slow || b.slow {
            let utf16 = |m: &Member| {
                let text = decode(&self.out[m.key.0..m.key.1]).unwrap_or_default();
                text.encode_utf16().collect::<Vec<u16>>()
            };
            utf16(a).cmp(&utf16(b))
        } else {
            // Keys are short and usually differ early: a plain loop beats a memcmp call.
            let (x, y) = (&self.out[a.key.0..a.key.1], &self.out[b.key.0..b.key.1]);
            match x.iter().zip(y).find(|(p, q)| p != q) {
                Some((p, q)) => p.cmp(q),
                None => x.len().cmp(&y.len()),
            }
        }
    }

    /// The members of the object that starts at `base`, all read, in canonical order.
    fn sorted_members(&self, base: usize) -> Vec<Member> {
        let mut order: Vec<Member> = self.members[base..].to_vec();
        let utf16 = order.iter().any(|m| m.slow);
        order.sort_by_cached_key(|m| self.key_of(m, utf16).into_owned());
        order
    }

    /// The duplicate-name error for the first equal neighbours of sorted members, if any.
    fn first_equal(&self, order: &[Member]) -> Option<JsonError> {
        order
            .windows(2)
            .find(|w| self.compare(&w[0], &w[1]) == Ordering::Equal)
            .map(|w| {
                err(format!(
                    "duplicate member name {:?}",
                    String::from_utf8_lossy(&self.out[w[0].key.0..w[0].key.1])
                ))
            })
    }

    /// A duplicate name among the first `read` members of the open object at `base` (the
    /// members after them belong to objects nested in its current value) and `current`, the
    /// member whose value is being read.
    fn duplicate_among(&self, base: usize, read: usize, current: Member) -> Option<JsonError> {
        let mut order: Vec<Member> = self.members[base..base + read].to_vec();
        order.push(current);
        let utf16 = order.iter().any(|m| m.slow);
        order.sort_by_cached_key(|m| self.key_of(m, utf16).into_owned());
        self.first_equal(&order)
    }

    fn object(&mut self) -> Result<(), JsonError> {
        self.enter()?;
        self.out.push(b'{');
        let base = self.members.len();
        let mut read = 0;
        let mut sorted = true;
        self.ws();
        if self.t.get(self.pos) == Some(&b'}') {
            self.pos += 1;
        } else {
            loop {
                self.ws();
                if self.t.get(self.pos) != Some(&b'"') {
                    return Err(err(format!("expected a member name {}", self.at())));
                }
                let start = self.out.len();
                let (escaped, high) = self.string(true)?;
                let key = (start + 1, self.out.len() - 1);
                let slow = escaped || high;
                self.ws();
                if self.t.get(self.pos) != Some(&b':') {
                    return Err(err(format!("expected ':' {}", self.at())));
                }
                self.pos += 1;
                self.out.push(b':');
                if let Err(e) = self.value() {
                    // The value path reports a duplicate name as soon as it is read; here names
                    // are compared after their values. So that both report the first problem,
                    // a too-deep value after (or of) a duplicate name reports the duplicate.
                    let current = Member {
                        start,
                        key,
                        end: start,
                        slow,
                    };
                    return Err(match e {
                        JsonError::TooDeep(_) => {
                            self.duplicate_among(base, read, current).unwrap_or(e)
                        }
                        e => e,
                    });
                }
                let m = Member {
                    start,
                    key,
                    end: self.out.len(),
                    slow,
                };
                if let Some(prev) = self.members[base..].last() {
                    match self.compare(prev, &m) {
                        Ordering::Less => {}
                        Ordering::Equal => {
                            return Err(err(format!(
                                "duplicate member name {:?}",
                                String::from_utf8_lossy(&self.out[key.0..key.1])
                            )));
                        }
                        Ordering::Greater => sorted = false,
                    }
                }
                self.members.push(m);
                read += 1;
                self.ws();
                match self.t.get(self.pos) {
                    Some(b',') => {
                        self.pos += 1;
                        self.out.push(b',');
                    }
                    Some(b'}') => {
                        self.pos += 1;
                        break;
                    }
                    _ => return Err(err(format!("expected ',' or '}}' {}", self.at()))),
                }
            }
        }
        if !sorted {
            let order = self.sorted_members(base);
            if let Some(e) = self.first_equal(&order) {
                return Err(e);
            }
            let first = self.members[base].start;
            self.scratch.clear();
            for (i, m) in order.iter().enumerate() {
                if i > 0 {
                    self.scratch.push(b',');
                }
                self.scratch.extend_from_slice(&self.out[m.start..m.end]);
            }
            self.out.truncate(first);
            self.out.extend_from_slice(&self.scratch);
        }
        self.members.truncate(base);
        self.out.push(b'}');
        self.depth -= 1;
        Ok(())
    }
}

/// Writes the RFC 8785 form of one JSON document given as text. On an error nothing is
/// written to the sink.
pub fn canonicalize<S: Sink>(text: &str, max_depth: usize, out: &mut S) -> Result<(), JsonError> {
    let bytes = to_vec(text, max_depth)?;
    out.put(&bytes);
    Ok(())
}

/// The canonical bytes of a JSON text.
pub fn to_vec(text: &str, max_depth: usize) -> Result<Vec<u8>, JsonError> {
    let mut c = Canon {
        t: text.as_bytes(),
        pos: 0,
        out: Vec::with_capacity(text.len()),
        members: Vec::new(),
        scratch: Vec::new(),
        depth: 0,
        max_depth,
    };
    c.value()?;
    c.ws();
    if c.pos != c.t.len() {
        return Err(err(format!("trailing characters {}", c.at())));
    }
    Ok(c.out)
}

/// The digest of a JSON text's canonical bytes.
pub fn digest(text: &str, max_depth: usize) -> Result<crate::model::Digest, JsonError> {
    Ok(crate::model::Digest::of(&to_vec(text, max_depth)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> Result<String, JsonError> {
        to_vec(s, 128).map(|b| String::from_utf8(b).unwrap_or_default())
    }

    #[test]
    fn strictness() {
        assert!(canon(r#"{"a":1,"a":2}"#).is_err());
        assert!(
            canon(r#"{"a":1,"\u0061":2}"#).is_err(),
            "duplicates after decoding"
        );
        assert!(canon(r#"["\ud800"]"#).is_err());
        assert!(canon(r#"["\udc00"]"#).is_err());
        assert!(canon("[1E400]").is_err());
        assert!(canon("[01]").is_err());
        assert!(canon("[1.]").is_err());
        assert!(canon("[1] x").is_err());
        assert!(canon("[\"a\nb\"]").is_err());
        assert!(canon("[\"a\u{1}b\"]").is_err());
        assert_eq!(
            canon(&format!("{}{}", "[".repeat(129), "]".repeat(129))),
            Err(JsonError::TooDeep(128))
        );
        assert_eq!(
            canon(r#" { "b" : [ 4.50 , 1E3, -0, 10, "\u00e9\n\/" ] , "a" : null } "#).as_deref(),
            Ok("{\"a\":null,\"b\":[4.5,1000,0,10,\"é\\n/\"]}")
        );
        assert_eq!(
            canon(r#"["\ud83d\ude00", 123456789012345678]"#).as_deref(),
            Ok("[\"😀\",123456789012345680]")
        );
    }
}
