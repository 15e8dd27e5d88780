//! `current`, `explain` and `verify`: reading what is stored, never writing.

use serde_json::Value;

use crate::audit::{Checked, verify_all};
use crate::cli::Cli;
use crate::exit::Exit;
use crate::limits;
use crate::model::Digest;
use crate::model::GenerationStatus;
use crate::quote::{quote, shown};
use crate::standing::{Standing, pending_lines};
use crate::store::{Current, ProjectFacts};

use super::connect_migrated;

/// `current PROJECT [--json] [--known-digest D]`.
pub(super) async fn current(
    cli: &Cli,
    project: &str,
    json: bool,
    known: Option<&Digest>,
) -> anyhow::Result<Exit> {
    let name = shown(project);
    let store = connect_migrated(&super::database(cli)?, 1).await?;
    let c = match store.current_door(project, known).await? {
        None => {
            errln!(
                "no current snapshot for project {name}; `package-executor explain {name}` \
                 says why, `package-executor publish {name}` builds one"
            );
            return Ok(Exit::NoCurrent);
        }
        Some(Current::Unchanged(head)) => {
            if json {
                outln!(
                    "{{\"snapshotDigest\":{},\"committedAt\":{},\"unchanged\":true,\"snapshot\":null}}",
                    serde_json::to_string(head.snapshot_digest.as_str())?,
                    serde_json::to_string(&head.committed_at)?
                );
            } else {
                outln!(
                    "project {name}: snapshot {} is still current (committed {}); the copy \
                     you hold is good",
                    head.snapshot_digest,
                    shown(&head.committed_at)
                );
            }
            return Ok(Exit::Ok);
        }
        Some(Current::Changed(c)) => c,
    };
    if json {
        let mut line = String::with_capacity(c.canonical_json.len() + 180);
        line.push_str("{\"snapshotDigest\":");
        line.push_str(&serde_json::to_string(c.snapshot_digest.as_str())?);
        line.push_str(",\"committedAt\":");
        line.push_str(&serde_json::to_string(&c.committed_at)?);
        if known.is_some() {
            line.push_str(",\"unchanged\":false");
        }
        line.push_str(",\"snapshot\":");
        // Only JSON this command checked: the stored bytes embedded as they are (consumers may
        // hash them) once they are known to be exactly one JSON object.
        match serde_json::from_slice::<&serde_json::value::RawValue>(&c.canonical_json) {
            Ok(raw) if raw.get().starts_with('{') => line.push_str(raw.get()),
            _ => {
                errln!(
                    "error: the stored snapshot {} of project {name} is not one JSON object; \
                     it was written around the executor: run `package-executor verify --project \
                     {name}` and repair the database",
                    c.snapshot_digest
                );
                return Ok(Exit::Integrity);
            }
        }
        line.push('}');
        outln!("{line}");
        return Ok(Exit::Ok);
    }
    let doc: Value = serde_json::from_slice(&c.canonical_json)?;
    if let Some(k) = known {
        outln!("project {name}: snapshot {k} is no longer current; the current one follows");
    }
    outln!("project {name}: current snapshot {}", c.snapshot_digest);
    outln!("  committed      {}", shown(&c.committed_at));
    outln!("  active vector  {}", c.active_vector_digest);
    outln!("  definitions    {}", c.definition_digest);
    let packages = doc["activeVector"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    outln!("  packages ({}):", packages.len());
    for p in packages {
        outln!(
            "    {} generation {} ({})",
            shown(p["packageName"].as_str().unwrap_or("")),
            p["generation"],
            shown(p["installationId"].as_str().unwrap_or(""))
        );
    }
    let defs = doc["definitions"].as_array().map_or(&[][..], Vec::as_slice);
    outln!("  tools ({}):", defs.len());
    for d in defs {
        outln!(
            "    {:<40} {} {}",
            shown(d["alias"].as_str().unwrap_or("")).to_string(),
            shown(d["canonicalIdentity"].as_str().unwrap_or("")),
            shown(d["version"].as_str().unwrap_or(""))
        );
    }
    Ok(Exit::Ok)
}

/// `explain PROJECT`.
pub(super) async fn explain(cli: &Cli, project: &str) -> anyhow::Result<Exit> {
    let name = shown(project);
    let store = connect_migrated(&super::database(cli)?, 1).await?;
    let Some(facts) = store.explain(project).await? else {
        outln!("project {name} does not exist; import it or check the id");
        return Ok(Exit::Ok);
    };
    let ProjectFacts {
        current,
        live,
        stored,
        vector,
        newest,
        rejection,
        mark,
    } = facts;
    outln!("project {name}");
    // The observation reads at most one head past the limit, so past it the count is a floor.
    let count = match live.len() {
        1 => "1 active package".to_owned(),
        n if n > limits::MAX_PACKAGES => {
            format!(
                "more than {} active packages, over the limit",
                limits::MAX_PACKAGES
            )
        }
        n => format!("{n} active packages"),
    };
    outln!("  live vector    {vector} ({count})");
    // Read from the live tables, never from a recorded rejection: whether a revision is
    // stored, or a generation active, is a condition that changes, not a verdict on the vector.
    let mut missing = None;
    let mut inactive = None;
    for o in &live {
        if o.status != Some(GenerationStatus::Active) {
            inactive.get_or_insert(o);
        }
        let revision = if o.status.is_none() || stored.contains_key(&o.head.revision_digest) {
            ""
        } else {
            missing.get_or_insert(o);
            "; its revision is not stored"
        };
        outln!(
            "    {} installation {} generation {} ({}{revision})",
            shown(&o.head.package_name),
            shown(&o.head.installation_id),
            o.head.generation,
            o.status.map_or("generation row missing", |s| s.as_str())
        );
    }
    match &current {
        Some(c) => outln!(
            "  current        yes: snapshot {} committed {}",
            c.snapshot_digest,
            shown(&c.committed_at)
        ),
        None => outln!("  current        no"),
    }
    match &newest {
        Some(n)
            if current
                .as_ref()
                .is_some_and(|c| c.snapshot_id == n.snapshot_id) => {}
        Some(n) => outln!(
            "  newest         snapshot {} committed {} for vector {}{}",
            n.snapshot_digest,
            shown(&n.committed_at),
            n.active_vector_digest,
            if n.active_vector_digest == vector.as_str() {
                ""
            } else {
                " (another vector: packages changed since)"
            }
        ),
        None => outln!("  newest         no snapshot was ever published"),
    }
    if let Some(r) = &rejection {
        outln!(
            "  rejected       {}: {}",
            r.reason,
            crate::quote::bound_detail(r.detail.escape_debug().to_string())
        );
    }
    let standing = Standing::of(
        current.is_some(),
        rejection.is_some(),
        inactive.is_some(),
        missing.is_some(),
    );
    match (standing, inactive, missing) {
        (Standing::AwaitingActivation, Some(o), _) => outln!(
            "  waiting        package {} generation {} is {}, not active; a run reports \
             generation-drift until it is (`package-executor sources activate --installation {} \
             --generation {}`)",
            shown(&o.head.package_name),
            o.head.generation,
            o.status.map_or("without a generation row", |s| s.as_str()),
            shown(&o.head.installation_id),
            o.head.generation
        ),
        (Standing::AwaitingRevision, _, Some(o)) => outln!(
            "  waiting        package {} generation {} points at revision {}, which is not \
             stored yet; a run reports revision-missing until it is, and builds the project \
             once it is",
            shown(&o.head.package_name),
            o.head.generation,
            shown(&o.head.revision_digest)
        ),
        _ => {}
    }
    let (pending, next) = pending_lines(project, mark, standing);
    outln!("  pending index  {pending}");
    if let Some(next) = next {
        outln!("  next step      {next}");
    }
    Ok(Exit::Ok)
}

/// One problem `verify --json` reports.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct VerifyProblem {
    project_id: String,
    snapshot_digest: String,
    problem: String,
}

