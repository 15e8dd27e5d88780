//! The control-plane side, so the product can be used without another system: the fixture
//! importer (contract section 11), activation and removal (contract section 7).

use serde::Deserialize;
use serde_json::{Value, json};
use sqlx::Row;

use crate::canonical;
use crate::model::Digest;
use crate::store::{Attempt, Dialect, Store, StoreError, on_conn};

/// `schema` of a fixture file.
pub const FIXTURE_SCHEMA: &str = "package-executor/fixture@v1";

/// A fixture file.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Fixture {
    /// Must be [`FIXTURE_SCHEMA`].
    pub schema: String,
    /// Projects.
    pub projects: Vec<FixtureProject>,
}

/// One project of a fixture.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FixtureProject {
    /// Project id.
    pub project_id: String,
    /// Its installations.
    #[serde(default)]
    pub packages: Vec<FixturePackage>,
}

/// One installation of a fixture.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FixturePackage {
    /// Package name.
    pub package_name: String,
    /// Installation id.
    pub installation_id: String,
    /// Generations.
    #[serde(default)]
    pub generations: Vec<FixtureGeneration>,
}

/// One generation of a fixture.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FixtureGeneration {
    /// Generation number.
    pub generation: i64,
    /// Lifecycle status.
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

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Projects in the file.
    pub projects: usize,
    /// Rows inserted (0 on a repeated import).
    pub inserted: usize,
}

fn input(msg: impl Into<String>) -> StoreError {
    StoreError::Input(msg.into())
}

