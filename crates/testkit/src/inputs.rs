//! Builders for pure-core inputs: heads, revisions and definitions.

use std::collections::BTreeMap;

use package_executor::canonical;
use package_executor::model::Digest;
use package_executor::planner::{self, ActiveHead, PlanResult};
use serde_json::{Value, json};

/// A revision document for `package` with the given tools.
pub fn revision(package: &str, tools: Value) -> Value {
    json!({"schema": "qinglong/materialized-revision@v1",
           "package": {"name": package, "version": "1.0.0"},
           "tools": tools})
}

/// A minimal valid definition.
pub fn tool(name: &str) -> Value {
    json!({"name": name, "version": "1.0.0", "inputSchema": {"type": "object"}})
}

/// One package of a project under construction.
#[derive(Clone, Debug)]
pub struct Pkg {
    pub head: ActiveHead,
    /// `None`: no revision row (revision-missing).
    pub bytes: Option<Vec<u8>>,
    /// Overrides the stored `byte_length`.
    pub byte_length: Option<i64>,
}

impl Pkg {
    /// A package whose revision is the JCS form of `doc`.
    pub fn new(name: &str, doc: &Value) -> Self {
        Self::raw(name, canonical::to_vec(doc))
    }

    /// A package whose revision is the given bytes.
    pub fn raw(name: &str, bytes: Vec<u8>) -> Self {
        let revision_digest = Digest::of(&bytes).as_str().to_owned();
        Self {
            head: ActiveHead {
                package_name: name.into(),
                installation_id: format!("inst-{name}").replace(['@', '/'], "_"),
                generation: 1,
                generation_digest: Digest::of(format!("gen {name}").as_bytes()).as_str().into(),
                lock_digest: Digest::of(b"").as_str().into(),
                revision_digest,
                approved_permissions: "[]".into(),
            },
            bytes: Some(bytes),
            byte_length: None,
        }
    }

    pub fn approve(mut self, perms: &str) -> Self {
        self.head.approved_permissions = perms.into();
        self
    }

    pub fn missing(mut self) -> Self {
        self.bytes = None;
        self
    }
}

/// Plans a project from packages.
pub fn plan(project: &str, pkgs: &[Pkg]) -> PlanResult {
    let revisions: BTreeMap<String, (i64, Vec<u8>)> = pkgs
        .iter()
        .filter_map(|p| {
            p.bytes.as_ref().map(|b| {
                (
                    p.head.revision_digest.clone(),
                    (p.byte_length.unwrap_or(b.len() as i64), b.clone()),
                )
            })
        })
        .collect();
    planner::plan(
        project,
        pkgs.iter().map(|p| p.head.clone()).collect(),
        |d| revisions.get(d).map(|(len, b)| (*len, b.as_slice())),
    )
}

/// The rejection code of a plan, or "published".
pub fn code(result: &PlanResult) -> String {
    match result {
        Ok(_) => "published".into(),
        Err(r) => r.code.as_str().into(),
    }
}
