//! The fixture file (contract section 11), read one project at a time.
//!
//! A fixture can be hundreds of megabytes. The reader never holds the document: it walks the
//! top-level object with serde, captures each element of `projects` as raw text, checks that
//! text strictly (duplicate member names, lone surrogates, depth) and hands the typed project
//! to the caller before reading the next one. Memory follows the largest project, not the
//! file.

use std::fmt;
use std::io::Read;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use serde_json::json;

use crate::canonical::{self, JsonError};
use crate::model::Digest;

/// A fixture that is not what contract section 11 describes: the message names what to fix
/// (the storage layer reports it as bad input).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FixtureError(pub String);

pub(crate) fn input(msg: impl Into<String>) -> FixtureError {
    FixtureError(msg.into())
}

/// A generation's default digest (contract section 11).
pub fn generation_digest(
    installation_id: &str,
    generation: i64,
    lock_digest: &str,
    revision_digest: &str,
    approved_permissions: &[String],
) -> Digest {
    canonical::digest(&json!({
        "schema": "qinglong/package-generation@v1",
        "installationId": installation_id,
        "generation": generation,
        "lockDigest": lock_digest,
        "revisionDigest": revision_digest,
        "approvedPermissions": approved_permissions,
    }))
}

/// `schema` of a fixture file.
pub const FIXTURE_SCHEMA: &str = "package-executor/fixture@v1";

/// How deep a fixture may nest, counted from the document (as `canonical::parse_strict` counts).
const MAX_DEPTH: usize = 256;

/// A whole fixture file, for callers that hold small fixtures in memory (tests, fuzzing).
#[derive(Debug)]
pub struct Fixture {
    /// Always [`FIXTURE_SCHEMA`].
    pub schema: String,
    /// Projects, in file order.
    pub projects: Vec<FixtureProject>,
}

/// One project of a fixture.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
// Each undocumented field is the fixture's member of the same name, in camelCase (contract
// section 11).
#[allow(missing_docs)]
pub struct FixtureProject {
    pub project_id: String,
    /// Its installations.
    #[serde(default)]
    pub packages: Vec<FixturePackage>,
}

/// One installation of a fixture.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
// Each undocumented field is the fixture's member of the same name, in camelCase (contract
// section 11).
#[allow(missing_docs)]
pub struct FixturePackage {
    pub package_name: String,
    pub installation_id: String,
    #[serde(default)]
    pub generations: Vec<FixtureGeneration>,
}

/// One generation of a fixture.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
// Each undocumented field is the fixture's member of the same name, in camelCase (contract
// section 11).
#[allow(missing_docs)]
pub struct FixtureGeneration {
    pub generation: i64,
    pub status: String,
    /// Defaults to the digest of the empty string.
    pub lock_digest: Option<String>,
    /// Defaults to `[]`, kept in the order given.
    #[serde(default)]
    pub approved_permissions: Vec<String>,
    /// Stored as its JCS bytes.
    pub revision: Option<Value>,
    /// Stored as raw UTF-8 bytes.
    pub revision_text: Option<String>,
    /// Overrides the revision key and the generation's `revision_digest`.
    pub revision_digest: Option<String>,
    /// Overrides the computed generation digest.
    pub generation_digest: Option<String>,
}

/// Parses a whole fixture held in memory (the streaming reader, collected).
pub fn parse_fixture(bytes: &[u8]) -> Result<Fixture, FixtureError> {
    let mut projects = Vec::new();
    read_fixture(bytes, |p| {
        projects.push(p);
        Ok(())
    })?;
    Ok(Fixture {
        schema: FIXTURE_SCHEMA.to_owned(),
        projects,
    })
}

