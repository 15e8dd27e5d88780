//! The whole-document reader of earlier versions, kept only as the oracle the streamed reader
//! is tested against (`tests/it/core/properties.rs`, the fuzz target): it parses the kept members whole
//! into values, so its memory follows the input, and nothing but tests may call it. On every
//! input within the limits the two give the same contribution or the same code.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::{Contribution, REVISION_SCHEMA, malformed};
use crate::canonical::{self, NotingDuplicates, StrictValue};
use crate::limits::MAX_REVISION_DEPTH;
use crate::quote::quote;
use crate::rejection::{Rejection, RejectionCode as Code};

/// The kept members of a revision document.
#[derive(Debug, Default)]
struct Kept {
    schema: Option<Value>,
    /// `package`'s `name` and `version`; its other members are ignored.
    package: Option<Value>,
    /// Each definition, and the first member name one of its objects gives twice.
    tools: Option<Vec<(Value, Option<String>)>>,
}

struct KeptSeed;

impl<'de> DeserializeSeed<'de> for KeptSeed {
    type Value = Kept;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Kept, D::Error> {
        d.deserialize_any(KeptVisitor)
    }
}

struct KeptVisitor;

impl<'de> Visitor<'de> for KeptVisitor {
    type Value = Kept;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a materialized-revision object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kept, A::Error> {
        let mut kept = Kept::default();
        let mut seen = [false; 3];
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let slot = match key.as_ref() {
                "schema" => 0,
                "package" => 1,
                "tools" => 2,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if std::mem::replace(&mut seen[slot], true) {
                return Err(de::Error::custom(format_args!(
                    "duplicate member name {key:?}"
                )));
            }
            match slot {
                0 => kept.schema = Some(map.next_value_seed(StrictValue)?),
                1 => kept.package = Some(map.next_value_seed(PackageSeed)?),
                _ => kept.tools = Some(map.next_value_seed(ToolsSeed)?),
            }
        }
        Ok(kept)
    }
}

/// `package`: an object whose `name` and `version` are kept and whose other members are
/// ignored (well-formed JSON only).
struct PackageSeed;

impl<'de> DeserializeSeed<'de> for PackageSeed {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(PackageSeed)
    }
}

impl<'de> Visitor<'de> for PackageSeed {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the package object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key != "name" && key != "version" {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate member name {key:?}"
                )));
            }
            let value = map.next_value_seed(StrictValue)?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// `tools`: an array, each item parsed with its duplicate member names noted.
struct ToolsSeed;

impl<'de> DeserializeSeed<'de> for ToolsSeed {
    type Value = Vec<(Value, Option<String>)>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(ToolsSeed)
    }
}

impl<'de> Visitor<'de> for ToolsSeed {
    type Value = Vec<(Value, Option<String>)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tools as an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let duplicate = Cell::new(None);
            match seq.next_element_seed(NotingDuplicates(&duplicate))? {
                Some(item) => items.push((item, duplicate.take())),
                None => return Ok(items),
            }
        }
    }
}

/// Parses a revision and validates its definitions against the installation's package name and
/// the generation's approved permissions. The first failure, in contract section 6 order, is returned.
pub fn extract(
    bytes: &[u8],
    package_name: &str,
    approved_permissions: &[String],
) -> Result<Contribution, Rejection> {
    let kept = parse_kept(bytes).map_err(|e| malformed(package_name, e))?;
    validate_kept(kept, package_name, approved_permissions)
}

/// The kept members of a whole revision held in memory, or why it is not a document.
fn parse_kept(bytes: &[u8]) -> Result<Kept, String> {
    let text =
        canonical::check_utf8_and_depth(bytes, MAX_REVISION_DEPTH).map_err(|e| e.to_string())?;
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    KeptSeed
        .deserialize(&mut de)
        .and_then(|k| de.end().map(|()| k))
        .map_err(|e| e.to_string())
}

/// Checks the kept members of a parsed revision (shared by the whole and the streamed read).
fn validate_kept(
    kept: Kept,
    package_name: &str,
    approved_permissions: &[String],
) -> Result<Contribution, Rejection> {
    match &kept.schema {
        Some(Value::String(s)) if s == REVISION_SCHEMA => {}
        Some(other) => return Err(malformed(package_name, format_args!("schema is {other}"))),
        None => return Err(malformed(package_name, "the schema member is missing")),
    }
    let Some(Value::Object(package)) = &kept.package else {
        return Err(malformed(
            package_name,
            "package is missing or not an object",
        ));
    };
    let Some(Value::String(declared_name)) = package.get("name") else {
        return Err(malformed(
            package_name,
            "package.name is missing or not a string",
        ));
    };
    let package_version = match package.get("version") {
        Some(Value::String(v)) if semver::Version::parse(v).is_ok() => v.clone(),
        _ => {
            return Err(malformed(
                package_name,
                "package.version is missing or not SemVer 2.0.0",
            ));
        }
    };
    let tools = kept.tools.unwrap_or_default();
    if let Some(i) = tools.iter().position(|(t, _)| !t.is_object()) {
        return Err(malformed(
            package_name,
            format_args!("tools[{i}] is not an object"),
        ));
    }
    if declared_name != package_name {
        return Err(Rejection::new(
            Code::PackageMismatch,
            format!(
                "package {package_name}: the revision declares package {declared_name:?}; the \
                 installation's generation points at another package's revision, fix the generation"
            ),
        ));
    }

    let mut definitions = Vec::with_capacity(tools.len());
    for (index, (tool, duplicate)) in tools.into_iter().enumerate() {
        let Value::Object(members) = tool else {
            continue;
        };
        if let Some(name) = duplicate {
            let forbidden = members.keys().find_map(|k| super::forbidden(k));
            return Err(super::unbuilt_definition(
                package_name,
                index,
                forbidden,
                Some(&quote(&name).to_string()),
            ));
        }
        definitions.push(super::validate_definition(
            members,
            package_name,
            index,
            approved_permissions,
        )?);
    }
    Ok(Contribution {
        package_version,
        definition_count: definitions.len(),
        definitions,
    })
}
