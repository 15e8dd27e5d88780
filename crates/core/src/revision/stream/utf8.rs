//! UTF-8 validation across slice boundaries.

/// UTF-8 validation across slice boundaries: a sequence cut by a boundary is carried over.
#[derive(Debug, Default)]
pub(super) struct Utf8Check {
    pub(super) carry: [u8; 4],
    pub(super) carried: usize,
    /// Offset of the first byte of the first invalid sequence.
    pub(super) bad: Option<u64>,
}

impl Utf8Check {
    pub(super) fn feed(&mut self, base: u64, mut slice: &[u8]) {
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

    pub(super) fn finish(&self, len: u64) -> Option<u64> {
        self.bad
            .or((self.carried > 0).then(|| len - self.carried as u64))
    }
}
