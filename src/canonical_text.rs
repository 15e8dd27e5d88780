//! RFC 8785 straight from JSON text, without building a `serde_json::Value`.
//!
//! The text is parsed once into a flat tape (spans into the input, containers as contiguous
//! child ranges), so writing walks contiguous memory instead of a tree of maps. Strings without
//! escapes and short integer literals are copied verbatim, since their source spelling already is
//! canonical. Strict like [`crate::canonical::parse_strict`]: duplicate member names, lone
//! surrogates, numbers beyond a double and trailing content are errors. `serde_json_canonicalizer`
//! is the differential reference in the property tests.

use crate::canonical::{self, JsonError, Sink};

#[derive(Clone, Copy, Debug)]
enum Node {
    Null,
    True,
    False,
    /// A number literal, `start..end` in the input.
    Num(u32, u32),
    /// A string's contents between the quotes; `true` when it holds escapes.
    Str(u32, u32, bool),
    /// `len` children starting at tape index `first`.
    Arr(u32, u32),
    /// `len` key/value pairs (2 × len tape entries) starting at `first`.
    Obj(u32, u32),
}

struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
    tape: Vec<Node>,
    stack: Vec<Node>,
    depth: usize,
    max_depth: usize,
}

fn err(msg: impl Into<String>) -> JsonError {
    JsonError::Syntax(msg.into())
}

impl<'a> Parser<'a> {
    fn ws(&mut self) {
        while let Some(&b) = self.text.get(self.pos) {
            if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn at(&self) -> String {
        format!("at byte {}", self.pos)
    }

    fn literal(&mut self, word: &[u8], node: Node) -> Result<Node, JsonError> {
        if self.text[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(node)
        } else {
            Err(err(format!("invalid literal {}", self.at())))
        }
    }

    fn string(&mut self) -> Result<Node, JsonError> {
        // self.text[self.pos] == b'"'
        let start = self.pos + 1;
        let mut i = start;
        let mut escaped = false;
        loop {
            let Some(off) = memchr::memchr3(b'"', b'\\', b'\n', &self.text[i..]) else {
                return Err(err(format!("unterminated string starting at byte {start}")));
            };
            // Control characters are not allowed raw; check the run we skipped.
            if self.text[i..i + off].iter().any(|&b| b < 0x20) {
                return Err(err(format!("control character in a string near byte {i}")));
            }
            i += off;
            match self.text[i] {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    match self.text.get(i + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                        Some(b'u') => {
                            let hex = self
                                .text
                                .get(i + 2..i + 6)
                                .ok_or_else(|| err("truncated \\u escape"))?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return Err(err(format!("invalid \\u escape at byte {i}")));
                            }
                            i += 6;
                        }
                        _ => return Err(err(format!("invalid escape at byte {i}"))),
                    }
                }
                _ => return Err(err(format!("raw newline in a string at byte {i}"))),
            }
        }
        self.pos = i + 1;
        Ok(Node::Str(start as u32, i as u32, escaped))
    }

    fn number(&mut self) -> Result<Node, JsonError> {
        let start = self.pos;
        let t = self.text;
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
        if t.get(i) == Some(&b'.') {
            i += 1;
            let digits = i;
            while t.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == digits {
                return Err(err(format!("invalid fraction at byte {start}")));
            }
        }
        if matches!(t.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(t.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let digits = i;
            while t.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == digits {
                return Err(err(format!("invalid exponent at byte {start}")));
            }
        }
        self.pos = i;
        Ok(Node::Num(start as u32, i as u32))
    }

    fn value(&mut self) -> Result<Node, JsonError> {
        self.ws();
        match self.text.get(self.pos) {
            None => Err(err("unexpected end of input")),
            Some(b'"') => self.string(),
            Some(b'n') => self.literal(b"null", Node::Null),
            Some(b't') => self.literal(b"true", Node::True),
            Some(b'f') => self.literal(b"false", Node::False),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[') => self.container(false),
            Some(b'{') => self.container(true),
            Some(_) => Err(err(format!("unexpected character {}", self.at()))),
        }
    }

    fn container(&mut self, object: bool) -> Result<Node, JsonError> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(JsonError::TooDeep(self.max_depth));
        }
        self.pos += 1;
        let base = self.stack.len();
        let close = if object { b'}' } else { b']' };
        self.ws();
        if self.text.get(self.pos) == Some(&close) {
            self.pos += 1;
        } else {
            loop {
                if object {
                    self.ws();
                    if self.text.get(self.pos) != Some(&b'"') {
                        return Err(err(format!("expected a member name {}", self.at())));
                    }
                    let key = self.string()?;
                    self.stack.push(key);
                    self.ws();
                    if self.text.get(self.pos) != Some(&b':') {
                        return Err(err(format!("expected ':' {}", self.at())));
                    }
                    self.pos += 1;
                }
                let v = self.value()?;
                self.stack.push(v);
                self.ws();
                match self.text.get(self.pos) {
                    Some(b',') => self.pos += 1,
                    Some(&c) if c == close => {
                        self.pos += 1;
                        break;
                    }
                    _ => {
                        return Err(err(format!(
                            "expected ',' or a closing bracket {}",
                            self.at()
                        )));
                    }
                }
            }
        }
        let first = self.tape.len() as u32;
        let n = (self.stack.len() - base) as u32;
        self.tape.extend(self.stack.drain(base..));
        self.depth -= 1;
        Ok(if object {
            Node::Obj(first, n / 2)
        } else {
            Node::Arr(first, n)
        })
    }
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

struct Writer<'a> {
    text: &'a [u8],
    tape: &'a [Node],
    keys: Vec<(std::borrow::Cow<'a, [u8]>, u32)>,
}

impl<'a> Writer<'a> {
    /// A member name as UTF-8 bytes (spans of the `&str` input between ASCII quotes are UTF-8,
    /// and byte order is code point order).
    fn key(&self, node: Node) -> Result<std::borrow::Cow<'a, [u8]>, JsonError> {
        match node {
            Node::Str(s, e, false) => Ok(std::borrow::Cow::Borrowed(
                &self.text[s as usize..e as usize],
            )),
            Node::Str(s, e, true) => Ok(std::borrow::Cow::Owned(
                decode(&self.text[s as usize..e as usize])?.into_bytes(),
            )),
            _ => Err(err("member name is not a string")),
        }
    }