/// Reads a fixture from `reader`, strictly, handing each project to `each` in file order as
/// soon as it is read; returns how many projects there were. The first error (bad JSON, a
/// project of the wrong shape, a wrong or missing schema, or an error of `each`) ends the read.
///
/// `schema` may follow `projects` in the file; it is checked when it is met, and its absence at
/// the end. Callers that write as they read must therefore treat the whole read as one unit
/// (the importer writes in one transaction).
pub fn read_fixture<R: Read, E: From<FixtureError> + fmt::Display>(
    mut reader: R,
    mut each: impl FnMut(FixtureProject) -> Result<(), E>,
) -> Result<usize, E> {
    // A byte-order mark is no JSON (RFC 8259, section 8.1), and the parser's own words for it
    // ("expected value at line 1 column 1") do not say what to fix.
    let mut head = [0u8; 3];
    let mut got = 0;
    while got < head.len() {
        match reader.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(input(format!("cannot read the fixture: {e}")).into()),
        }
    }
    if head[..got] == [0xEF, 0xBB, 0xBF] {
        return Err(input(
            "the fixture starts with a UTF-8 byte-order mark (EF BB BF), which JSON does not \
             allow; save the file as UTF-8 without a BOM",
        )
        .into());
    }
    let mut de = serde_json::Deserializer::from_reader((&head[..got]).chain(reader));
    let mut state = ReadState {
        each: &mut each,
        failed: None,
        projects: 0,
    };
    let read = (&mut state)
        .deserialize(&mut de)
        .and_then(|found| de.end().map(|()| found));
    if let Some(e) = state.failed.take() {
        return Err(e);
    }
    let found = read.map_err(|e| input(format!("the fixture is not valid JSON: {e}")))?;
    match found.schema {
        None => Err(input(format!(
            "the fixture has no schema member; expected {FIXTURE_SCHEMA:?}"
        ))
        .into()),
        Some(_) if !found.projects => {
            Err(input("the fixture has no projects member; give \"projects\": [...]").into())
        }
        Some(_) => Ok(state.projects),
    }
}

/// What the top-level object held.
struct Found {
    schema: Option<String>,
    projects: bool,
}

struct ReadState<'a, F, E> {
    each: &'a mut F,
    /// The typed error behind a serde error this reader raised itself.
    failed: Option<E>,
    projects: usize,
}

impl<F, E: fmt::Display> ReadState<'_, F, E> {
    /// Keeps `e` as the read's error and gives serde one to unwind with.
    fn fail<D: de::Error>(&mut self, e: E) -> D {
        let message = e.to_string();
        self.failed = Some(e);
        D::custom(message)
    }
}

impl<'de, F, E: From<FixtureError> + fmt::Display> DeserializeSeed<'de> for &mut ReadState<'_, F, E>
where
    F: FnMut(FixtureProject) -> Result<(), E>,
{
    type Value = Found;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, F, E: From<FixtureError> + fmt::Display> Visitor<'de> for &mut ReadState<'_, F, E>
where
    F: FnMut(FixtureProject) -> Result<(), E>,
{
    type Value = Found;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a {FIXTURE_SCHEMA} object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
        let mut found = Found {
            schema: None,
            projects: false,
        };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "schema" if found.schema.is_none() => {
                    let schema: String = map.next_value()?;
                    if schema != FIXTURE_SCHEMA {
                        return Err(self.fail(
                            input(format!(
                                "the fixture's schema is {schema:?}; expected {FIXTURE_SCHEMA:?}"
                            ))
                            .into(),
                        ));
                    }
                    found.schema = Some(schema);
                }
                "projects" if !found.projects => {
                    map.next_value_seed(Projects(&mut *self))?;
                    found.projects = true;
                }
                "schema" | "projects" => {
                    return Err(de::Error::custom(format_args!("duplicate member {key:?}")));
                }
                other => {
                    return Err(de::Error::custom(format_args!(
                        "unknown member {other:?}; a fixture has only schema and projects"
                    )));
                }
            }
        }
        Ok(found)
    }
}

/// The `projects` array, element by element.
struct Projects<'s, 'a, F, E>(&'s mut ReadState<'a, F, E>);

