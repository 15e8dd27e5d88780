//! A fixture's projects as the rows of the source tables (contract section 11): digests
//! computed, defaults filled in, and the fixture's own rules checked (one active generation a
//! package; a row given twice must be the same row). Pure: the storage layer compares these
//! rows with what is stored and inserts the rest.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use crate::canonical;
use crate::fixture::{FixtureError, FixtureProject, generation_digest, input};
use crate::model::{
    Digest, GenerationStatus, MAX_APPROVED_PERMISSIONS, approved_permissions_problem,
};
use crate::quote::{quote, shown};

/// One project's rows, with digests computed and the fixture's own rules checked.
#[derive(Debug)]
// The undocumented fields are the project's rows of the table of that name.
#[allow(missing_docs)]
pub struct ProjectRows {
    /// As the fixture gives it: the database's `CHECK` judges it.
    pub project_id: String,
    pub installations: Vec<InstallationRow>,
    /// The revisions its generations pin, where the fixture gives their bytes.
    pub revisions: Vec<RevisionRow>,
    pub generations: Vec<GenerationRow>,
}

/// A row of `package_installations`.
#[derive(Debug, PartialEq, Eq)]
// Each undocumented field is the column of the same name (contract section 7).
#[allow(missing_docs)]
pub struct InstallationRow {
    /// Where it came from, for messages: `project P package N`.
    pub at: String,
    pub installation_id: String,
    pub project_id: String,
    pub package_name: String,
    /// The head of an installation this import creates.
    pub active: Option<i64>,
}

/// A row of `materialized_revisions`.
#[derive(Debug)]
pub struct RevisionRow {
    /// Where it came from, for messages.
    pub at: String,
    /// `revision_digest`, the row's key.
    pub key: String,
    /// The digest of `bytes` (the key, unless the fixture overrides it).
    pub content_digest: String,
    /// `content`.
    pub bytes: Vec<u8>,
}

/// A row of `package_generations`.
#[derive(Debug)]
// Each undocumented field is the column of the same name (contract section 7).
#[allow(missing_docs)]
pub struct GenerationRow {
    /// Where it came from, for messages.
    pub at: String,
    pub installation_id: String,
    pub generation: i64,
    pub status: GenerationStatus,
    pub generation_digest: String,
    pub lock_digest: String,
    pub revision_digest: String,
    /// `approved_permissions`, as JSON text.
    pub approved_permissions: String,
}

impl GenerationRow {
    /// The columns that never change (status moves with activation and is not compared).
    pub fn immutable(&self) -> (&str, &str, &str, &str) {
        (
            &self.generation_digest,
            &self.lock_digest,
            &self.revision_digest,
            &self.approved_permissions,
        )
    }
}

impl ProjectRows {
    /// How many rows, the project's own included.
    pub fn rows(&self) -> usize {
        1 + self.installations.len() + self.revisions.len() + self.generations.len()
    }

    /// The revision bytes it carries.
    pub fn revision_bytes(&self) -> usize {
        self.revisions.iter().map(|r| r.bytes.len()).sum()
    }
}