    fn write<S: Sink>(&mut self, node: Node, out: &mut S) -> Result<(), JsonError> {
        match node {
            Node::Null => out.put(b"null"),
            Node::True => out.put(b"true"),
            Node::False => out.put(b"false"),
            Node::Num(s, e) => {
                let lit = &self.text[s as usize..e as usize];
                // Short integers (no leading zeros, not -0) are already in ECMAScript form.
                let digits = lit.strip_prefix(b"-").unwrap_or(lit);
                if digits.len() <= 15 && digits.iter().all(u8::is_ascii_digit) && lit != b"-0" {
                    out.put(lit);
                } else {
                    let f: f64 = std::str::from_utf8(lit)
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| err("invalid number"))?;
                    if !f.is_finite() {
                        return Err(err("number out of range"));
                    }
                    canonical::write_number(f, out);
                }
            }
            Node::Str(s, e, false) => {
                out.put(b"\"");
                out.put(&self.text[s as usize..e as usize]);
                out.put(b"\"");
            }
            Node::Str(s, e, true) => {
                canonical::write_string(&decode(&self.text[s as usize..e as usize])?, out)
            }
            Node::Arr(first, len) => {
                out.put(b"[");
                for i in 0..len {
                    if i > 0 {
                        out.put(b",");
                    }
                    self.write(self.tape[(first + i) as usize], out)?;
                }
                out.put(b"]");
            }
            Node::Obj(first, len) => {
                let base = self.keys.len();
                let mut supplementary = false;
                for m in 0..len {
                    let at = first + 2 * m;
                    let k = self.key(self.tape[at as usize])?;
                    supplementary |= k.iter().any(|&b| b >= 0xF0);
                    self.keys.push((k, at));
                }
                let members = &mut self.keys[base..];
                if supplementary {
                    let utf16 = |k: &[u8]| {
                        String::from_utf8_lossy(k)
                            .encode_utf16()
                            .collect::<Vec<u16>>()
                    };
                    members.sort_by_cached_key(|m| utf16(&m.0));
                } else {
                    members.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                }
                if let Some(w) = members.windows(2).find(|w| w[0].0 == w[1].0) {
                    return Err(err(format!(
                        "duplicate member name {:?}",
                        String::from_utf8_lossy(&w[0].0)
                    )));
                }
                out.put(b"{");
                for m in 0..len as usize {
                    if m > 0 {
                        out.put(b",");
                    }
                    let at = self.keys[base + m].1 as usize;
                    let (k, v) = (self.tape[at], self.tape[at + 1]);
                    self.write(k, out)?;
                    out.put(b":");
                    self.write(v, out)?;
                }
                out.put(b"}");
                self.keys.truncate(base);
            }
        }
        Ok(())
    }
}

/// Writes the RFC 8785 form of one JSON document given as text.
pub fn canonicalize<S: Sink>(text: &str, max_depth: usize, out: &mut S) -> Result<(), JsonError> {
    if text.len() > u32::MAX as usize {
        return Err(err("document too large"));
    }
    let mut p = Parser {
        text: text.as_bytes(),
        pos: 0,
        tape: Vec::with_capacity(text.len() / 16),
        stack: Vec::new(),
        depth: 0,
        max_depth,
    };
    let root = p.value()?;
    p.ws();
    if p.pos != p.text.len() {
        return Err(err(format!("trailing characters {}", p.at())));
    }
    // On an error the sink holds a partial document: callers discard it (see `to_vec`, `digest`).
    let mut w = Writer {
        text: p.text,
        tape: &p.tape,
        keys: Vec::new(),
    };
    w.write(root, out)
}

/// The canonical bytes of a JSON text.
pub fn to_vec(text: &str, max_depth: usize) -> Result<Vec<u8>, JsonError> {
    let mut out = Vec::with_capacity(text.len());
    canonicalize(text, max_depth, &mut out)?;
    Ok(out)
}

/// The digest of a JSON text's canonical bytes, without materialising them.
pub fn digest(text: &str, max_depth: usize) -> Result<crate::model::Digest, JsonError> {
    let mut sink = canonical::HashSink::default();
    canonicalize(text, max_depth, &mut sink)?;
    Ok(sink.finish().0)
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
