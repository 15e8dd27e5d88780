//! Materialized revision bytes → one package's contribution (contract section 5).
//!
//! Only `schema`, `package` and `tools` are parsed into memory, strictly; every other member
//! (resources, files: possibly most of 24 MiB) is skipped as it is read, so a revision's
//! footprint is its raw bytes plus its tool definitions.

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

use crate::canonical::{self, StrictValue};
use crate::identity::{self, ToolIdentity};
use crate::model::Digest;
use crate::rejection::{Rejection, RejectionCode as Code};

mod stream;

pub use stream::{RevisionStream, Streamed};

/// The `schema` a revision must declare.
pub const REVISION_SCHEMA: &str = "qinglong/materialized-revision@v1";
/// Nesting limit of a whole revision document.
pub const MAX_REVISION_DEPTH: usize = 128;
/// Nesting limit of one definition (the definition object is depth 1).
pub const MAX_DEFINITION_DEPTH: usize = 64;
/// Largest canonical definition, in bytes.
pub const MAX_DEFINITION_BYTES: u64 = 256 * 1024;

/// Top-level definition members refused as code, handlers or credentials, in byte order.
pub const FORBIDDEN_MEMBERS: [&str; 24] = [
    "args",
    "client",
    "command",
    "connectionString",
    "credential",
    "credentials",
    "database",
    "dsn",
    "endpoint",
    "entrypoint",
    "env",
    "function",
    "handler",
    "import",
    "module",
    "modulePath",
    "password",
    "secret",
    "server",
    "service",
    "token",
    "transport",
    "uri",
    "url",
];

const ANNOTATIONS: [&str; 4] = [
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
    "readOnlyHint",
];

/// One validated tool definition, with what the snapshot needs of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidatedDefinition {
    /// Its identity.
    pub identity: ToolIdentity,
    /// The canonical string of the identity.
    pub canonical_identity: String,
    /// The model-visible alias.
    pub alias: String,
    /// The SemVer version string, as declared.
    pub version: String,
    /// Digest of the definition's canonical JSON.
    pub definition_digest: Digest,
    /// Size of the definition's canonical JSON.
    pub canonical_len: u64,
    /// The canonical JSON itself; dropped once a project's bodies pass 8 MiB.
    pub body: Option<Vec<u8>>,
}

/// What one package adds to a snapshot, beyond its vector item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contribution {
    /// The package's declared version.
    pub package_version: String,
    /// Its definitions, in array order.
    pub definitions: Vec<ValidatedDefinition>,
}

/// The kept members of a revision document.
#[derive(Debug, Default)]
struct Kept {
    schema: Option<Value>,
    package: Option<Value>,
    tools: Option<Value>,
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
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let slot = match key.as_ref() {
                "schema" => &mut kept.schema,
                "package" => &mut kept.package,
                "tools" => &mut kept.tools,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if slot.is_some() {
                return Err(de::Error::custom(format_args!(
                    "duplicate member name {key:?}"
                )));
            }
            *slot = Some(map.next_value_seed(StrictValue)?);
        }
        Ok(kept)
    }
}

fn malformed(package: &str, why: impl fmt::Display) -> Rejection {
    Rejection::new(
        Code::RevisionMalformed,
        format!(
            "package {package}: the revision is not a {REVISION_SCHEMA} document: {why}; \
             rebuild and republish the package"
        ),
    )
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
    let tools = match kept.tools {
        None => Vec::new(),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(malformed(package_name, "tools is not an array")),
    };
    if let Some(i) = tools.iter().position(|t| !t.is_object()) {
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
    for (index, tool) in tools.into_iter().enumerate() {
        if let Value::Object(members) = tool {
            definitions.push(validate_definition(
                members,
                package_name,
                index,
                approved_permissions,
            )?);
        }
    }
    Ok(Contribution {
        package_version,
        definitions,
    })
}

struct Where<'a> {
    package: &'a str,
    index: usize,
    name: Option<String>,
}

impl fmt::Display for Where<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "package {}: tools[{}]", self.package, self.index)?;
        if let Some(name) = &self.name {
            write!(f, " ({name:?})")?;
        }
        Ok(())
    }
}

fn is_tool_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    s.len() <= 64
        && matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn is_permission(s: &str) -> bool {
    let mut bytes = s.bytes();
    s.len() <= 64
        && matches!(bytes.next(), Some(b) if b.is_ascii_lowercase())
        && bytes.all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b':' | b'-')
        })
}