/// A project's rows.
pub fn rows_of(p: FixtureProject) -> Result<ProjectRows, FixtureError> {
    let mut out = ProjectRows {
        project_id: p.project_id,
        installations: Vec::new(),
        revisions: Vec::new(),
        generations: Vec::new(),
    };
    let empty = Digest::of(b"");
    for pkg in p.packages {
        let at = format!(
            "project {} package {}",
            shown(&out.project_id),
            shown(&pkg.package_name)
        );
        let mut active = None;
        for g in pkg.generations {
            let at = format!("{at} generation {}", g.generation);
            let bytes = match (g.revision, g.revision_text) {
                (Some(_), Some(_)) => {
                    return Err(input(format!(
                        "{at}: give revision or revisionText, not both"
                    )));
                }
                (Some(v), None) => Some(canonical::to_vec(&v)),
                (None, Some(t)) => Some(t.into_bytes()),
                (None, None) => None,
            };
            let content_digest = bytes.as_deref().map(Digest::of);
            let revision_digest = match (g.revision_digest, &content_digest) {
                (Some(d), _) => d,
                (None, Some(d)) => d.as_str().to_owned(),
                (None, None) => {
                    return Err(input(format!(
                        "{at}: without revision or revisionText, revisionDigest is required"
                    )));
                }
            };
            if let (Some(bytes), Some(content_digest)) = (bytes, content_digest) {
                out.revisions.push(RevisionRow {
                    at: at.clone(),
                    key: revision_digest.clone(),
                    content_digest: content_digest.as_str().to_owned(),
                    bytes,
                });
            }
            let lock_digest = g.lock_digest.unwrap_or_else(|| empty.as_str().to_owned());
            let generation_digest = g.generation_digest.unwrap_or_else(|| {
                generation_digest(
                    &pkg.installation_id,
                    g.generation,
                    &lock_digest,
                    &revision_digest,
                    &g.approved_permissions,
                )
                .as_str()
                .to_owned()
            });
            let mut seen = std::collections::BTreeSet::new();
            let twice = g
                .approved_permissions
                .iter()
                .position(|p| !seen.insert(p.as_str()))
                .map(|i| format!("approved permission [{i}] is given twice"));
            if let Some(problem) = approved_permissions_problem(&g.approved_permissions).or(twice) {
                return Err(input(format!(
                    "{at}: approvedPermissions: {problem}; a generation may approve at most \
                     {MAX_APPROVED_PERMISSIONS} distinct permissions, each one a definition \
                     could name: fix the fixture"
                )));
            }
            let Some(status) = GenerationStatus::parse(&g.status) else {
                let known: Vec<&str> = GenerationStatus::ALL.iter().map(|s| s.as_str()).collect();
                return Err(input(format!(
                    "{at}: status {} is not a generation status; use one of {}",
                    quote(&g.status),
                    known.join(", ")
                )));
            };
            if status == GenerationStatus::Active {
                if active.is_some() {
                    return Err(input(format!(
                        "{at}: more than one generation is active; at most one may be"
                    )));
                }
                active = Some(g.generation);
            }
            out.generations.push(GenerationRow {
                at,
                installation_id: pkg.installation_id.clone(),
                generation: g.generation,
                status,
                generation_digest,
                lock_digest,
                revision_digest,
                // Serializing strings cannot fail.
                approved_permissions: serde_json::to_string(&g.approved_permissions)
                    .unwrap_or_else(|_| "[]".into()),
            });
        }
        out.installations.push(InstallationRow {
            at,
            installation_id: pkg.installation_id,
            project_id: out.project_id.clone(),
            package_name: pkg.package_name,
            active,
        });
    }
    Ok(out)
}

/// Each row once, by `key`, in order of first appearance; a second row with the same key must
/// pass `same` against the first (the conflict check used against stored rows, too).
fn unique_by<'a, R: 'a, K: std::hash::Hash + Eq>(
    rows: impl Iterator<Item = &'a R>,
    key: impl Fn(&'a R) -> K,
    same: impl Fn(&R, &R) -> Result<(), FixtureError>,
) -> Result<Vec<&'a R>, FixtureError> {
    let mut seen: HashMap<K, &R> = HashMap::new();
    let mut out = Vec::new();
    for row in rows {
        match seen.entry(key(row)) {
            Entry::Vacant(v) => {
                v.insert(row);
                out.push(row);
            }
            Entry::Occupied(o) => same(row, o.get())?,
        }
    }
    Ok(out)
}

/// The batch's installations, each once; the same id twice must describe the same row.
pub fn unique_installations(
    projects: &[ProjectRows],
) -> Result<Vec<&InstallationRow>, FixtureError> {
    unique_by(
        projects.iter().flat_map(|p| &p.installations),
        |r| r.installation_id.as_str(),
        |r, first| installation_conflict(r, &first.project_id, &first.package_name),
    )
}

/// Whether `row` may stand where an installation of `project`'s `package` is (stored or earlier).
pub fn installation_conflict(
    row: &InstallationRow,
    project: &str,
    package: &str,
) -> Result<(), FixtureError> {
    if row.project_id == project && row.package_name == package {
        return Ok(());
    }
    Err(input(format!(
        "{}: installation {} already exists for project {} package {}; installation ids are \
         immutable, pick another id",
        row.at,
        shown(&row.installation_id),
        shown(project),
        shown(package)
    )))
}

/// The batch's revisions, each once; the same key twice must carry the same bytes.
pub fn unique_revisions(projects: &[ProjectRows]) -> Result<Vec<&RevisionRow>, FixtureError> {
    unique_by(
        projects.iter().flat_map(|p| &p.revisions),
        |r| r.key.as_str(),
        |r, first| revision_conflict(r, &first.content_digest),
    )
}

/// Whether `row` may stand where a revision with this content digest is.
pub fn revision_conflict(row: &RevisionRow, stored_content: &str) -> Result<(), FixtureError> {
    if row.content_digest == stored_content {
        return Ok(());
    }
    Err(input(format!(
        "{}: revision {} is already stored with other bytes; revisions are immutable",
        row.at,
        shown(&row.key)
    )))
}

/// The batch's generations, each once; the same key twice must be the same generation.
pub fn unique_generations(projects: &[ProjectRows]) -> Result<Vec<&GenerationRow>, FixtureError> {
    unique_by(
        projects.iter().flat_map(|p| &p.generations),
        |r| (r.installation_id.as_str(), r.generation),
        |r, first| generation_conflict(r, first.immutable()),
    )
}