/// The one line `verify --json` prints.
#[derive(Debug, serde::Serialize)]
struct VerifyReport {
    schema: &'static str,
    checked: u64,
    problems: Vec<VerifyProblem>,
}

/// `verify [--project P] [--json]`.
pub(super) async fn verify(cli: &Cli, project: Option<&str>, json: bool) -> anyhow::Result<Exit> {
    let store = connect_migrated(&super::database(cli)?, 1).await?;
    // A mistyped id is not "0 snapshots, all well": it checked nothing the operator meant.
    if let Some(p) = project
        && !store.project_exists(p).await?
    {
        errln!(
            "error: project {} does not exist; check the id (`package-executor verify` without \
             --project checks every snapshot)",
            quote(p)
        );
        return Ok(Exit::Error);
    }
    let (mut checked, mut bad) = (0u64, 0u64);
    let mut found = Vec::new();
    // Checking a million snapshots takes minutes: show it moving, towards the count when it
    // started (snapshots appended since are checked too).
    let total = store.count_snapshots(project).await?;
    let meter = super::meter::Meter::start(
        super::progress::progress_wanted(cli),
        Some(total),
        "{spinner} {elapsed} [{bar:30}] {human_pos}/{human_len} snapshots checked ({eta} left)",
        move |checked| {
            tracing::info!(
                snapshots_checked = checked,
                snapshots_total = total,
                percent = super::meter::percent(checked, total),
                "verify progress"
            );
        },
    );
    let report = |page: Vec<Checked>| {
        meter.add(page.len() as u64);
        for s in page {
            checked += 1;
            if s.problems.is_empty() {
                continue;
            }
            bad += 1;
            for p in s.problems {
                meter.suspend(|| {
                    tracing::error!(project_id = %s.project_id, snapshot_id = s.snapshot_id, problem = %p, "snapshot does not verify");
                    if !json {
                        outln!(
                            "FAIL {} snapshot {} ({}): {p}",
                            s.project_id, s.snapshot_id, s.snapshot_digest
                        );
                    }
                    Ok::<(), super::StdoutError>(())
                })?;
                if json {
                    found.push(VerifyProblem {
                        project_id: s.project_id.clone(),
                        snapshot_digest: s.snapshot_digest.clone(),
                        problem: p,
                    });
                }
            }
        }
        Ok::<(), anyhow::Error>(())
    };
    verify_all(&store, project, report).await?;
    drop(meter);
    if json {
        let report = VerifyReport {
            schema: "package-executor/verify@v1",
            checked,
            problems: found,
        };
        outln!("{}", serde_json::to_string(&report)?);
    } else {
        let noun = if checked == 1 {
            "snapshot"
        } else {
            "snapshots"
        };
        outln!(
            "verified {checked} {noun}: {} ok, {bad} failed",
            checked - bad
        );
    }
    Ok(if bad > 0 { Exit::Integrity } else { Exit::Ok })
}
