//! The planner's rejection codes, limits on both sides, precedence and golden digests.

use package_executor_testkit::inputs;

use inputs::{Pkg, code, plan, revision, tool};
use package_executor::canonical;
use package_executor::limits::MAX_SNAPSHOT_BYTES;
use serde_json::{Value, json};

fn one(tools: Value) -> String {
    code(&plan(
        "p1",
        &[Pkg::new("acme.github", &revision("acme.github", tools))],
    ))
}

fn with_member(member: &str, value: Value) -> Value {
    let mut t = tool("search");
    t[member] = value;
    json!([t])
}

#[test]
fn definition_rules_table() {
    let long = |n: usize| Value::String("x".repeat(n));
    let cases: Vec<(&str, Value, &str)> = vec![
        ("plain", json!([tool("search")]), "published"),
        ("tools null", Value::Null, "revision-malformed"),
        (
            "handler",
            with_member("handler", json!("x")),
            "forbidden-field",
        ),
        (
            "null forbidden",
            with_member("url", Value::Null),
            "forbidden-field",
        ),
        (
            "unknown member",
            with_member("extra", json!(1)),
            "invalid-definition",
        ),
        (
            "null title",
            with_member("title", Value::Null),
            "invalid-definition",
        ),
        ("title 128", with_member("title", long(128)), "published"),
        (
            "title 129",
            with_member("title", long(129)),
            "invalid-definition",
        ),
        (
            "title 128 chars multibyte",
            with_member("title", json!("é".repeat(128))),
            "published",
        ),
        (
            "description 4096",
            with_member("description", long(4096)),
            "published",
        ),
        (
            "description 4097",
            with_member("description", long(4097)),
            "invalid-definition",
        ),
        (
            "name 64",
            with_member("name", json!(format!("a{}", "b".repeat(63)))),
            "published",
        ),
        (
            "name 65",
            with_member("name", json!(format!("a{}", "b".repeat(64)))),
            "invalid-definition",
        ),
        (
            "name digit first",
            with_member("name", json!("1a")),
            "invalid-definition",
        ),
        (
            "bad version",
            with_member("version", json!("1.0")),
            "invalid-definition",
        ),
        (
            "missing inputSchema",
            json!([{"name": "a", "version": "1.0.0"}]),
            "invalid-definition",
        ),
        (
            "array inputSchema",
            with_member("inputSchema", json!([])),
            "invalid-definition",
        ),
        (
            "annotations ok",
            with_member("annotations", json!({"readOnlyHint": true})),
            "published",
        ),
        (
            "annotations other",
            with_member("annotations", json!({"other": true})),
            "invalid-definition",
        ),
        (
            "annotations string",
            with_member("annotations", json!({"readOnlyHint": "yes"})),
            "invalid-definition",
        ),
        (
            "perm pattern",
            with_member("permissions", json!(["Network"])),
            "invalid-definition",
        ),
        (
            "perm repeated",
            with_member("permissions", json!(["a", "a"])),
            "invalid-definition",
        ),
        (
            "perm not approved",
            with_member("permissions", json!(["network"])),
            "permission-not-approved",
        ),
        (
            "namespace own",
            with_member("namespace", json!("acme.github")),
            "published",
        ),
        (
            "namespace other",
            with_member("namespace", json!("other")),
            "namespace-violation",
        ),
        (
            "number 2^53-1",
            with_member("inputSchema", json!({"max": 9007199254740991u64})),
            "published",
        ),
        (
            "number 2^53",
            with_member("inputSchema", json!({"max": 9007199254740992u64})),
            "invalid-definition",
        ),
        (
            "number -2^53",
            with_member("inputSchema", json!({"min": -9007199254740992i64})),
            "invalid-definition",
        ),
        (
            "number 1e20",
            with_member("inputSchema", json!({"max": 1e20})),
            "invalid-definition",
        ),
        (
            "number 1.0e16",
            with_member("inputSchema", json!({"max": 1.0e16})),
            "invalid-definition",
        ),
        (
            "parameter called url",
            with_member("inputSchema", json!({"properties": {"url": {}}})),
            "published",
        ),
        ("tool not object", json!(["x"]), "revision-malformed"),
    ];
    for (label, tools, want) in cases {
        assert_eq!(one(tools), want, "{label}");
    }
}