/// Whether `row` may stand where a generation with these immutable columns is.
pub fn generation_conflict(
    row: &GenerationRow,
    stored: (&str, &str, &str, &str),
) -> Result<(), FixtureError> {
    if row.immutable() == stored {
        return Ok(());
    }
    Err(input(format!(
        "{}: already stored with other digests or permissions; generations are immutable, \
         add a new generation instead",
        row.at
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::parse_fixture;

    fn rows(text: &str) -> Result<Vec<ProjectRows>, FixtureError> {
        parse_fixture(text.as_bytes())?
            .projects
            .into_iter()
            .map(rows_of)
            .collect()
    }

    #[test]
    fn the_fixtures_own_rules_are_checked_before_anything_is_written() {
        let two_active = r#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[
            {"generation":1,"status":"active","revisionText":"x"},{"generation":2,"status":"active","revisionText":"y"}]}]}]}"#;
        let err = rows(two_active).unwrap_err().to_string();
        assert!(
            err.contains("project p package a generation 2: more than one generation is active"),
            "{err}"
        );
        let no_digest = r#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[
            {"generation":1,"status":"active"}]}]}]}"#;
        assert!(
            rows(no_digest)
                .unwrap_err()
                .to_string()
                .contains("revisionDigest is required")
        );
        let both = r#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[
            {"generation":1,"status":"active","revision":{},"revisionText":"{}"}]}]}]}"#;
        assert!(rows(both).unwrap_err().to_string().contains("not both"));
        let unknown = r#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[
            {"generation":1,"status":"live","revisionText":"x"}]}]}]}"#;
        let err = rows(unknown).unwrap_err().to_string();
        assert!(
            err.contains("project p package a generation 1: status \"live\" is not a generation status; use one of queued, staged, activating, active, superseded, failed"),
            "{err}"
        );
    }

    /// Approved permissions past the contract's limits (section 5) are refused with the
    /// generation named, before anything is written.
    #[test]
    fn approved_permissions_past_the_limits_are_refused_naming_the_generation() {
        let with = |perms: &[String]| {
            format!(
                r#"{{"schema":"package-executor/fixture@v1","projects":[{{"projectId":"p","packages":[{{"packageName":"a","installationId":"i","generations":[
                {{"generation":1,"status":"superseded","revisionText":"x"}},
                {{"generation":7,"status":"active","revisionText":"x","approvedPermissions":{}}}]}}]}}]}}"#,
                serde_json::to_string(perms).unwrap()
            )
        };
        let at = "project p package a generation 7: approvedPermissions:";
        let many: Vec<String> = (0..257).map(|i| format!("p{i}")).collect();
        let err = rows(&with(&many)).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{at} 257 approved permissions")),
            "{err}"
        );
        assert!(rows(&with(&many[..256])).is_ok());
        for bad in ["A".to_owned(), "a".repeat(65), "net work".into()] {
            let err = rows(&with(&["ok".into(), bad.clone()]))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("{at} approved permission [1] is not a permission")),
                "{bad}: {err}"
            );
        }
        assert!(rows(&with(&["a".repeat(64)])).is_ok());
        let err = rows(&with(&["x".into(), "x".into()]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("{at} approved permission [1] is given twice")),
            "{err}"
        );
    }

    #[test]
    fn the_same_row_twice_in_a_batch_is_one_row_and_a_different_one_is_a_conflict() {
        let text = r#"{"schema":"package-executor/fixture@v1","projects":[
            {"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[{"generation":1,"status":"active","revisionText":"x"}]}]},
            {"projectId":"p","packages":[{"packageName":"a","installationId":"i","generations":[{"generation":1,"status":"active","revisionText":"x"}]}]},
            {"projectId":"q","packages":[{"packageName":"a","installationId":"j","generations":[{"generation":1,"status":"active","revisionText":"x"}]}]}]}"#;
        let batch = rows(text).unwrap();
        assert_eq!(unique_installations(&batch).unwrap().len(), 2);
        assert_eq!(unique_revisions(&batch).unwrap().len(), 1);
        assert_eq!(unique_generations(&batch).unwrap().len(), 2);
        let moved = text.replacen(
            r#""projectId":"q","packages":[{"packageName":"a","installationId":"j""#,
            r#""projectId":"q","packages":[{"packageName":"a","installationId":"i""#,
            1,
        );
        let err = unique_installations(&rows(&moved).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "project q package a: installation i already exists for project p package a"
            ),
            "{err}"
        );
        let other_bytes = text.replacen(r#""revisionText":"x"}]}]},"#, r#""revisionText":"x","revisionDigest":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}]}]},"#, 1)
            .replacen(r#""revisionText":"x"}]}]},"#, r#""revisionText":"y","revisionDigest":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}]}]},"#, 1);
        let err = unique_revisions(&rows(&other_bytes).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("already stored with other bytes"), "{err}");
    }
}
