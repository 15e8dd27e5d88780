//! Tool identity: the `{source, origin, name}` triple, its reversible canonical string, wildcard
//! patterns over canonical strings, the model-visible alias and the ledger that keeps aliases and
//! identities in bijection (contract section 4).

use std::collections::BTreeMap;
use std::fmt;

use sha2::{Digest as _, Sha256};

/// A tool's identity (contract section 4): the triple its canonical string encodes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct ToolIdentity {
    /// Where the tool comes from: `package`, `builtin`, `mcp`, `plugin`, …
    pub source: String,
    /// Which package, server or plugin offers it.
    pub origin: String,
    /// The tool's local name.
    pub name: String,
}

/// Why a string or a triple is not a canonical identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// A component is empty.
    #[error(
        "the {0} component is empty; every component of an identity needs at least one character"
    )]
    EmptyComponent(&'static str),
    /// Not exactly three `:`-separated segments.
    #[error(
        "expected exactly three ':'-separated segments, found {0}; escape ':' inside a component as %3A"
    )]
    SegmentCount(usize),
    /// A raw `*`, `?`, `\` or `/`.
    #[error("raw {0:?} at byte {1}; it must be percent-escaped in a canonical identity")]
    RawReserved(char, usize),
    /// A `%` not followed by one of the six uppercase codes.
    #[error("'%' at byte {0} is not followed by one of %25 %3A %2A %3F %5C %2F")]
    BadEscape(usize),
}

const ESCAPES: [(char, &str); 6] = [
    ('%', "%25"),
    (':', "%3A"),
    ('*', "%2A"),
    ('?', "%3F"),
    ('\\', "%5C"),
    ('/', "%2F"),
];

fn escape_into(component: &str, out: &mut String) {
    for c in component.chars() {
        match ESCAPES.iter().find(|(raw, _)| *raw == c) {
            Some((_, code)) => out.push_str(code),
            None => out.push(c),
        }
    }
}

fn unescape(segment: &str, offset: usize) -> Result<String, IdentityError> {
    let mut out = String::with_capacity(segment.len());
    let mut rest = segment;
    let mut at = offset;
    while let Some(c) = rest.chars().next() {
        match c {
            '%' => {
                let code = rest.get(..3).ok_or(IdentityError::BadEscape(at))?;
                let (raw, _) = ESCAPES
                    .iter()
                    .find(|(_, known)| *known == code)
                    .ok_or(IdentityError::BadEscape(at))?;
                out.push(*raw);
                rest = &rest[3..];
                at += 3;
            }
            '*' | '?' | '\\' | '/' => return Err(IdentityError::RawReserved(c, at)),
            _ => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
                at += c.len_utf8();
            }
        }
    }
    Ok(out)
}

impl ToolIdentity {
    /// A package tool's identity.
    pub fn package(package_name: &str, tool_name: &str) -> Self {
        Self {
            source: "package".into(),
            origin: package_name.into(),
            name: tool_name.into(),
        }
    }

    /// The canonical string `esc(source):esc(origin):esc(name)`.
    pub fn encode(&self) -> Result<String, IdentityError> {
        for (what, c) in [
            ("source", &self.source),
            ("origin", &self.origin),
            ("name", &self.name),
        ] {
            if c.is_empty() {
                return Err(IdentityError::EmptyComponent(what));
            }
        }
        let mut out =
            String::with_capacity(self.source.len() + self.origin.len() + self.name.len() + 2);
        escape_into(&self.source, &mut out);
        out.push(':');
        escape_into(&self.origin, &mut out);
        out.push(':');
        escape_into(&self.name, &mut out);
        Ok(out)
    }

    /// Decodes a canonical string, refusing anything non-canonical; it never guesses.
    pub fn decode(s: &str) -> Result<Self, IdentityError> {
        let segments: Vec<&str> = s.split(':').collect();
        let [source, origin, name] = segments.as_slice() else {
            return Err(IdentityError::SegmentCount(segments.len()));
        };
        let mut offset = 0;
        let mut parts = Vec::with_capacity(3);
        for (what, seg) in [("source", source), ("origin", origin), ("name", name)] {
            if seg.is_empty() {
                return Err(IdentityError::EmptyComponent(what));
            }
            parts.push(unescape(seg, offset)?);
            offset += seg.len() + 1;
        }
        let name = parts.pop().unwrap_or_default();
        let origin = parts.pop().unwrap_or_default();
        let source = parts.pop().unwrap_or_default();
        Ok(Self {
            source,
            origin,
            name,
        })
    }

    /// The model-visible alias: `sanitize(origin)__sanitize(name)`, shortened with a hash of the
    /// canonical string when longer than 64 characters.
    pub fn alias(&self) -> Result<String, IdentityError> {
        let canonical = self.encode()?;
        Ok(alias_of(&self.origin, &self.name, &canonical))
    }
}

impl fmt::Display for ToolIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.encode() {
            Ok(s) => f.write_str(&s),
            Err(_) => write!(
                f,
                "{{{:?}, {:?}, {:?}}}",
                self.source, self.origin, self.name
            ),
        }
    }
}

fn sanitize_into(s: &str, out: &mut String) {
    for c in s.chars() {
        out.push(if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            c
        } else {
            '_'
        });
    }
}

/// The alias for an identity whose canonical string is already known.
pub fn alias_of(origin: &str, name: &str, canonical: &str) -> String {
    let mut alias = String::with_capacity(origin.len() + name.len() + 2);
    sanitize_into(origin, &mut alias);
    alias.push_str("__");
    sanitize_into(name, &mut alias);
    // Sanitised text is ASCII, so byte length is character count.
    if alias.len() > 64 {
        alias.truncate(55);
        alias.push('_');
        let hash = Sha256::digest(canonical.as_bytes());
        alias.push_str(&hex::encode(&hash.as_slice()[..4]));
    }
    alias
}

