//! `verify`'s re-proof of a stored snapshot (`verify::problems`), one altered part at a time:
//! a snapshot the planner built has no problem, and each kind of damage is named alone.

use package_executor_testkit::inputs;

use inputs::{Pkg, plan, revision, tool};
use package_executor::canonical;
use package_executor::model::Digest;
use package_executor::store::StoredSnapshot;
use package_executor::verify::problems;
use serde_json::{Value, json};

/// What the executor would have stored for a two-package project.
fn stored() -> StoredSnapshot {
    let s = plan(
        "p1",
        &[
            Pkg::new(
                "acme.github",
                &revision("acme.github", json!([tool("search"), tool("create")])),
            ),
            Pkg::new("acme.docs", &revision("acme.docs", json!([tool("read")]))),
        ],
    )
    .unwrap();
    StoredSnapshot {
        snapshot_id: 1,
        project_id: s.project_id.to_string(),
        snapshot_digest: s.snapshot_digest.as_str().to_owned(),
        active_vector_digest: s.active_vector_digest.as_str().to_owned(),
        definition_digest: s.definition_digest.as_str().to_owned(),
        package_count: s.sources.len() as i64,
        definition_count: s.definition_count as i64,
        canonical_json: s.canonical_json,
        source_key: package_executor::source_key::source_key(&s.sources),
        // Source rows do not keep the approved permissions.
        sources: s
            .sources
            .into_iter()
            .map(|mut h| {
                h.approved_permissions.clear();
                h
            })
            .collect(),
    }
}

/// The stored document as a value.
fn document(s: &StoredSnapshot) -> Value {
    serde_json::from_slice(&s.canonical_json).unwrap()
}

/// Stores `doc` (canonical) in place of the document, with a matching snapshot digest, so that
/// only what `doc` changed is wrong.
fn restore(s: &mut StoredSnapshot, doc: &Value) {
    s.canonical_json = canonical::to_vec(doc);
    s.snapshot_digest = Digest::of(&s.canonical_json).as_str().to_owned();
}

/// The one problem found, which must contain `needle`.
fn only(s: &StoredSnapshot, needle: &str) {
    let found = problems(s);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains(needle), "{found:?}");
}

#[test]
fn a_snapshot_as_planned_has_no_problem() {
    let s = stored();
    assert_eq!(s.package_count, 2);
    assert_eq!(s.definition_count, 3);
    assert_eq!(problems(&s), Vec::<String>::new());
}

#[test]
fn each_column_is_checked_against_the_bytes() {
    let mut s = stored();
    s.snapshot_digest = Digest::of(b"other").as_str().to_owned();
    only(&s, "snapshot_digest is");

    let mut s = stored();
    s.active_vector_digest = Digest::of(b"other").as_str().to_owned();
    only(&s, "column active_vector_digest is");

    let mut s = stored();
    s.definition_digest = Digest::of(b"other").as_str().to_owned();
    only(&s, "column definition_digest is");

    let mut s = stored();
    s.package_count = 3;
    only(
        &s,
        "package_count 3 / source rows 2 / document packages 2 disagree",
    );

    let mut s = stored();
    s.definition_count = 2;
    only(&s, "definition_count 2 but the document has 3");

    let mut s = stored();
    s.source_key = "0".repeat(32);
    only(&s, "source_key is");

    let mut s = stored();
    s.project_id = "p2".into();
    let found = problems(&s);
    assert!(
        found.iter().any(|p| p.contains("document projectId")),
        "{found:?}"
    );
}

#[test]
fn source_rows_must_be_the_documents_vector() {
    let mut s = stored();
    s.sources[1].generation = 2;
    only(&s, "source rows differ from the document's active vector");

    // A source row with another revision: neither the document's nor the key's.
    let mut s = stored();
    s.sources[1].revision_digest = Digest::of(b"other").as_str().to_owned();
    let found = problems(&s);
    assert!(
        found.iter().any(|p| p.contains("source rows differ")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|p| p.contains("source_key is")),
        "{found:?}"
    );

    // Stored in any order, the rows are the same set.
    let mut s = stored();
    s.sources.reverse();
    assert_eq!(problems(&s), Vec::<String>::new());

    let mut s = stored();
    s.sources.pop();
    let found = problems(&s);
    assert!(
        found.iter().any(|p| p.contains("source rows 1")),
        "{found:?}"
    );
}

#[test]
fn the_bytes_must_be_canonical_json() {
    let mut s = stored();
    let mut spaced = s.canonical_json.clone();
    spaced.insert(1, b' ');
    s.canonical_json = spaced;
    s.snapshot_digest = Digest::of(&s.canonical_json).as_str().to_owned();
    only(&s, "not in RFC 8785 canonical form");

    let mut s = stored();
    s.canonical_json.truncate(s.canonical_json.len() - 1);
    s.snapshot_digest = Digest::of(&s.canonical_json).as_str().to_owned();
    only(&s, "canonical_json is not valid JSON");
}

#[test]
fn the_documents_own_digests_are_recomputed() {
    let mut s = stored();
    let mut doc = document(&s);
    doc["schema"] = json!("qinglong/project-tool-definition-snapshot@v2");
    restore(&mut s, &doc);
    only(&s, "schema is");

    // A head changed in the document: its vector digest no longer holds, nor do the rows.
    let mut s = stored();
    let mut doc = document(&s);
    doc["activeVector"][0]["generation"] = json!(7);
    restore(&mut s, &doc);
    let found = problems(&s);
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("document activeVectorDigest is")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|p| p.contains("source rows differ")),
        "{found:?}"
    );

    // A definition changed: its own digest and the set's no longer hold.
    let mut s = stored();
    let mut doc = document(&s);
    doc["definitions"][0]["definition"]["version"] = json!("9.9.9");
    restore(&mut s, &doc);
    let found = problems(&s);
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("definitions[0].definitionDigest does not match")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("document definitionDigest is")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("column definition_digest is")),
        "{found:?}"
    );
}
