//! Re-proving a stored snapshot from its own bytes: the three digests, canonical form, counts,
//! its source rows against its document, and the key the proof finds it by. Pure; `verify` feeds it rows.

use serde_json::Value;

use crate::canonical;
use crate::model::Digest;
use crate::planner::{self, ActiveHead};
use crate::source_key::source_key;

/// A stored snapshot with its source rows, for `verify`: as stored, unchecked (checking it is
/// this module's job).
#[derive(Clone, Debug, PartialEq, Eq)]
// Each undocumented field is the column of the same name (contract section 7).
#[allow(missing_docs)]
pub struct StoredSnapshot {
    pub snapshot_id: i64,
    pub project_id: String,
    pub snapshot_digest: String,
    pub active_vector_digest: String,
    pub definition_digest: String,
    pub package_count: i64,
    pub definition_count: i64,
    /// The stored document.
    pub canonical_json: Vec<u8>,
    /// `source_key`: what the current proof finds the snapshot by.
    pub source_key: String,
    /// Source rows (approved permissions empty: sources do not keep them).
    pub sources: Vec<ActiveHead>,
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Every problem found with one stored snapshot (empty when it verifies).
pub fn problems(s: &StoredSnapshot) -> Vec<String> {
    let mut out = Vec::new();
    let actual = Digest::of(&s.canonical_json);
    if actual.as_str() != s.snapshot_digest {
        out.push(format!(
            "snapshot_digest is {} but the stored bytes hash to {actual}",
            s.snapshot_digest
        ));
    }
    let doc = match canonical::parse_strict(&s.canonical_json, 256) {
        Ok(d) => d,
        Err(e) => {
            out.push(format!("canonical_json is not valid JSON: {e}"));
            return out;
        }
    };
    if !canonical::is_canonical_form(&doc, &s.canonical_json) {
        out.push("canonical_json is not in RFC 8785 canonical form".into());
    }
    if text(&doc, "schema") != planner::SNAPSHOT_SCHEMA {
        out.push(format!("schema is {:?}", text(&doc, "schema")));
    }
    if text(&doc, "projectId") != s.project_id {
        out.push(format!(
            "document projectId {:?} differs from the row's {:?}",
            text(&doc, "projectId"),
            s.project_id
        ));
    }
    let vector: Vec<ActiveHead> = doc
        .get("activeVector")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|i| ActiveHead {
                    package_name: text(i, "packageName"),
                    installation_id: text(i, "installationId"),
                    generation: i
                        .get("generation")
                        .and_then(Value::as_i64)
                        .unwrap_or_default(),
                    generation_digest: text(i, "generationDigest"),
                    lock_digest: text(i, "lockDigest"),
                    revision_digest: text(i, "revisionDigest"),
                    approved_permissions: String::new(),
                })
                .collect()
        })
        .unwrap_or_default();
    let vector_digest = planner::active_vector_digest(&s.project_id, &vector);
    for (what, value) in [
        (
            "document activeVectorDigest",
            text(&doc, "activeVectorDigest"),
        ),
        (
            "column active_vector_digest",
            s.active_vector_digest.clone(),
        ),
    ] {
        if value != vector_digest.as_str() {
            out.push(format!(
                "{what} is {value} but the active vector hashes to {vector_digest}"
            ));
        }
    }
    let definitions = doc.get("definitions").unwrap_or(&Value::Null);
    let definition_digest =
        planner::definition_digest(|set| canonical::write_value(definitions, set));
    for (what, value) in [
        ("document definitionDigest", text(&doc, "definitionDigest")),
        ("column definition_digest", s.definition_digest.clone()),
    ] {
        if value != definition_digest.as_str() {
            out.push(format!(
                "{what} is {value} but the definitions hash to {definition_digest}"
            ));
        }
    }
    let defs = definitions
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, d) in defs.iter().enumerate() {
        let own = canonical::digest(d.get("definition").unwrap_or(&Value::Null));
        if text(d, "definitionDigest") != own.as_str() {
            out.push(format!(
                "definitions[{i}].definitionDigest does not match its definition ({own})"
            ));
        }
    }
    if s.package_count != vector.len() as i64 || s.sources.len() != vector.len() {
        out.push(format!(
            "package_count {} / source rows {} / document packages {} disagree",
            s.package_count,
            s.sources.len(),
            vector.len()
        ));
    }
    if s.definition_count != defs.len() as i64 {
        out.push(format!(
            "definition_count {} but the document has {}",
            s.definition_count,
            defs.len()
        ));
    }
    let mut sources = s.sources.clone();
    sources.sort_by(|a, b| a.package_name.cmp(&b.package_name));
    if sources != vector {
        out.push("source rows differ from the document's active vector".into());
    }
    let key = source_key(&s.sources);
    if s.source_key != key {
        out.push(format!(
            "source_key is {:?} but its source rows' key is {key:?}: the current proof cannot \
             find it",
            s.source_key
        ));
    }
    out
}
