//! The push scanner: bytes to tokens, JSON syntax of the whole document.

use super::*;

/// The push scanner: JSON syntax of the whole document ([`Lexer`]), and what the snapshot
/// needs of the three kept members, built as they stream by (the other fields).
#[derive(Debug)]
pub(super) struct Scanner {
    pub(super) package_name: String,
    pub(super) approved: Vec<String>,
    /// Where the scanner is in the JSON text.
    pub(super) lex: Lexer,
    /// The kept member whose value comes next or is being read.
    pub(super) member: Option<Member>,
    /// Kept members seen, by [`Member::index`].
    pub(super) seen: [bool; 3],
    pub(super) schema: Schema,
    pub(super) package: Package,
    /// The `package` member whose value comes next (`name` or `version`).
    pub(super) package_field: Option<PackageField>,
    pub(super) tools: Tools,
    /// Items of `tools` started so far.
    pub(super) tool_items: usize,
    pub(super) not_object: Option<usize>,
    pub(super) definition: Option<Definition>,
    pub(super) kept: Vec<ValidatedDefinition>,
    pub(super) valid: usize,
    pub(super) body_bytes: u64,
    pub(super) bodies_dropped: bool,
    pub(super) first_rejection: Option<Rejection>,
    pub(super) error: Option<String>,
}

pub(super) fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Scanner {
    pub(super) fn new(package_name: &str, approved: &[String]) -> Self {
        Self {
            package_name: package_name.to_owned(),
            approved: approved.to_vec(),
            lex: Lexer::default(),
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

    pub(super) fn fail(&mut self, why: impl fmt::Display) {
        if self.error.is_none() {
            self.error = Some(why.to_string());
        }
    }

    /// The kept member being read, when the scanner is inside its value. Of `package` only
    /// `name` and `version` are kept: its other members are ignored like the document's
    /// (contract section 3), so inside them nothing is strict.
    pub(super) fn region(&self) -> Option<Member> {
        if !(self.lex.stack.len() >= 2 || self.lex.text.on || self.lex.number_on) {
            return None;
        }
        match self.member {
            Some(Member::Package) if self.lex.stack.len() != 2 || self.package_field.is_none() => {
                None
            }
            kept => kept,
        }
    }

    /// A member name is read here whatever it names: the document's own, and `package`'s.
    pub(super) fn names_are_read(&self) -> bool {
        let depth = self.lex.stack.len();
        depth == 1 || (depth == 2 && self.member == Some(Member::Package))
    }

    pub(super) fn in_definition(&self) -> bool {
        self.definition.is_some() && self.lex.stack.len() >= 3
    }

    pub(super) fn feed(&mut self, slice: &[u8]) {
        let mut i = 0;
        while i < slice.len() && self.error.is_none() {
            let b = slice[i];
            match self.lex.token {
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
                            self.lex.token = Token::Num(n);
                            if self.lex.number_on {
                                self.lex.number.push(b);
                            }
                            i += 1;
                        }
                        None if matches!(n, Num::Zero | Num::Int | Num::Frac | Num::ExpInt)
                            && !b.is_ascii_digit() =>
                        {
                            // The number ended before this byte, which is read again.
                            self.lex.token = Token::None;
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
                        self.lex.token = Token::None;
                        self.literal_done(word);
                    } else {
                        self.lex.token = Token::Lit { word, at: at + 1 };
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
    pub(super) fn string(&mut self, mut s: Str, slice: &[u8], mut i: usize) -> usize {
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
            self.lex.text.push(&slice[start..i]);
            if done {
                self.lex.token = Token::None;
                self.string_done(s.key);
            } else {
                self.lex.token = Token::Str(s);
                self.check_string_room();
            }
            return i;
        }
        self.lex.text.push(&slice[start..i]);
        self.lex.token = Token::Str(s);
        i
    }

    /// A definition's string that cannot fit its definition's limit any more makes the
    /// definition oversized at once, so its text is never held past the limit.
    pub(super) fn check_string_room(&mut self) {
        if self.in_definition()
            && let Some(d) = &mut self.definition
            && !d.unbuilt
            && self.lex.text.on
            && !self.lex.text.complete()
        {
            d.grow(MAX_DEFINITION_BYTES + 1);
            self.lex.text.on = false;
        }
    }

    /// One structural byte (not whitespace, not inside a token).
    pub(super) fn structural(&mut self, b: u8) {
        match self.lex.expect {
            Expect::Document => {
                if b == b'{' {
                    self.open(Container::Object);
                } else {
                    self.fail("invalid type: the document is not an object");
                }
            }
            Expect::Value | Expect::ValueOrClose => {
                if b == b']' && self.lex.expect == Expect::ValueOrClose {
                    self.close(Container::Array);
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
                    b'{' => self.open(Container::Object),
                    b'[' => self.open(Container::Array),
                    b'"' => {
                        self.lex.token = Token::Str(self.new_str(false));
                        self.lex.text.push(b"\"");
                    }
                    b'-' => self.begin_number(b, Num::Minus),
                    b'0' => self.begin_number(b, Num::Zero),
                    b'1'..=b'9' => self.begin_number(b, Num::Int),
                    b't' => {
                        self.lex.token = Token::Lit {
                            word: b"true",
                            at: 1,
                        }
                    }
                    b'f' => {
                        self.lex.token = Token::Lit {
                            word: b"false",
                            at: 1,
                        }
                    }
                    _ => {
                        self.lex.token = Token::Lit {
                            word: b"null",
                            at: 1,
                        }
                    }
                }
            }
            Expect::KeyOrClose | Expect::Key => {
                if b == b'}' && self.lex.expect == Expect::KeyOrClose {
                    self.close(Container::Object);
                } else if b == b'"' {
                    self.begin_key();
                } else if self.lex.expect == Expect::Key && b == b'}' {
                    self.fail("trailing comma");
                } else {
                    self.fail("key must be a string");
                }
            }
            Expect::Colon => {
                if b == b':' {
                    self.lex.expect = Expect::Value;
                } else {
                    self.fail("expected `:`");
                }
            }
            Expect::CommaOrClose => {
                let object = self.lex.stack.last() == Some(&Container::Object);
                match b {
                    b',' => {
                        self.lex.expect = if object { Expect::Key } else { Expect::Value };
                    }
                    b'}' if object => self.close(Container::Object),
                    b']' if !object => self.close(Container::Array),
                    _ => self.fail("expected `,` or the end of the container"),
                }
            }
            Expect::End => self.fail("trailing characters"),
        }
    }

    pub(super) fn new_str(&self, key: bool) -> Str {
        Str {
            key,
            escape: false,
            hex: 0,
            code: 0,
            high: false,
            strict: (key && self.names_are_read()) || self.region().is_some(),
        }
    }

    pub(super) fn begin_number(&mut self, b: u8, n: Num) {
        self.lex.token = Token::Num(n);
        self.lex.number_on = self.region().is_some();
        if self.lex.number_on {
            self.lex.number.start();
            self.lex.number.push(b);
        }
    }
}