fn validate_definition(
    members: Map<String, Value>,
    package: &str,
    index: usize,
    approved: &[String],
) -> Result<ValidatedDefinition, Rejection> {
    let at = Where {
        package,
        index,
        name: members
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned),
    };
    // 1. forbidden-field: the map iterates in byte order, so the first hit is the smallest.
    if let Some(member) = members
        .keys()
        .find(|k| FORBIDDEN_MEMBERS.contains(&k.as_str()))
    {
        return Err(Rejection::new(
            Code::ForbiddenField,
            format!(
                "{at}: member {member:?} is forbidden: tool definitions are data only (no \
                 handlers, code, endpoints or credentials); remove it and republish"
            ),
        ));
    }
    // 2. invalid-definition.
    let invalid = |member: &str, why: &str| {
        Rejection::new(
            Code::InvalidDefinition,
            format!("{at}: member {member:?} {why}; fix the definition and republish"),
        )
    };
    for required in ["inputSchema", "name", "version"] {
        if !members.contains_key(required) {
            return Err(invalid(required, "is required but missing"));
        }
    }
    for (key, value) in &members {
        if value.is_null() {
            return Err(invalid(key, "is null, which is never a valid value"));
        }
        let ok = match (key.as_str(), value) {
            ("name", Value::String(s)) => is_tool_name(s),
            ("version", Value::String(s)) => semver::Version::parse(s).is_ok(),
            ("namespace", Value::String(_)) => true,
            ("title", Value::String(s)) => s.chars().count() <= 128,
            ("description", Value::String(s)) => s.chars().count() <= 4096,
            ("inputSchema" | "outputSchema", Value::Object(_)) => true,
            ("annotations", Value::Object(a)) => a
                .iter()
                .all(|(k, v)| ANNOTATIONS.contains(&k.as_str()) && v.is_boolean()),
            ("permissions", Value::Array(items)) => {
                let mut seen = BTreeSet::new();
                items.iter().all(|p| {
                    p.as_str()
                        .is_some_and(|p| is_permission(p) && seen.insert(p))
                })
            }
            (
                "name" | "version" | "namespace" | "title" | "description" | "inputSchema"
                | "outputSchema" | "annotations" | "permissions",
                _,
            ) => false,
            (_, _) => return Err(invalid(key, "is not an allowed definition member")),
        };
        if !ok {
            let rule = match key.as_str() {
                "name" => "must be a string matching ^[A-Za-z][A-Za-z0-9_-]{0,63}$",
                "version" => "must be a SemVer 2.0.0 string",
                "namespace" => "must be a string",
                "title" => "must be a string of at most 128 characters",
                "description" => "must be a string of at most 4096 characters",
                "inputSchema" | "outputSchema" => "must be a JSON object",
                "annotations" => {
                    "may hold only readOnlyHint, destructiveHint, idempotentHint and openWorldHint, each a boolean"
                }
                _ => "must be an array of distinct strings matching ^[a-z][a-z0-9._:-]{0,63}$",
            };
            return Err(invalid(key, rule));
        }
    }
    let value = Value::Object(members);
    if canonical::depth(&value) > MAX_DEFINITION_DEPTH {
        return Err(invalid(
            "inputSchema",
            "nests the definition deeper than 64 levels",
        ));
    }
    if let Some(n) = canonical::first_unsafe_number(&value) {
        return Err(Rejection::new(
            Code::InvalidDefinition,
            format!(
                "{at}: number {n} has magnitude 2^53 or more, outside the I-JSON safe range; \
                 write it as a string or a smaller number and republish"
            ),
        ));
    }
    let mut body = Vec::with_capacity(512);
    canonical::write_value(&value, &mut body);
    let canonical_len = body.len() as u64;
    if canonical_len > MAX_DEFINITION_BYTES {
        return Err(Rejection::new(
            Code::InvalidDefinition,
            format!(
                "{at}: its canonical JSON is {canonical_len} bytes, over the 262144-byte limit; \
                 shrink the schemas and republish"
            ),
        ));
    }
    let members = &value;
    // 3. namespace-violation.
    if let Some(Value::String(ns)) = members.get("namespace")
        && ns != package
    {
        {
            return Err(Rejection::new(
                Code::NamespaceViolation,
                format!(
                    "{at}: member \"namespace\" is {ns:?} but a package may only define tools in \
                     its own namespace {package:?}; drop the member or correct it"
                ),
            ));
        }
    }
    // 4. permission-not-approved.
    if let Some(Value::Array(perms)) = members.get("permissions") {
        for p in perms.iter().filter_map(Value::as_str) {
            if !approved.iter().any(|a| a == p) {
                return Err(Rejection::new(
                    Code::PermissionNotApproved,
                    format!(
                        "{at}: member \"permissions\" asks for {p:?}, which this generation was \
                         not approved for; approve it in a new generation or remove it"
                    ),
                ));
            }
        }
    }
    let name = members
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let version = members
        .get("version")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let identity = ToolIdentity::package(package, name);
    let canonical_identity = identity
        .encode()
        .map_err(|e| invalid("name", &format!("does not form an identity ({e})")))?;
    let alias = identity::alias_of(package, name, &canonical_identity);
    Ok(ValidatedDefinition {
        identity,
        canonical_identity,
        alias,
        version: version.to_owned(),
        definition_digest: Digest::of(&body),
        canonical_len,
        body: Some(body),
    })
}
