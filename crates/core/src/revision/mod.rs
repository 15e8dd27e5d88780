//! Materialized revision bytes → one package's contribution (contract section 5).
//!
//! Of `schema`, `package` and `tools` only what the limits need is built, one definition at a
//! time ([`RevisionStream`]); every other member (resources, files: possibly most of 24 MiB)
//! is skipped as it is read, so what a revision costs besides the slice being read is bounded
//! by [`HELD_BYTES`] whatever its content.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value};

use crate::canonical;
use crate::identity::{self, ToolIdentity};
use crate::limits::{MAX_DEFINITION_BYTES, MAX_DEFINITION_DEPTH};
use crate::model::{Digest, is_permission};
use crate::quote::quote;
use crate::rejection::{Rejection, RejectionCode as Code};

/// The tests' oracle (the whole-document reader of earlier versions): built for tests and the
/// fuzz targets only (the `oracle` feature, which the test kit turns on), never in the product.
#[cfg(any(test, feature = "oracle"))]
pub mod reference;
mod stream;

pub use stream::{HELD_BYTES, KEPT_DEFINITIONS, RevisionStream, SMALL_TEXT_BYTES, Streamed};

/// The `schema` a revision must declare.
pub const REVISION_SCHEMA: &str = "qinglong/materialized-revision@v1";

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
    /// `package` source, this package as origin, the definition's `name`.
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
    /// Its valid definitions, in array order: at most [`KEPT_DEFINITIONS`] of them.
    pub definitions: Vec<ValidatedDefinition>,
    /// How many valid definitions it has, kept or not.
    pub definition_count: usize,
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

/// Parses a revision held whole and validates its definitions against the installation's
/// package name and the generation's approved permissions: the streamed reader fed one slice.
/// The first failure, in contract section 6 order, is returned.
pub fn extract(
    bytes: &[u8],
    package_name: &str,
    approved_permissions: &[String],
) -> Result<Contribution, Rejection> {
    let mut stream = RevisionStream::new(package_name, approved_permissions);
    stream.feed(bytes);
    stream.finish().extract()
}

/// The forbidden member `name` is, if it is one.
fn forbidden(name: &str) -> Option<&'static str> {
    FORBIDDEN_MEMBERS
        .binary_search(&name)
        .ok()
        .map(|i| FORBIDDEN_MEMBERS[i])
}

/// The verdict on a definition that was not built to its end: its canonical JSON is certainly
/// over the limit, or one of its objects names a member twice (`duplicate`, quoted). Either
/// makes it invalid; of the rest only the forbidden names among its own members were looked at,
/// and they rank first.
fn unbuilt_definition(
    package: &str,
    index: usize,
    forbidden: Option<&str>,
    duplicate: Option<&str>,
) -> Rejection {
    let at = Where {
        package,
        index,
        name: None,
    };
    match (forbidden, duplicate) {
        (Some(member), _) => forbidden_field(&at, member),
        (None, Some(name)) => Rejection::new(
            Code::InvalidDefinition,
            format!(
                "{at}: an object in it names member {name} twice; JSON members are never \
                 \"last one wins\" here: remove one and republish"
            ),
        ),
        (None, None) => Rejection::new(
            Code::InvalidDefinition,
            format!(
                "{at}: its canonical JSON is over the {MAX_DEFINITION_BYTES}-byte limit; shrink \
                 the schemas and republish"
            ),
        ),
    }
}

fn forbidden_field(at: &Where<'_>, member: &str) -> Rejection {
    Rejection::new(
        Code::ForbiddenField,
        format!(
            "{at}: member {} is forbidden: tool definitions are data only (no handlers, code, \
             endpoints or credentials); remove it and republish",
            quote(member)
        ),
    )
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
            write!(f, " ({})", quote(name))?;
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
        return Err(forbidden_field(&at, member));
    }
    // 2. invalid-definition.
    let invalid = |member: &str, why: &str| {
        Rejection::new(
            Code::InvalidDefinition,
            format!(
                "{at}: member {} {why}; fix the definition and republish",
                quote(member)
            ),
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
                "{at}: number {} has magnitude 2^53 or more, outside the I-JSON safe range; \
                 write it as a string or a smaller number and republish",
                quote(&n.to_string())
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
                    "{at}: member \"namespace\" is {} but a package may only define tools in \
                     its own namespace {package:?}; drop the member or correct it",
                    quote(ns)
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