impl<'de, F, E: From<FixtureError> + fmt::Display> DeserializeSeed<'de> for Projects<'_, '_, F, E>
where
    F: FnMut(FixtureProject) -> Result<(), E>,
{
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, F, E: From<FixtureError> + fmt::Display> Visitor<'de> for Projects<'_, '_, F, E>
where
    F: FnMut(FixtureProject) -> Result<(), E>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of projects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let state = self.0;
        while let Some(raw) = seq.next_element::<Box<RawValue>>()? {
            let index = state.projects;
            let project = typed_project(raw.get(), index).map_err(|e| state.fail(e.into()))?;
            state.projects += 1;
            (state.each)(project).map_err(|e| state.fail(e))?;
        }
        Ok(())
    }
}

/// One project's raw text, checked strictly and typed. The project sits two levels down
/// (document, array), so its own text may nest two levels less.
fn typed_project(raw: &str, index: usize) -> Result<FixtureProject, FixtureError> {
    let value = canonical::parse_strict(raw.as_bytes(), MAX_DEPTH - 2).map_err(|e| {
        // Say the limit as the document counts it.
        let e = match e {
            JsonError::TooDeep(_) => JsonError::TooDeep(MAX_DEPTH),
            other => other,
        };
        input(format!(
            "the fixture is not valid JSON: projects[{index}]: {e}"
        ))
    })?;
    let id = value
        .get("projectId")
        .and_then(Value::as_str)
        .map(|id| format!(" ({})", crate::quote::quote(id)))
        .unwrap_or_default();
    if let Some(at) = nul_at(&value, &mut String::new()) {
        return Err(input(format!(
            "projects[{index}]{id}: {at} holds a NUL byte (U+0000), which no id, name, digest, \
             status or permission may hold; remove it from the fixture"
        )));
    }
    serde_json::from_value(value).map_err(|e| {
        input(format!(
            "the fixture does not have the {FIXTURE_SCHEMA} shape: projects[{index}]{id}: {e}"
        ))
    })
}

