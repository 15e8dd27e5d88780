//! The documentation agrees with the code: the reason-code, unresolved-code and exit-code tables
//! of `docs/contract.md`, its JSON shapes (against what the binary prints), its worked example
//! (recomputed, and rebuilt from its fixture), and a repository that stands alone (nothing refers
//! to a sibling checkout). `ARCHITECTURE.md` has a module of its own (`architecture.rs`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use package_executor::canonical;
use package_executor::exit::Exit;
use package_executor::model::GenerationStatus;
use package_executor::rejection::RejectionCode;
use package_executor::report::Unresolved;
use package_executor_testkit::db;
use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn contract() -> String {
    read("docs/contract.md")
}

/// The text after `<!-- marker -->`, up to the next blank line that follows content.
fn block_after<'a>(doc: &'a str, marker: &str) -> &'a str {
    let tag = format!("<!-- {marker} -->\n");
    let start = doc
        .find(&tag)
        .unwrap_or_else(|| panic!("marker {tag:?} missing"))
        + tag.len();
    let rest = &doc[start..];
    let end = rest.find("\n\n").unwrap_or(rest.len());
    &rest[..end]
}

/// The first column of a Markdown table (header and rule rows skipped), backticks removed.
fn first_column(table: &str) -> Vec<String> {
    table
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.split('|')
                .nth(1)
                .unwrap()
                .trim()
                .trim_matches('`')
                .to_owned()
        })
        .collect()
}

/// The JSON inside the fenced block after a marker.
fn json_after(doc: &str, marker: &str) -> String {
    let block = block_after(doc, marker);
    let body = block
        .strip_prefix("```json\n")
        .and_then(|b| b.strip_suffix("\n```"))
        .unwrap_or_else(|| panic!("{marker}: not a fenced JSON block: {block}"));
    body.to_owned()
}

/// Top-level member names of a documented JSON shape, in order (placeholders like `…` in
/// values are allowed, so this reads names only).
fn documented_keys(shape: &str) -> Vec<String> {
    let bytes = shape.as_bytes();
    let mut keys = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth -= 1,
            b'"' => {
                let start = i + 1;
                i = start;
                while bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                let after = shape[i + 1..].trim_start();
                if depth == 1 && after.starts_with(':') {
                    keys.push(shape[start..i].to_owned());
                }
            }
            _ => {}
        }
        i += 1;
    }
    keys
}

/// Member names of a printed JSON line, in the order printed.
fn printed_keys(o: &Output) -> Vec<String> {
    documented_keys(&String::from_utf8_lossy(&o.stdout))
}

fn exe(db: &Path, args: &[&str]) -> Output {
    db::exe_blocking(&format!("sqlite://{}", db.display()), "5s")
        .args(args)
        .env(
            "PACKAGE_EXECUTOR_SUMMARY_FILE",
            db.with_extension("summary"),
        )
        .output()
        .unwrap()
}

fn ok_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)))
}

