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

mod collect;
mod collected;
mod definition;
mod lexer;
mod number;
mod scanner;
#[cfg(test)]
mod tests;
mod token;
mod utf8;

use collect::*;
use collected::*;
use definition::*;
use lexer::*;
use scanner::*;
use token::*;
use utf8::*;

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

/// A revision read to its end: its digest, and its contribution or the one rejection. It
/// depends on nothing but the bytes, the package name and the approved permissions the reader
/// was made with, so a batch keeps one for every head that shares all three.
#[derive(Clone, Debug)]
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
        let package = self.scanner.package_name().to_owned();
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

    /// About how many bytes a copy of this holds: the definitions' canonical bodies and
    /// strings, or the rejection's text (for a memory reservation, so a little over).
    pub fn held_bytes(&self) -> u64 {
        const PER_DEFINITION: u64 = 256;
        let text = |s: &str| s.len() as u64;
        match &self.verdict {
            Ok(c) => {
                let definitions: u64 = c
                    .definitions
                    .iter()
                    .map(|d| {
                        PER_DEFINITION
                            + d.body.as_ref().map_or(0, |b| b.len() as u64)
                            + text(&d.canonical_identity)
                            + text(&d.alias)
                            + text(&d.version)
                            + text(&d.identity.source)
                            + text(&d.identity.origin)
                            + text(&d.identity.name)
                    })
                    .sum();
                PER_DEFINITION + text(&c.package_version) + definitions
            }
            Err(r) => PER_DEFINITION + text(&r.detail),
        }
    }
}
