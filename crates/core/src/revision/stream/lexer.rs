//! The lexer: bytes to events, and the JSON syntax of the whole document.
//!
//! [`Lexer::feed`] reads any slice of the text and tells an [`Events`] listener what starts and
//! ends. The listener decides what is collected: before a string or number is read, it says
//! whether its text is kept (and up to how much) and whether lone surrogates are errors in it.

use super::*;

/// What the lexer tells its listener, and asks of it. Each call gets the lexer: the listener
/// reads its depth and collected text, and switches collecting on and off.
pub(super) trait Events {
    /// A member name starts: start collecting its text (up to a cap), or not.
    fn key_starts(&mut self, lex: &mut Lexer);
    /// A value of `kind` starts (a container's bracket is not on the stack yet).
    fn value_starts(&mut self, lex: &mut Lexer, kind: Kind);
    /// Whether a string that starts now (a member name when `key`) refuses lone surrogates.
    fn strict(&self, lex: &Lexer, key: bool) -> bool;
    /// Whether a number that starts now is collected.
    fn collects_number(&self, lex: &Lexer) -> bool;
    /// A collected string runs past the slice: the listener may stop collecting it.
    fn string_continues(&mut self, lex: &mut Lexer);
    /// A member name ended; its text is in `lex.text` when it was collected.
    fn key_ends(&mut self, lex: &mut Lexer);
    /// A string value ended; its text is in `lex.text` when it was collected.
    fn string_ends(&mut self, lex: &mut Lexer);
    /// A collected number ended, with its value.
    fn number_ends(&mut self, lex: &mut Lexer, n: Number);
    /// `true`, `false` or `null` ended.
    fn literal_ends(&mut self, lex: &mut Lexer, word: &'static [u8]);
    /// A container closed; `depth` counts it (the stack no longer holds it).
    fn container_ends(&mut self, lex: &mut Lexer, depth: usize);
    /// A value ended, at the stack's depth now.
    fn value_ends(&mut self, lex: &mut Lexer);
}

pub(super) fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Str {
    pub(super) fn new(key: bool, strict: bool) -> Self {
        Self {
            key,
            escape: false,
            hex: 0,
            code: 0,
            high: false,
            strict,
        }
    }
}

impl Lexer {
    /// The first syntax error wins; the lexer reads nothing after it.
    pub(super) fn fail(&mut self, why: impl fmt::Display) {
        if self.error.is_none() {
            self.error = Some(why.to_string());
        }
    }

    pub(super) fn feed<E: Events>(&mut self, slice: &[u8], e: &mut E) {
        let mut i = 0;
        while i < slice.len() && self.error.is_none() {
            let b = slice[i];
            match self.token {
                Token::Str(s) => i = self.string(s, slice, i, e),
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
                            self.number_ends(e);
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
                        e.literal_ends(self, word);
                        self.value_ends(e);
                    } else {
                        self.token = Token::Lit { word, at: at + 1 };
                    }
                }
                Token::None => {
                    if is_ws(b) {
                        i += 1;
                        continue;
                    }
                    self.structural(b, e);
                    i += 1;
                }
            }
        }
    }

    /// Reads string bytes from `i`; returns where it stopped.
    pub(super) fn string<E: Events>(
        &mut self,
        mut s: Str,
        slice: &[u8],
        mut i: usize,
        e: &mut E,
    ) -> usize {
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
                self.string_ends(s.key, e);
            } else {
                self.token = Token::Str(s);
                e.string_continues(self);
            }
            return i;
        }
        self.text.push(&slice[start..i]);
        self.token = Token::Str(s);
        i
    }

    /// One structural byte (not whitespace, not inside a token).
    pub(super) fn structural<E: Events>(&mut self, b: u8, e: &mut E) {
        match self.expect {
            Expect::Document => {
                if b == b'{' {
                    self.open(Container::Object);
                } else {
                    self.fail("invalid type: the document is not an object");
                }
            }
            Expect::Value | Expect::ValueOrClose => {
                if b == b']' && self.expect == Expect::ValueOrClose {
                    self.close(Container::Array, e);
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
                e.value_starts(self, kind);
                match b {
                    b'{' => self.open(Container::Object),
                    b'[' => self.open(Container::Array),
                    b'"' => {
                        self.token = Token::Str(Str::new(false, e.strict(self, false)));
                        self.text.push(b"\"");
                    }
                    b'-' => self.begin_number(b, Num::Minus, e),
                    b'0' => self.begin_number(b, Num::Zero, e),
                    b'1'..=b'9' => self.begin_number(b, Num::Int, e),
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
                    self.close(Container::Object, e);
                } else if b == b'"' {
                    e.key_starts(self);
                    self.text.push(b"\"");
                    self.token = Token::Str(Str::new(true, e.strict(self, true)));
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
                let object = self.stack.last() == Some(&Container::Object);
                match b {
                    b',' => {
                        self.expect = if object { Expect::Key } else { Expect::Value };
                    }
                    b'}' if object => self.close(Container::Object, e),
                    b']' if !object => self.close(Container::Array, e),
                    _ => self.fail("expected `,` or the end of the container"),
                }
            }
            Expect::End => self.fail("trailing characters"),
        }
    }

    pub(super) fn begin_number<E: Events>(&mut self, b: u8, n: Num, e: &mut E) {
        self.token = Token::Num(n);
        self.number_on = e.collects_number(self);
        if self.number_on {
            self.number.start();
            self.number.push(b);
        }
    }

    pub(super) fn open(&mut self, container: Container) {
        if self.stack.len() >= MAX_REVISION_DEPTH {
            // The depth check reports it; nothing deeper is scanned.
            self.fail(JsonError::TooDeep(MAX_REVISION_DEPTH));
            return;
        }
        self.stack.push(container);
        self.expect = if container == Container::Object {
            Expect::KeyOrClose
        } else {
            Expect::ValueOrClose
        };
    }

    pub(super) fn close<E: Events>(&mut self, container: Container, e: &mut E) {
        let depth = self.stack.len();
        if self.stack.pop() != Some(container) {
            self.fail("mismatched closing bracket");
            return;
        }
        e.container_ends(self, depth);
        self.value_ends(e);
    }

    /// A value ended (the stack no longer holds it, if it was a container).
    pub(super) fn value_ends<E: Events>(&mut self, e: &mut E) {
        self.expect = if self.stack.is_empty() {
            Expect::End
        } else {
            Expect::CommaOrClose
        };
        e.value_ends(self);
    }

    pub(super) fn string_ends<E: Events>(&mut self, key: bool, e: &mut E) {
        if key {
            self.expect = Expect::Colon;
            e.key_ends(self);
        } else {
            e.string_ends(self);
            self.text.on = false;
            self.value_ends(e);
        }
    }

    pub(super) fn number_ends<E: Events>(&mut self, e: &mut E) {
        if self.number_on {
            self.number_on = false;
            match self.number.value() {
                Ok(n) => e.number_ends(self, n),
                Err(why) => return self.fail(why),
            }
        }
        self.value_ends(e);
    }
}