/// A migrated SQLite file with `fixture` imported.
fn database(fixture: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("docs.db");
    for args in [vec!["migrate"], vec!["sources", "import", fixture]] {
        let o = exe(&db, &args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    (dir, db)
}

#[test]
fn reason_code_table_lists_every_code_in_precedence_order() {
    let doc = contract();
    let documented = first_column(block_after(&doc, "reason-codes"));
    let code: Vec<String> = RejectionCode::ALL
        .iter()
        .map(|c| c.as_str().to_owned())
        .collect();
    assert_eq!(documented, code);
}

#[test]
fn unresolved_code_table_matches_the_code() {
    let doc = contract();
    let documented = first_column(block_after(&doc, "unresolved-codes"));
    let code: Vec<String> = Unresolved::ALL
        .iter()
        .map(|u| u.as_str().to_owned())
        .collect();
    assert_eq!(documented, code);
}

#[test]
fn exit_code_table_matches_the_code() {
    let doc = contract();
    let documented: Vec<i32> = first_column(block_after(&doc, "exit-codes"))
        .iter()
        .map(|c| c.parse().unwrap())
        .collect();
    assert_eq!(documented, Exit::ALL.map(Exit::code));
}

#[test]
fn json_shapes_match_what_the_binary_prints() {
    let doc = contract();
    let demo = root().join("examples/demo-fixture.json");
    let (_dir, db) = database(demo.to_str().unwrap());

    let run = exe(&db, &["run", "--json"]);
    let summary = ok_json(&run);
    assert_eq!(
        documented_keys(&json_after(&doc, "json:run-summary")),
        printed_keys(&run)
    );
    let documented: Value = serde_json::from_str(&json_after(&doc, "json:run-summary")).unwrap();
    assert_eq!(documented["schema"], summary["schema"]);
    assert_eq!(documented["shard"].as_object().unwrap().len(), 2);
    assert!(summary["shard"]["index"].is_u64() && summary["shard"]["count"].is_u64());

    let current = exe(&db, &["current", "demo-1", "--json"]);
    let held = ok_json(&current)["snapshotDigest"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        documented_keys(&json_after(&doc, "json:current")),
        printed_keys(&current)
    );
    let unchanged = exe(
        &db,
        &["current", "demo-1", "--json", "--known-digest", &held],
    );
    ok_json(&unchanged);
    assert_eq!(
        documented_keys(&json_after(&doc, "json:current-unchanged")),
        printed_keys(&unchanged)
    );

    // Every member publish prints is documented, in the documented order; a rejection and a
    // replay between them print every one.
    let shape = documented_keys(&json_after(&doc, "json:publish"));
    let rejected_out = exe(&db, &["publish", "demo-rejected", "--json"]);
    let rejected = ok_json(&rejected_out);
    let current = exe(&db, &["publish", "demo-1", "--json"]);
    ok_json(&current);
    let mut printed = printed_keys(&rejected_out);
    for k in printed_keys(&current) {
        if !printed.contains(&k) {
            printed.push(k);
        }
    }
    assert!(
        printed.iter().all(|k| shape.contains(k)),
        "{printed:?} vs {shape:?}"
    );
    // Printed in the documented order.
    let order: Vec<usize> = printed_keys(&rejected_out)
        .iter()
        .map(|k| shape.iter().position(|s| s == k).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    assert_eq!(rejected["outcome"], "rejected");

    let verify = exe(&db, &["verify", "--json"]);
    let report = ok_json(&verify);
    assert_eq!(
        documented_keys(&json_after(&doc, "json:verify")),
        printed_keys(&verify)
    );
    let documented: Value = serde_json::from_str(&json_after(&doc, "json:verify")).unwrap();
    assert_eq!(documented["schema"], report["schema"]);
    assert_eq!(report["problems"], json!([]));
    let raw = json_after(&doc, "json:verify");
    let problem = &raw[raw.find("[{").unwrap() + 1..=raw.rfind("}]").unwrap()];
    assert_eq!(
        documented_keys(problem),
        ["projectId", "snapshotDigest", "problem"]
    );
}

#[test]
fn metrics_table_names_what_the_executor_emits() {
    let doc = contract();
    let documented = first_column(block_after(&doc, "metrics"));
    assert_eq!(documented, package_executor::metrics::NAMES);
}

#[test]
fn worked_example_digests_recompute_and_rebuild_from_its_fixture() {
    let doc = contract();
    let text = json_after(&doc, "worked-example:snapshot");
    let snapshot: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        canonical::to_vec(&snapshot),
        text.as_bytes(),
        "the documented snapshot is canonical"
    );
    let table = block_after(&doc, "worked-example:digests");
    let digests: Vec<String> = table
        .lines()
        .skip(2)
        .map(|l| {
            l.split('|')
                .nth(2)
                .unwrap()
                .trim()
                .trim_matches('`')
                .to_owned()
        })
        .collect();
    let recomputed = [
        canonical::digest(&snapshot).to_string(),
        canonical::digest(&json!({
            "schema": "qinglong/active-vector@v1",
            "projectId": snapshot["projectId"],
            "packages": snapshot["activeVector"],
        }))
        .to_string(),
        canonical::digest(&json!({
            "schema": "qinglong/tool-definitions@v1",
            "definitions": snapshot["definitions"],
        }))
        .to_string(),
        canonical::digest(&snapshot["definitions"][0]["definition"]).to_string(),
    ];
    assert_eq!(digests, recomputed);
    assert_eq!(snapshot["activeVectorDigest"], recomputed[1]);
    assert_eq!(snapshot["definitionDigest"], recomputed[2]);
    assert_eq!(
        snapshot["definitions"][0]["definitionDigest"],
        recomputed[3]
    );

    // The executor builds exactly this document from the example fixture.
    let fixture = root().join("docs/examples/worked-example.json");
    let (_dir, db) = database(fixture.to_str().unwrap());
    let o = exe(&db, &["run"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let current = ok_json(&exe(&db, &["current", "example-1", "--json"]));
    assert_eq!(current["snapshot"], snapshot);
    assert_eq!(current["snapshotDigest"], recomputed[0]);
}

#[test]
fn nothing_refers_to_a_sibling_checkout() {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success());
    let needle = ["..", "/shared"].concat();
    let mut offenders = Vec::new();
    for file in out.stdout.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let rel = String::from_utf8_lossy(file).into_owned();
        if let Ok(text) = std::fs::read_to_string(root().join(&rel))
            && text.contains(&needle)
        {
            offenders.push(rel);
        }
    }
    assert!(
        offenders.is_empty(),
        "these refer to {needle}: {offenders:?}"
    );
}

/// The generation statuses the code knows are the ones the contract lists and both dialects'
/// `CHECK` admits, in the same order.
#[test]
fn generation_statuses_match_the_contract_and_the_schemas() {
    let words: Vec<String> = GenerationStatus::ALL
        .iter()
        .map(|s| format!("'{s}'"))
        .collect();
    let contract: String = contract().split_whitespace().collect();
    assert!(
        contract.contains(&format!("CHECK(statusIN({}))", words.join(","))),
        "docs/contract.md's package_generations CHECK differs from {words:?}"
    );
    for dialect in ["postgres", "sqlite"] {
        let schema = read(&format!(
            "crates/store/migrations/{dialect}/0001_source_tables.sql"
        ));
        assert!(
            schema.contains(&format!("CHECK (status IN ({}))", words.join(", "))),
            "{dialect}'s schema differs from {words:?}"
        );
    }
}
