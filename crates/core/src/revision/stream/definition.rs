//! The definition being read: built into a value while it can be within its size limit.

use super::*;

/// The definition being read: built into a value while it can be within its size limit.
#[derive(Debug)]
pub(super) struct Definition {
    pub(super) index: usize,
    pub(super) frames: Vec<Frame>,
    /// A lower bound of its canonical size, exact but for number spellings and escapes.
    pub(super) canonical_at_least: u64,
    /// Nothing more is built (past its size limit, or a duplicate member name made it
    /// invalid): only its own member names are looked at, for a forbidden one.
    pub(super) unbuilt: bool,
    /// The first duplicate member name in any of its objects, quoted.
    pub(super) duplicate: Option<String>,
    /// The smallest forbidden member name among its own, built or not.
    pub(super) forbidden: Option<&'static str>,
    /// Members (or items) already in each open container, to count the commas.
    pub(super) counts: Vec<usize>,
}

impl Definition {
    pub(super) fn new(index: usize) -> Self {
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
    pub(super) fn room(&self) -> u64 {
        MAX_DEFINITION_BYTES.saturating_sub(self.canonical_at_least)
    }

    pub(super) fn grow(&mut self, canonical: u64) {
        self.canonical_at_least += canonical;
        if self.canonical_at_least > MAX_DEFINITION_BYTES {
            self.stop_building();
        }
    }

    /// Drops what was built: the definition is invalid whatever else it holds, and only a
    /// forbidden member among its own can still rank before that.
    pub(super) fn stop_building(&mut self) {
        self.unbuilt = true;
        self.frames = Vec::new();
    }

    /// One of its own member names (depth 3), built or not: the smallest forbidden one ranks
    /// first, whatever made the definition invalid.
    pub(super) fn own_member(&mut self, name: &str) {
        if let Some(f) = crate::revision::forbidden(name)
            && self.forbidden.is_none_or(|seen| f < seen)
        {
            self.forbidden = Some(f);
        }
    }

    /// A comma before the next item of the innermost container, when it is not the first.
    pub(super) fn comma(&mut self) {
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
    pub(super) fn key(&mut self, name: String) {
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
    pub(super) fn attach(&mut self, value: Value) {
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
    pub(super) fn scalar(&mut self, value: Value, canonical: u64, in_array: bool) {
        if in_array {
            self.comma();
        }
        self.grow(canonical);
        if !self.unbuilt {
            self.attach(value);
        }
    }

    pub(super) fn open(&mut self, object: bool, in_array: bool) {
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

    pub(super) fn close(&mut self) {
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
