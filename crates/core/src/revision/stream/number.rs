//! A number token, reduced as it streams by to what decides its double.

use super::*;

/// A number token reduced, as it streams by, to what decides its double.
#[derive(Debug, Default)]
pub(super) struct NumberText {
    pub(super) raw: Vec<u8>,
    pub(super) negative: bool,
    pub(super) digits: Vec<u8>,
    /// A non-zero digit past the kept ones.
    pub(super) sticky: bool,
    /// The value is `0.DIGITS × 10^point × 10^exponent`.
    pub(super) point: i64,
    pub(super) exponent: i64,
    pub(super) exponent_negative: bool,
    pub(super) in_fraction: bool,
    pub(super) in_exponent: bool,
}

/// Far beyond any double's exponent, small enough never to overflow.
pub(super) const EXPONENT_CAP: i64 = 1 << 40;

impl NumberText {
    pub(super) fn start(&mut self) {
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

    pub(super) fn push(&mut self, b: u8) {
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
    pub(super) fn value(&self) -> Result<Number, String> {
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