/// Parses a fixture file strictly.
pub fn parse_fixture(bytes: &[u8]) -> Result<Fixture, StoreError> {
    canonical::parse_strict(bytes, 256)
        .map_err(|e| input(format!("the fixture is not valid JSON: {e}")))?;
    let fixture: Fixture = serde_json::from_slice(bytes).map_err(|e| {
        input(format!(
            "the fixture does not have the {FIXTURE_SCHEMA} shape: {e}"
        ))
    })?;
    if fixture.schema != FIXTURE_SCHEMA {
        return Err(input(format!(
            "the fixture's schema is {:?}; expected {FIXTURE_SCHEMA:?}",
            fixture.schema
        )));
    }
    Ok(fixture)
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

fn q(d: Dialect, text: &'static str) -> &'static str {
    crate::store::sql_for(d, text)
}

/// Imports a fixture in one transaction: all or nothing, and idempotent.
pub async fn import(store: &Store, fixture: &Fixture) -> Result<ImportReport, StoreError> {
    let mut a = store.begin().await?;
    let result = import_into(&mut a, fixture).await;
    match result {
        Ok(report) => {
            a.commit().await?;
            Ok(report)
        }
        Err(e) => {
            a.rollback().await.ok();
            Err(e)
        }
    }
}

async fn import_into(a: &mut Attempt<'_>, fixture: &Fixture) -> Result<ImportReport, StoreError> {
    let mut report = ImportReport {
        projects: fixture.projects.len(),
        inserted: 0,
    };
    on_conn!(a, c, d => {
        for p in &fixture.projects {
            let done = sqlx::query(q(d, "INSERT INTO ql3.projects (project_id) VALUES ($1) ON CONFLICT DO NOTHING"))
                .bind(&p.project_id)
                .execute(&mut *c)
                .await
                .map_err(|e| row_error(&p.project_id, e))?;
            report.inserted += done.rows_affected() as usize;
            for pkg in &p.packages {
                let at = format!("project {} package {}", p.project_id, pkg.package_name);
                let existing = sqlx::query(q(d, "SELECT i.project_id, i.package_name FROM ql3.package_installations AS i WHERE i.installation_id = $1"))
                    .bind(&pkg.installation_id)
                    .fetch_optional(&mut *c)
                    .await?;
                let created = match existing {
                    Some(r) => {
                        let (proj, name): (String, String) = (r.try_get("project_id")?, r.try_get("package_name")?);
                        if proj != p.project_id || name != pkg.package_name {
                            return Err(input(format!(
                                "{at}: installation {} already exists for project {proj} package {name}; \
                                 installation ids are immutable, pick another id",
                                pkg.installation_id
                            )));
                        }
                        false
                    }
                    None => {
                        sqlx::query(q(d, "INSERT INTO ql3.package_installations (installation_id, project_id, package_name, active_generation) VALUES ($1, $2, $3, NULL)"))
                            .bind(&pkg.installation_id)
                            .bind(&p.project_id)
                            .bind(&pkg.package_name)
                            .execute(&mut *c)
                            .await
                            .map_err(|e| row_error(&at, e))?;
                        report.inserted += 1;
                        true
                    }
                };
                let mut active = None;
                for g in &pkg.generations {
                    let at = format!("{at} generation {}", g.generation);
                    let bytes = match (&g.revision, &g.revision_text) {
                        (Some(_), Some(_)) => return Err(input(format!("{at}: give revision or revisionText, not both"))),
                        (Some(v), None) => Some(canonical::to_vec(v)),
                        (None, Some(t)) => Some(t.clone().into_bytes()),
                        (None, None) => None,
                    };
                    let revision_digest = match (&g.revision_digest, &bytes) {
                        (Some(dg), _) => dg.clone(),
                        (None, Some(b)) => Digest::of(b).as_str().to_owned(),
                        (None, None) => return Err(input(format!(
                            "{at}: without revision or revisionText, revisionDigest is required"
                        ))),
                    };
                    if let Some(b) = &bytes {
                        let stored = sqlx::query(q(d, "SELECT r.content FROM ql3.materialized_revisions AS r WHERE r.revision_digest = $1"))
                            .bind(&revision_digest)
                            .fetch_optional(&mut *c)
                            .await?;
                        match stored {
                            Some(r) => {
                                let content: Vec<u8> = r.try_get("content")?;
                                if &content != b {
                                    return Err(input(format!(
                                        "{at}: revision {revision_digest} is already stored with other bytes; \
                                         revisions are immutable"
                                    )));
                                }
                            }
                            None => {
                                sqlx::query(q(d, "INSERT INTO ql3.materialized_revisions (revision_digest, content, byte_length) VALUES ($1, $2, $3)"))
                                    .bind(&revision_digest)
                                    .bind(b.as_slice())
                                    .bind(b.len() as i64)
                                    .execute(&mut *c)
                                    .await
                                    .map_err(|e| row_error(&at, e))?;
                                report.inserted += 1;
                            }
                        }
                    }
                    let lock = g.lock_digest.clone().unwrap_or_else(|| Digest::of(b"").as_str().to_owned());
                    let gen_digest = g.generation_digest.clone().unwrap_or_else(|| {
                        generation_digest(&pkg.installation_id, g.generation, &lock, &revision_digest, &g.approved_permissions)
                            .as_str()
                            .to_owned()
                    });
                    let perms = serde_json::to_string(&g.approved_permissions).unwrap_or_else(|_| "[]".into());
                    let stored = sqlx::query(q(d, "SELECT g.generation_digest, g.lock_digest, g.revision_digest, g.approved_permissions FROM ql3.package_generations AS g WHERE g.installation_id = $1 AND g.generation = $2"))
                        .bind(&pkg.installation_id)
                        .bind(g.generation)
                        .fetch_optional(&mut *c)
                        .await?;
                    match stored {
                        Some(r) => {
                            let now: (String, String, String, String) = (
                                r.try_get("generation_digest")?,
                                r.try_get("lock_digest")?,
                                r.try_get("revision_digest")?,
                                r.try_get("approved_permissions")?,
                            );
                            if now != (gen_digest.clone(), lock.clone(), revision_digest.clone(), perms.clone()) {
                                return Err(input(format!(
                                    "{at}: already stored with other digests or permissions; generations \
                                     are immutable, add a new generation instead"
                                )));
                            }
                        }
                        None => {
                            sqlx::query(q(d, "INSERT INTO ql3.package_generations (installation_id, generation, status, generation_digest, lock_digest, revision_digest, approved_permissions) VALUES ($1, $2, $3, $4, $5, $6, $7)"))
                                .bind(&pkg.installation_id)
                                .bind(g.generation)
                                .bind(&g.status)
                                .bind(&gen_digest)
                                .bind(&lock)
                                .bind(&revision_digest)
                                .bind(&perms)
                                .execute(&mut *c)
                                .await
                                .map_err(|e| row_error(&at, e))?;
                            report.inserted += 1;
                        }
                    }
                    if g.status == "active" {
                        if active.is_some() {
                            return Err(input(format!("{at}: more than one generation is active; at most one may be")));
                        }
                        active = Some(g.generation);
                    }
                }
                if let (true, Some(gen_no)) = (created, active) {
                    sqlx::query(q(d, "UPDATE ql3.package_installations SET active_generation = $1 WHERE installation_id = $2"))
                        .bind(gen_no)
                        .bind(&pkg.installation_id)
                        .execute(&mut *c)
                        .await
                        .map_err(|e| row_error(&pkg.installation_id, e))?;
                }
            }
        }
        Ok(report)
    })
}

fn row_error(at: &str, e: sqlx::Error) -> StoreError {
    match StoreError::from(e) {
        StoreError::Other(m) => input(format!(
            "{at}: the database refused the row: {m}; fix the fixture"
        )),
        other => other,
    }
}

/// Activates a generation (from `staged`, `activating` or `superseded`): the previous active
/// generation becomes `superseded`, this one `active`, and the head points at it, atomically.
pub async fn activate(
    store: &Store,
    installation_id: &str,
    generation: i64,
) -> Result<(), StoreError> {
    let mut a = store.begin().await?;
    let result = activate_in(&mut a, installation_id, generation).await;
    finish(a, result).await
}

async fn activate_in(
    a: &mut Attempt<'_>,
    installation_id: &str,
    generation: i64,
) -> Result<(), StoreError> {
    on_conn!(a, c, d => {
        // Lock the head first, so concurrent activations of one installation serialise.
        let head = sqlx::query(q(d, "UPDATE ql3.package_installations SET active_generation = active_generation WHERE installation_id = $1 RETURNING active_generation"))
            .bind(installation_id)
            .fetch_optional(&mut *c)
            .await?;
        let Some(head) = head else {
            return Err(input(format!("installation {installation_id} does not exist; check the id")));
        };
        let current: Option<i64> = head.try_get("active_generation")?;
        let target = sqlx::query(q(d, "SELECT g.status FROM ql3.package_generations AS g WHERE g.installation_id = $1 AND g.generation = $2"))
            .bind(installation_id)
            .bind(generation)
            .fetch_optional(&mut *c)
            .await?;
        let Some(target) = target else {
            return Err(input(format!("installation {installation_id} has no generation {generation}; import it first")));
        };
        let status: String = target.try_get("status")?;
        if status == "active" && current == Some(generation) {
            return Ok(());
        }
        if !matches!(status.as_str(), "staged" | "activating" | "superseded") {
            return Err(input(format!(
                "generation {generation} of {installation_id} is {status}; only staged, activating \
                 or superseded generations can be activated"
            )));
        }
        if let Some(prev) = current {
            sqlx::query(q(d, "UPDATE ql3.package_generations SET status = 'superseded' WHERE installation_id = $1 AND generation = $2"))
                .bind(installation_id)
                .bind(prev)
                .execute(&mut *c)
                .await?;
        }
        sqlx::query(q(d, "UPDATE ql3.package_generations SET status = 'active' WHERE installation_id = $1 AND generation = $2"))
            .bind(installation_id)
            .bind(generation)
            .execute(&mut *c)
            .await?;
        sqlx::query(q(d, "UPDATE ql3.package_installations SET active_generation = $1 WHERE installation_id = $2"))
            .bind(generation)
            .bind(installation_id)
            .execute(&mut *c)
            .await?;
        Ok(())
    })
}

/// Removes a package from a project: the head becomes NULL and its generation `superseded`.
pub async fn remove(store: &Store, project_id: &str, package_name: &str) -> Result<(), StoreError> {
    let mut a = store.begin().await?;
    let result = remove_in(&mut a, project_id, package_name).await;
    finish(a, result).await
}

async fn remove_in(
    a: &mut Attempt<'_>,
    project_id: &str,
    package_name: &str,
) -> Result<(), StoreError> {
    on_conn!(a, c, d => {
        let head = sqlx::query(q(d, "UPDATE ql3.package_installations SET active_generation = active_generation WHERE project_id = $1 AND package_name = $2 RETURNING installation_id, active_generation AS previous"))
            .bind(project_id)
            .bind(package_name)
            .fetch_optional(&mut *c)
            .await?;
        let Some(head) = head else {
            return Err(input(format!("project {project_id} has no package {package_name}; check the names")));
        };
        sqlx::query(q(d, "UPDATE ql3.package_installations SET active_generation = NULL WHERE project_id = $1 AND package_name = $2"))
            .bind(project_id)
            .bind(package_name)
            .execute(&mut *c)
            .await?;
        let installation: String = head.try_get("installation_id")?;
        let previous: Option<i64> = head.try_get("previous")?;
        if let Some(prev) = previous {
            sqlx::query(q(d, "UPDATE ql3.package_generations SET status = 'superseded' WHERE installation_id = $1 AND generation = $2"))
                .bind(&installation)
                .bind(prev)
                .execute(&mut *c)
                .await?;
        }
        Ok(())
    })
}

async fn finish(a: Attempt<'_>, result: Result<(), StoreError>) -> Result<(), StoreError> {
    match result {
        Ok(()) => a.commit().await,
        Err(e) => {
            a.rollback().await.ok();
            Err(e)
        }
    }
}