/// Where in a project's value a member name or string holds U+0000, as a path
/// (`packages[0].generations[1].lockDigest`); the revision's own content is left to the
/// revision's checks, which judge it as the executor reads it. SQLite's format checks read text
/// only up to a NUL, so an id with one would pass them and name no project a command can reach.
fn nul_at(value: &Value, path: &mut String) -> Option<String> {
    match value {
        Value::String(s) => s.contains('\0').then(|| path.clone()),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let found = nul_at(v, path);
            path.truncate(len);
            found
        }),
        Value::Object(members) => members.iter().find_map(|(k, v)| {
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            if !k.is_empty() && k.len() <= 64 && k.bytes().all(|b| b.is_ascii_alphanumeric()) {
                path.push_str(k);
            } else {
                path.push_str(&crate::quote::quote(k).to_string());
            }
            let found = if k.contains('\0') {
                Some(path.clone())
            } else if matches!(k.as_str(), "revision" | "revisionText") {
                None
            } else {
                nul_at(v, path)
            };
            path.truncate(len);
            found
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<String>, String> {
        let mut ids = Vec::new();
        read_fixture(text.as_bytes(), |p| {
            ids.push(p.project_id);
            Ok::<_, FixtureError>(())
        })
        .map(|_| ids)
        .map_err(|e| e.to_string())
    }

    #[test]
    fn a_byte_order_mark_is_named_as_such() {
        let e = read("\u{feff}{\"schema\":\"package-executor/fixture@v1\",\"projects\":[]}")
            .unwrap_err();
        assert!(e.contains("byte-order mark"), "{e}");
        // Short and empty inputs still get the parser's words.
        assert!(read("").unwrap_err().contains("not valid JSON"));
        assert!(!read("[]").unwrap_err().contains("byte-order mark"));
    }

    #[test]
    fn a_nul_byte_anywhere_but_the_revision_is_refused_with_where() {
        let project = |p: &str| format!(r#"{{"schema":"{FIXTURE_SCHEMA}","projects":[{p}]}}"#);
        for (text, at) in [
            (r#"{"projectId":"demo\u0000x"}"#, "projectId"),
            (
                r#"{"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[{"generation":1,"status":"active","lockDigest":"sha256:\u0000"}]}]}"#,
                "packages[0].generations[0].lockDigest",
            ),
            (
                r#"{"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[{"generation":1,"status":"active","approvedPermissions":["x","\u0000"]}]}]}"#,
                "packages[0].generations[0].approvedPermissions[1]",
            ),
        ] {
            let e = read(&project(text)).unwrap_err();
            assert!(e.contains(&format!("{at} holds a NUL byte")), "{e}");
        }
        // The revision is the executor's to judge: a NUL in its strings is JSON like any other.
        let fine = r#"{"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[{"generation":1,"status":"active","revision":{"x":"\u0000"}}]}]}"#;
        assert_eq!(read(&project(fine)).unwrap(), ["p"]);
    }

    #[test]
    fn projects_arrive_in_order_and_schema_may_come_last() {
        let ok = r#"{"projects":[{"projectId":"a"},{"projectId":"b"}],"schema":"package-executor/fixture@v1"}"#;
        assert_eq!(read(ok).unwrap(), ["a", "b"]);
    }

    #[test]
    fn every_departure_from_the_shape_is_refused_with_where() {
        let cases = [
            (r#"{"schema":"nope","projects":[]}"#, "schema is \"nope\""),
            (r#"{"projects":[]}"#, "no schema member"),
            (
                r#"{"schema":"package-executor/fixture@v1"}"#,
                "no projects member",
            ),
            (
                r#"{"schema":"package-executor/fixture@v1","schema":"package-executor/fixture@v1","projects":[]}"#,
                "duplicate member",
            ),
            (
                r#"{"schema":"package-executor/fixture@v1","projects":[],"extra":1}"#,
                "unknown member",
            ),
            (
                r#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"a","projectId":"b"}]}"#,
                "projects[0]",
            ),
            (
                r#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"a"},{"projectId":"b","x":1}]}"#,
                "projects[1] (\"b\")",
            ),
            (
                r#"{"schema":"package-executor/fixture@v1","projects":[]} trailing"#,
                "not valid JSON",
            ),
        ];
        for (text, want) in cases {
            let err = read(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn depth_counts_from_the_document() {
        let nest = |n: usize| {
            format!(
                r#"{{"schema":"package-executor/fixture@v1","projects":[{{"projectId":"a","packages":[{{"packageName":"p","installationId":"i","generations":[{{"generation":1,"status":"active","revision":{}1{}}}]}}]}}]}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        // Document, projects, project, packages, package, generations, generation: 7 levels
        // before the revision's own arrays.
        assert!(read(&nest(MAX_DEPTH - 7)).is_ok());
        let err = read(&nest(MAX_DEPTH - 6)).unwrap_err();
        assert!(err.contains("nested deeper than 256 levels"), "{err}");
    }

    /// A caller's own error type, as the storage layer's is.
    #[derive(Debug)]
    enum Caller {
        Stop,
        Fixture,
    }

    impl From<FixtureError> for Caller {
        fn from(_: FixtureError) -> Self {
            Self::Fixture
        }
    }

    impl fmt::Display for Caller {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{self:?}")
        }
    }

    #[test]
    fn an_error_of_the_caller_ends_the_read_and_is_returned_as_is() {
        let text = r#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"a"},{"projectId":"b"}]}"#;
        let mut seen = 0;
        let err = read_fixture(text.as_bytes(), |_| {
            seen += 1;
            Err(Caller::Stop)
        })
        .unwrap_err();
        assert_eq!(seen, 1);
        assert!(matches!(err, Caller::Stop), "{err:?}");
    }
}