/// Whether `alias` has the alias shape `^[A-Za-z0-9_-]{1,64}$`.
pub fn is_alias(alias: &str) -> bool {
    (1..=64).contains(&alias.len())
        && alias
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Wildcard match over canonical strings: `*` matches any run of characters, `?` exactly one,
/// everything else literally and case-sensitively.
pub fn matches(pattern: &str, candidate: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = candidate.chars().collect();
    let (mut pi, mut si) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, si));
                pi += 1;
            }
            Some('?') => {
                pi += 1;
                si += 1;
            }
            Some(c) if *c == s[si] => {
                pi += 1;
                si += 1;
            }
            _ => match star {
                Some((sp, ss)) => {
                    pi = sp + 1;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// A ledger violation: two different identities that would be confused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerConflict {
    /// Canonical strings equal after Unicode lowercasing.
    CaseCollision {
        /// The identity seen first (in the order given).
        first: String,
        /// The identity that collides with it.
        second: String,
    },
    /// Aliases equal ignoring ASCII case.
    AliasCollision {
        /// The alias (lowercased).
        alias: String,
        /// The identity seen first.
        first: String,
        /// The identity that collides with it.
        second: String,
    },
}

/// Checks a set of `(canonical identity, alias)` pairs for the two ledger violations. Repeats of
/// one identity (several versions) are fine. All case collisions are looked for before any alias
/// collision, as contract section 6 orders them.
pub fn check_ledger<'a>(
    entries: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
) -> Result<(), LedgerConflict> {
    let mut by_lower: BTreeMap<String, &str> = BTreeMap::new();
    for (canonical, _) in entries.clone() {
        let first = *by_lower
            .entry(canonical.to_lowercase())
            .or_insert(canonical);
        if first != canonical {
            return Err(LedgerConflict::CaseCollision {
                first: first.to_owned(),
                second: canonical.to_owned(),
            });
        }
    }
    let mut by_alias: BTreeMap<String, &str> = BTreeMap::new();
    for (canonical, alias) in entries {
        let key = alias.to_ascii_lowercase();
        let first = *by_alias.entry(key.clone()).or_insert(canonical);
        if first != canonical {
            return Err(LedgerConflict::AliasCollision {
                alias: key,
                first: first.to_owned(),
                second: canonical.to_owned(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str, o: &str, n: &str) -> ToolIdentity {
        ToolIdentity {
            source: s.into(),
            origin: o.into(),
            name: n.into(),
        }
    }

    #[test]
    fn encode_escapes_exactly_six() {
        let t = id("mcp", "a:b/c", "x%y*z?w\\v é-_.");
        assert_eq!(
            t.encode().as_deref(),
            Ok("mcp:a%3Ab%2Fc:x%25y%2Az%3Fw%5Cv é-_.")
        );
        assert_eq!(
            ToolIdentity::decode("mcp:a%3Ab%2Fc:x%25y%2Az%3Fw%5Cv é-_."),
            Ok(t)
        );
        assert_eq!(
            id("", "o", "n").encode(),
            Err(IdentityError::EmptyComponent("source"))
        );
    }

    #[test]
    fn decode_refuses_non_canonical() {
        for bad in [
            "a:b", "a:b:c:d", ":b:c", "a::c", "a:b:", "a:b:c*", "a:b:c?", "a:b/x:c", "a:b\\:c",
            "a:b:%3a", "a:b:%", "a:b:%2", "a:b:%41", "",
        ] {
            assert!(ToolIdentity::decode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn aliases() {
        assert_eq!(
            ToolIdentity::package("acme.github", "search_issues")
                .alias()
                .as_deref(),
            Ok("acme_github__search_issues")
        );
        let long = ToolIdentity::package(&"p".repeat(40), &"n".repeat(40));
        let alias = long.alias().unwrap_or_default();
        assert_eq!(alias.len(), 64);
        assert!(alias.starts_with(&format!("{}__{}_", "p".repeat(40), "n".repeat(13))));
        let canonical = long.encode().unwrap_or_default();
        let hash = hex::encode(Sha256::digest(canonical.as_bytes()));
        assert_eq!(&alias[56..], &hash[..8]);
        assert!(is_alias(&alias));
        // Exactly 64 characters keeps the plain form.
        let edge = ToolIdentity::package(&"p".repeat(31), &"n".repeat(31));
        assert_eq!(edge.alias().map(|a| a.len()), Ok(64));
        assert!(!edge.alias().unwrap_or_default().contains(&hash[..8]));
    }

    #[test]
    fn wildcards() {
        assert!(matches(
            "package:acme.github:*",
            "package:acme.github:search"
        ));
        assert!(!matches(
            "package:acme.github:*",
            "package:acme.gitlab:search"
        ));
        assert!(matches("*", ""));
        assert!(matches("a?c", "abc"));
        assert!(!matches("a?c", "ac"));
        assert!(matches("*:*:x", "mcp:srv:x"));
        assert!(!matches("ABC", "abc"));
    }

    #[test]
    fn ledger() {
        let a = "package:p:Search";
        let b = "package:p:search";
        assert!(matches!(
            check_ledger([(a, "p__Search"), (b, "p__search")]),
            Err(LedgerConflict::CaseCollision { .. })
        ));
        assert!(matches!(
            check_ledger([("package:a.b:x", "a_b__x"), ("package:a_b:x", "a_b__x")]),
            Err(LedgerConflict::AliasCollision { .. })
        ));
        assert_eq!(check_ledger([(a, "p__Search"), (a, "p__Search")]), Ok(()));
    }
}
