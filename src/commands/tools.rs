//! `canonicalize` and `identity`: the pure core on the command line.

use std::io::{Read, Write};
use std::path::Path;

use crate::canonical;

/// How deep a document `canonicalize` takes may nest.
const MAX_DEPTH: usize = 512;
use crate::cli::IdentityCommand;
use crate::exit::Exit;
use crate::identity::ToolIdentity;
use crate::model::Digest;

/// `canonicalize [FILE] [--digest]`.
pub(super) fn canonicalize(file: Option<&Path>, digest: bool) -> anyhow::Result<Exit> {
    // `-` is standard input, as in `sources import -`.
    let file = file.filter(|p| *p != Path::new("-"));
    let input = match file {
        Some(path) => match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                errln!(
                    "error: cannot read {}: {e}; check the path, and that this process may read the file",
                    path.display()
                );
                return Ok(Exit::Error);
            }
        },
        None => {
            let mut b = Vec::new();
            std::io::stdin().read_to_end(&mut b)?;
            b
        }
    };
    // The executor's own parser and writer: one canonical form, one set of refusals.
    let canonical = canonical::parse_strict(&input, MAX_DEPTH).map(|v| canonical::to_vec(&v));
    let bytes = match canonical {
        Ok(b) => b,
        Err(e) => {
            errln!(
                "error: not acceptable JSON: {e}; fix the document (duplicate member names and lone surrogates are refused)"
            );
            return Ok(Exit::Error);
        }
    };
    let mut out = std::io::stdout().lock();
    if digest {
        writeln!(out, "{}", Digest::of(&bytes))?;
    } else {
        out.write_all(&bytes)?;
    }
    out.flush()?;
    Ok(Exit::Ok)
}

/// `identity encode|decode`.
pub(super) fn identity(cmd: &IdentityCommand) -> anyhow::Result<Exit> {
    match cmd {
        IdentityCommand::Encode {
            source,
            origin,
            name,
        } => {
            let t = ToolIdentity {
                source: source.clone(),
                origin: origin.clone(),
                name: name.clone(),
            };
            match t.encode() {
                Ok(s) => {
                    outln!("{s}");
                    Ok(Exit::Ok)
                }
                Err(e) => {
                    errln!("error: {e}");
                    Ok(Exit::Error)
                }
            }
        }
        IdentityCommand::Decode { string } => match ToolIdentity::decode(string) {
            Ok(t) => {
                outln!("{}", serde_json::to_string(&t).unwrap_or_default());
                Ok(Exit::Ok)
            }
            Err(e) => {
                errln!("error: {string:?} is not a canonical identity: {e}");
                Ok(Exit::Error)
            }
        },
    }
}
