//! Fixture files for run-level tests and benchmarks.

use serde_json::{Value, json};

fn revision(package: &str, version: &str, tools: Vec<Value>, pad: usize) -> Value {
    json!({"schema": "qinglong/materialized-revision@v1",
           "package": {"name": package, "version": version},
           "tools": tools,
           "files": {"README.md": "x".repeat(pad)}})
}

fn tool(name: &str) -> Value {
    json!({"name": name, "version": "1.0.0", "description": format!("Tool {name}."),
           "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}})
}

/// `n` projects (`p00000`…) with `packages` packages of `tools` tools each; revisions padded to
/// about `pad` bytes; every package has a staged generation 2 ready for activation.
pub fn many_projects(n: usize, packages: usize, tools: usize, pad: usize) -> Vec<u8> {
    many_generations(n, packages, 2, tools, pad)
}

/// As [`many_projects`], with `generations` generations per package (the first active, the
/// rest staged): `generations ^ packages` vectors per project, so that a control plane that
/// keeps activating keeps making snapshots never built before.
pub fn many_generations(
    n: usize,
    packages: usize,
    generations: u32,
    tools: usize,
    pad: usize,
) -> Vec<u8> {
    let projects: Vec<Value> = (0..n)
        .map(|p| {
            let pkgs: Vec<Value> = (0..packages)
                .map(|k| {
                    let name = format!("pkg{k}.tools");
                    let generation = |g: u32, status: &str| {
                        let ts = (0..tools).map(|t| tool(&format!("t{t}_g{g}"))).collect();
                        json!({"generation": g, "status": status,
                               "revision": revision(&name, &format!("1.{g}.0"), ts, pad)})
                    };
                    json!({"packageName": name, "installationId": format!("p{p:05}-k{k}"),
                           "generations": (1..=generations)
                               .map(|g| generation(g, if g == 1 { "active" } else { "staged" }))
                               .collect::<Vec<_>>()})
                })
                .collect();
            json!({"projectId": format!("p{p:05}"), "packages": pkgs})
        })
        .collect();
    serde_json::to_vec(&json!({"schema": "package-executor/fixture@v1", "projects": projects}))
        .unwrap()
}

fn project(id: &str, mut packages: Vec<Value>) -> Value {
    for p in &mut packages {
        let inst = format!("{id}-{}", p["installationId"].as_str().unwrap_or_default());
        p["installationId"] = Value::String(inst);
    }
    json!({"projectId": id, "packages": packages})
}

fn package(name: &str, generation: Value) -> Value {
    json!({"packageName": name, "installationId": format!("inst-{}", name.replace(['@', '/'], "_")), "generations": [generation]})
}

fn active(rev: Value) -> Value {
    json!({"generation": 1, "status": "active", "revision": rev})
}

/// One project per rejection code that a fixture can express, named `r-<code>`, plus healthy
/// projects `ok-*`. (`source-invalid` needs rows that bypass the constraints; see the tests.)
pub fn every_rejection() -> Vec<u8> {
    let big = |name: &str| {
        let mut t = tool(name);
        t["inputSchema"]["description"] = Value::String("x".repeat(200_000));
        t
    };
    let mut projects = vec![
        project("ok-empty", vec![]),
        project(
            "ok-tools",
            vec![package(
                "good.pkg",
                active(revision(
                    "good.pkg",
                    "1.0.0",
                    vec![tool("a"), tool("b")],
                    10,
                )),
            )],
        ),
        project(
            "ok-notools",
            vec![package(
                "quiet.pkg",
                active(revision("quiet.pkg", "1.0.0", vec![], 10)),
            )],
        ),
        project(
            "r-too-many-packages",
            (0..129)
                .map(|i| {
                    package(
                        &format!("p{i:03}"),
                        active(revision(&format!("p{i:03}"), "1.0.0", vec![], 0)),
                    )
                })
                .collect(),
        ),
        project(
            "r-revision-missing",
            vec![package(
                "a.pkg",
                json!({"generation": 1, "status": "active",
            "revisionDigest": "sha256:1111111111111111111111111111111111111111111111111111111111111111"}),
            )],
        ),
        project(
            "r-revision-too-large",
            vec![package(
                "a.pkg",
                json!({"generation": 1, "status": "active",
            "revisionText": format!("{{\"pad\":\"{}\"}}", "x".repeat(24 * 1024 * 1024))}),
            )],
        ),
        project(
            "r-revision-digest-mismatch",
            vec![package(
                "a.pkg",
                json!({"generation": 1, "status": "active",
            "revision": revision("a.pkg", "1.0.0", vec![], 0),
            "revisionDigest": "sha256:2222222222222222222222222222222222222222222222222222222222222222"}),
            )],
        ),
        project(
            "r-revision-malformed",
            vec![package(
                "a.pkg",
                json!({"generation": 1, "status": "active", "revisionText": "{\"schema\": 1"}),
            )],
        ),
        project(
            "r-package-mismatch",
            vec![package(
                "a.pkg",
                active(revision("other.pkg", "1.0.0", vec![], 0)),
            )],
        ),
        project(
            "r-too-many-definitions",
            vec![package(
                "a.pkg",
                active(revision(
                    "a.pkg",
                    "1.0.0",
                    (0..129).map(|i| tool(&format!("t{i}"))).collect(),
                    0,
                )),
            )],
        ),
        project(
            "r-duplicate-definition",
            vec![package(
                "a.pkg",
                active(revision("a.pkg", "1.0.0", vec![tool("x"), tool("x")], 0)),
            )],
        ),
        project(
            "r-identity-case-collision",
            vec![package(
                "a.pkg",
                active(revision("a.pkg", "1.0.0", vec![tool("X"), tool("x")], 0)),
            )],
        ),
        project(
            "r-alias-collision",
            vec![
                package("a.b", active(revision("a.b", "1.0.0", vec![tool("x")], 0))),
                package("a_b", active(revision("a_b", "1.0.0", vec![tool("x")], 0))),
            ],
        ),
        project(
            "r-snapshot-too-large",
            vec![package(
                "a.pkg",
                active(revision(
                    "a.pkg",
                    "1.0.0",
                    (0..42).map(|i| big(&format!("t{i}"))).collect(),
                    0,
                )),
            )],
        ),
    ];
    let with_member = |code: &str, member: &str, value: Value, approved: Vec<&str>| {
        let mut t = tool("t");
        t[member] = value;
        project(
            &format!("r-{code}"),
            vec![package(
                "a.pkg",
                json!({"generation": 1, "status": "active",
            "approvedPermissions": approved, "revision": revision("a.pkg", "1.0.0", vec![t], 0)}),
            )],
        )
    };
    projects.push(with_member(
        "forbidden-field",
        "credentials",
        json!("s3cr3t"),
        vec![],
    ));
    projects.push(with_member("invalid-definition", "title", json!(7), vec![]));
    projects.push(with_member(
        "namespace-violation",
        "namespace",
        json!("b.pkg"),
        vec![],
    ));
    projects.push(with_member(
        "permission-not-approved",
        "permissions",
        json!(["network"]),
        vec!["files"],
    ));
    serde_json::to_vec(&json!({"schema": "package-executor/fixture@v1", "projects": projects}))
        .unwrap()
}
