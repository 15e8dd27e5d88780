//! The scanner's lexical state: what it expects next and the token it is in.

use super::number::NumberText;

/// What the scanner expects next, between tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expect {
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
pub(super) enum Num {
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
pub(super) struct Str {
    pub(super) key: bool,
    pub(super) escape: bool,
    /// `\u` digits still due.
    pub(super) hex: u8,
    /// The `\u` code read so far.
    pub(super) code: u16,
    /// A high surrogate escape was read and its low half must follow at once.
    pub(super) high: bool,
    /// Whether lone surrogates are errors here (kept members and top-level names).
    pub(super) strict: bool,
}

/// The token being read, when a slice boundary can fall inside one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Token {
    None,
    Str(Str),
    Num(Num),
    Lit { word: &'static [u8], at: u8 },
}

/// What kind of value starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Object,
    Array,
    String,
    Number,
    Literal,
}

/// The text of a string or number being collected, up to a cap.
#[derive(Debug, Default)]
pub(super) struct Text {
    /// Collecting at all.
    pub(super) on: bool,
    pub(super) bytes: Vec<u8>,
    pub(super) cap: usize,
    /// Bytes seen, collected or not.
    pub(super) seen: u64,
}

impl Text {
    pub(super) fn start(&mut self, cap: usize) {
        self.on = true;
        self.bytes.clear();
        self.cap = cap;
        self.seen = 0;
    }

    pub(super) fn push(&mut self, part: &[u8]) {
        if self.on {
            self.seen += part.len() as u64;
            let room = self.cap.saturating_sub(self.bytes.len());
            self.bytes.extend_from_slice(&part[..part.len().min(room)]);
        }
    }

    pub(super) fn complete(&self) -> bool {
        self.seen as usize == self.bytes.len()
    }

    /// The string collected (quotes included), decoded; `None` when cut or not a string.
    pub(super) fn decode(&self) -> Option<Result<String, String>> {
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

/// An open container of the document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Container {
    Object,
    Array,
}

/// The lexer's state: where the scanner is in the JSON text, and the token it is collecting.
#[derive(Debug)]
pub(super) struct Lexer {
    pub(super) expect: Expect,
    pub(super) token: Token,
    /// Open containers, outermost first.
    pub(super) stack: Vec<Container>,
    /// The string or number being collected.
    pub(super) text: Text,
    pub(super) number: NumberText,
    /// Whether the number being read is collected.
    pub(super) number_on: bool,
    /// The first syntax error (or limit the collector hit); nothing is read after it.
    pub(super) error: Option<String>,
}

impl Default for Lexer {
    fn default() -> Self {
        Self {
            expect: Expect::Document,
            token: Token::None,
            stack: Vec::new(),
            text: Text::default(),
            number: NumberText::default(),
            number_on: false,
            error: None,
        }
    }
}