#[test]
fn number_spellings_in_raw_text() {
    let text = |n: &str| {
        format!(
            r#"{{"schema":"qinglong/materialized-revision@v1","package":{{"name":"a","version":"1.0.0"}},
            "tools":[{{"name":"t","version":"1.0.0","inputSchema":{{"x":{n}}}}}],"big":1E400}}"#
        )
    };
    let run = |n: &str| code(&plan("p", &[Pkg::raw("a", text(n).into_bytes())]));
    assert_eq!(run("9007199254740991"), "published");
    assert_eq!(run("9007199254740992"), "invalid-definition");
    assert_eq!(run("9007199254740991.5"), "invalid-definition");
    assert_eq!(run("1e20"), "invalid-definition");
    assert_eq!(run("1.0e16"), "invalid-definition");
    assert_eq!(run("1E400"), "revision-malformed");
    assert_eq!(run("4.50"), "published");
}

#[test]
fn revision_document_rules() {
    let raw = |s: &str| code(&plan("p", &[Pkg::raw("a", s.as_bytes().to_vec())]));
    let ok = r#"{"schema":"qinglong/materialized-revision@v1","package":{"name":"a","version":"1.0.0"}}"#;
    assert_eq!(raw(ok), "published");
    assert_eq!(raw("not json"), "revision-malformed");
    assert_eq!(raw("[]"), "revision-malformed");
    assert_eq!(raw(&ok.replace("@v1", "@v2")), "revision-malformed");
    assert_eq!(raw(&ok.replace("1.0.0", "1.0")), "revision-malformed");
    assert_eq!(
        raw(&ok.replace(r#""name":"a""#, r#""name":"b""#)),
        "package-mismatch"
    );
    assert_eq!(
        raw(&ok.replace("}}", r#"},"tools":{}}"#)),
        "revision-malformed"
    );
    assert_eq!(
        raw(&ok.replace("}}", r#"},"schema":"x"}"#)),
        "revision-malformed"
    );
    assert_eq!(
        raw(&ok.replace("}}", r#","name":"a"}}"#)),
        "revision-malformed"
    );
    // A duplicate inside a definition makes the definition invalid (contract section 3).
    assert_eq!(
        raw(&ok.replace("}}", r#"},"tools":[{"name":"t","name":"u"}]}"#)),
        "invalid-definition"
    );
    assert_eq!(
        raw(&ok.replace("}}", r#"},"tools":[{"name":"\ud800"}]}"#)),
        "revision-malformed"
    );
    // Ignored members need only be well-formed: duplicates and huge numbers there are fine.
    assert_eq!(
        raw(&ok.replace("}}", r#"},"files":{"a":1,"a":2,"n":1E400}}"#)),
        "published"
    );
    // So are `package`'s members other than `name` and `version`; their names are read.
    assert_eq!(
        raw(&ok.replace("}}", r#","x":{"a":1,"a":"\ud800","n":1E400}}}"#)),
        "published"
    );
    assert_eq!(
        raw(&ok.replace("}}", r#","\ud800":0}}"#)),
        "revision-malformed"
    );
    assert_eq!(
        raw(&ok.replace("}}", r#"},"files":{"a":}}"#)),
        "revision-malformed"
    );
    let mut bad_utf8 = ok.as_bytes().to_vec();
    bad_utf8.splice(2..2, [0xff]);
    assert_eq!(
        code(&plan("p", &[Pkg::raw("a", bad_utf8)])),
        "revision-malformed"
    );
}

#[test]
fn depth_limits() {
    // Definition: the definition object is depth 1, inputSchema depth 2.
    let nested = |levels: usize| {
        let mut v = json!({});
        for _ in 0..levels {
            v = json!({ "p": v });
        }
        v
    };
    assert_eq!(one(with_member("inputSchema", nested(62))), "published"); // depth 64
    assert_eq!(
        one(with_member("inputSchema", nested(63))),
        "invalid-definition"
    ); // depth 65
    // Whole revision: the document is depth 1.
    let doc = |levels: usize| {
        format!(
            r#"{{"schema":"qinglong/materialized-revision@v1","package":{{"name":"a","version":"1.0.0"}},"files":{}{}}}"#,
            "[".repeat(levels),
            "]".repeat(levels)
        )
    };
    assert_eq!(
        code(&plan("p", &[Pkg::raw("a", doc(127).into_bytes())])),
        "published"
    );
    assert_eq!(
        code(&plan("p", &[Pkg::raw("a", doc(128).into_bytes())])),
        "revision-malformed"
    );
}

fn padded_tool(name: &str, pad: usize) -> Value {
    let mut t = tool(name);
    t["inputSchema"]["description"] = Value::String("x".repeat(pad));
    t
}

#[test]
fn definition_size_limit() {
    let base = canonical::to_vec(&padded_tool("t", 0)).len();
    let limit = 256 * 1024;
    assert_eq!(one(json!([padded_tool("t", limit - base)])), "published");
    assert_eq!(
        one(json!([padded_tool("t", limit - base + 1)])),
        "invalid-definition"
    );
}

#[test]
fn revision_size_limit() {
    let limit = 24 * 1024 * 1024;
    let doc = |len: usize| {
        let head = r#"{"schema":"qinglong/materialized-revision@v1","package":{"name":"a","version":"1.0.0"},"files":""#;
        let mut s = String::with_capacity(len);
        s.push_str(head);
        s.push_str(&"x".repeat(len - head.len() - 2));
        s.push_str("\"}");
        s.into_bytes()
    };
    assert_eq!(code(&plan("p", &[Pkg::raw("a", doc(limit))])), "published");
    assert_eq!(
        code(&plan("p", &[Pkg::raw("a", doc(limit + 1))])),
        "revision-too-large"
    );
}

#[test]
fn package_limit() {
    let pkgs = |n: usize| -> Vec<Pkg> {
        (0..n)
            .map(|i| {
                let name = format!("pkg{i:03}");
                Pkg::new(&name, &revision(&name, json!([])))
            })
            .collect()
    };
    assert_eq!(code(&plan("p", &pkgs(128))), "published");
    assert_eq!(code(&plan("p", &pkgs(129))), "too-many-packages");
}

#[test]
fn definition_limit() {
    let tools = |n: usize| Value::Array((0..n).map(|i| tool(&format!("t{i}"))).collect());
    assert_eq!(one(tools(128)), "published");
    assert_eq!(one(tools(129)), "too-many-definitions");
}

#[test]
fn snapshot_size_limit() {
    // 42 definitions of about 200 KiB reach 8 MiB; tune the last pad to land exactly on it.
    let build = |last_pad: usize| {
        let mut tools: Vec<Value> = (0..41)
            .map(|i| padded_tool(&format!("t{i:02}"), 200_000))
            .collect();
        tools.push(padded_tool("t99", last_pad));
        plan("p", &[Pkg::new("a", &revision("a", Value::Array(tools)))])
    };
    let size = build(100_000).expect("fits").canonical_json.len() as i64;
    let exact = (100_000 + MAX_SNAPSHOT_BYTES as i64 - size) as usize;
    let at_limit = build(exact).expect("exactly 8 MiB is allowed");
    assert_eq!(at_limit.canonical_json.len() as u64, MAX_SNAPSHOT_BYTES);
    assert_eq!(code(&build(exact + 1)), "snapshot-too-large");
    // Far over: bodies are dropped on the way, and the code is still the last one.
    let huge: Vec<Value> = (0..50)
        .map(|i| padded_tool(&format!("t{i:02}"), 200_000))
        .collect();
    assert_eq!(one(Value::Array(huge)), "snapshot-too-large");
}

#[test]
fn set_checks() {
    assert_eq!(one(json!([tool("a"), tool("a")])), "duplicate-definition");
    let mut v2 = tool("a");
    v2["version"] = json!("2.0.0");
    assert_eq!(one(json!([tool("a"), v2])), "published");
    assert_eq!(
        one(json!([tool("Search"), tool("search")])),
        "identity-case-collision"
    );
    let a = Pkg::new("a.b", &revision("a.b", json!([tool("x")])));
    let b = Pkg::new("a_b", &revision("a_b", json!([tool("x")])));
    assert_eq!(code(&plan("p", &[a.clone(), b])), "alias-collision");
    // duplicate beats case collision, which beats alias collision.
    let c = Pkg::new(
        "a_b",
        &revision("a_b", json!([tool("x"), tool("X"), tool("y"), tool("y")])),
    );
    assert_eq!(code(&plan("p", &[a.clone(), c])), "duplicate-definition");
    let d = Pkg::new(
        "a_b",
        &revision("a_b", json!([tool("x"), tool("Q"), tool("q")])),
    );
    assert_eq!(code(&plan("p", &[a, d])), "identity-case-collision");
}

#[test]
fn source_rows() {
    let good = || Pkg::new("a", &revision("a", json!([])));
    assert_eq!(code(&plan("bad project!", &[good()])), "source-invalid");
    let mut p = good();
    p.head.lock_digest = "sha256:ABC".into();
    assert_eq!(code(&plan("p", &[p])), "source-invalid");
    let mut p = good();
    p.head.generation = 0;
    assert_eq!(code(&plan("p", &[p])), "source-invalid");
    assert_eq!(
        code(&plan("p", &[good().approve(r#"["a","a"]"#)])),
        "source-invalid"
    );
    assert_eq!(
        code(&plan("p", &[good().approve(r#"{"a":1}"#)])),
        "source-invalid"
    );
    let mut p = good();
    p.byte_length = Some(3);
    assert_eq!(code(&plan("p", &[p])), "source-invalid");
    assert_eq!(code(&plan("p", &[good().missing()])), "revision-missing");
    let mut p = good();
    p.head.revision_digest = package_executor::model::Digest::of(b"other")
        .as_str()
        .into();
    let bytes = p.bytes.clone();
    p.bytes = None;
    let r = package_executor::planner::plan("p", vec![p.head.clone()], |_| {
        bytes.as_deref().map(|b| (b.len() as i64, b))
    });
    assert_eq!(code(&r), "revision-digest-mismatch");
    // 129 packages: too-many-packages wins over an invalid project id.
    let many: Vec<Pkg> = (0..129)
        .map(|i| Pkg::new(&format!("p{i}"), &revision(&format!("p{i}"), json!([]))))
        .collect();
    assert_eq!(code(&plan("bad project!", &many)), "too-many-packages");
    // A build that skips step 1 still cannot finish with a bad id: a snapshot's id is a
    // checked `ProjectId`.
    let skipped = package_executor::planner::SnapshotBuilder::new("bad project!", Vec::new());
    let refused = skipped.finish().expect_err("a bad project id is refused");
    assert_eq!(refused.code.as_str(), "source-invalid");
}

#[test]
fn precedence_is_package_major() {
    // A forbidden member in the first package beats a missing revision in the second.
    let first = Pkg::new("a", &revision("a", with_member("handler", json!("x"))));
    let second = Pkg::new("b", &revision("b", json!([]))).missing();
    let r = plan("p", &[second.clone(), first.clone()]);
    assert_eq!(code(&r), "forbidden-field");
    assert!(r.unwrap_err().detail.contains("\"handler\""));
    // An invalid first definition beats a forbidden second one.
    let mut forbidden = tool("b");
    forbidden["token"] = json!("t");
    let mut invalid = tool("a");
    invalid["extra"] = json!(1);
    let r = one(json!([invalid, forbidden]));
    assert_eq!(r, "invalid-definition");
    // Within one definition, forbidden-field beats invalid-definition; the smallest member is named.
    let mut both = tool("a");
    both["url"] = json!("u");
    both["command"] = json!("c");
    both["extra"] = json!(1);
    let r = plan(
        "p",
        &[Pkg::new(
            "acme.github",
            &revision("acme.github", json!([both])),
        )],
    );
    let rej = r.unwrap_err();
    assert_eq!(rej.code.as_str(), "forbidden-field");
    assert!(rej.detail.contains("\"command\""), "{}", rej.detail);
    assert!(rej.detail.contains("acme.github") && rej.detail.contains("tools[0]"));
    // A per-package failure in a later package beats a set check over the whole set.
    let dup = Pkg::new("a", &revision("a", json!([tool("x"), tool("x")])));
    let bad = Pkg::raw("b", b"nope".to_vec());
    assert_eq!(code(&plan("p", &[dup, bad])), "revision-malformed");
    // namespace-violation beats permission-not-approved in one definition.
    let mut t = tool("a");
    t["namespace"] = json!("zzz");
    t["permissions"] = json!(["net"]);
    assert_eq!(one(json!([t])), "namespace-violation");
}

#[test]
fn empty_project_and_golden_digests() {
    let empty = plan("demo-empty", &[]).expect("empty snapshot");
    assert_eq!(
        String::from_utf8(empty.canonical_json.clone()).unwrap(),
        format!(
            r#"{{"activeVector":[],"activeVectorDigest":"{}","definitionDigest":"{}","definitions":[],"projectId":"demo-empty","schema":"qinglong/project-tool-definition-snapshot@v1"}}"#,
            empty.active_vector_digest, empty.definition_digest
        )
    );
    let mut t = tool("search_issues");
    t["version"] = json!("1.2.0");
    t["title"] = json!("Search issues");
    t["inputSchema"] =
        json!({"type": "object", "properties": {"q": {"type": "string", "maxLength": 4.50e2}}});
    t["permissions"] = json!(["network"]);
    let pkgs = [
        Pkg::new("acme.github", &revision("acme.github", json!([t]))).approve(r#"["network"]"#),
        Pkg::new("acme.empty", &revision("acme.empty", json!([]))),
    ];
    let s = plan("demo-1", &pkgs).expect("published");
    // The document is its own RFC 8785 form, by the reference implementation.
    let reparsed: Value = serde_json::from_slice(&s.canonical_json).unwrap();
    assert_eq!(
        serde_json_canonicalizer::to_vec(&reparsed).unwrap(),
        s.canonical_json
    );
    assert_eq!(
        reparsed["definitions"][0]["definition"]["inputSchema"]["properties"]["q"]["maxLength"],
        json!(450)
    );
    assert_eq!(
        reparsed["definitions"][0]["alias"],
        json!("acme_github__search_issues")
    );
    assert_eq!(
        reparsed["activeVector"][0]["packageName"],
        json!("acme.empty")
    );
    let golden = [
        (
            "empty vector",
            empty.active_vector_digest.as_str().to_owned(),
            GOLDEN_EMPTY_VECTOR,
        ),
        (
            "empty definitions",
            empty.definition_digest.as_str().to_owned(),
            GOLDEN_EMPTY_DEFINITIONS,
        ),
        (
            "empty snapshot",
            empty.snapshot_digest.as_str().to_owned(),
            GOLDEN_EMPTY_SNAPSHOT,
        ),
        (
            "vector",
            s.active_vector_digest.as_str().to_owned(),
            GOLDEN_VECTOR,
        ),
        (
            "definitions",
            s.definition_digest.as_str().to_owned(),
            GOLDEN_DEFINITIONS,
        ),
        (
            "snapshot",
            s.snapshot_digest.as_str().to_owned(),
            GOLDEN_SNAPSHOT,
        ),
    ];
    for (what, got, want) in golden {
        assert_eq!(
            got, want,
            "golden {what} digest changed: the document shape changed"
        );
    }
}

const GOLDEN_EMPTY_VECTOR: &str =
    "sha256:2ddc1bc8da96439967f520abc9d384d5cc7bdf0eb77a95c6a083dc28ee359e55";
const GOLDEN_EMPTY_DEFINITIONS: &str =
    "sha256:02690fc2aa2635508b38420eaf60530f3067acf85cd8d8a42cbc6322efc22945";
const GOLDEN_EMPTY_SNAPSHOT: &str =
    "sha256:afe7a541f9a12dfde252a4e01dc81511f6aa6df0423720606ee3f0428ad3492d";
const GOLDEN_VECTOR: &str =
    "sha256:9252ec7ae516e811b69cdceebd0505f053babfaa0bb799667559c53789df65d0";
const GOLDEN_DEFINITIONS: &str =
    "sha256:93e47af017279ade4259facc991e0afc0eac015f3c3f42538344a18314ec94cc";
const GOLDEN_SNAPSHOT: &str =
    "sha256:40fdf5005983c65b20f17e2ca8879fba7f40326114eb990498b02fef031846c0";
