//! `current`, `explain` and `verify`: reading what is stored, never writing.

use serde_json::Value;

use crate::cli::Cli;
use crate::planner;
use crate::report::exit;
use crate::store::Current;
use crate::verify;

use super::connect_migrated;

/// `current PROJECT [--json] [--known-digest D]`.
pub async fn current(
    cli: &Cli,
    project: &str,
    json: bool,
    known: Option<&str>,
) -> anyhow::Result<i32> {
    let store = connect_migrated(cli, 1).await?;
    let c = match store.revalidate(project, known).await? {
        None => {
            eprintln!(
                "no current snapshot for project {project}; `package-executor explain {project}` \
                 says why, `package-executor publish {project}` builds one"
            );
            return Ok(exit::NO_CURRENT);
        }
        Some(Current::Unchanged(head)) => {
            if json {
                outln!(
                    "{{\"snapshotDigest\":{},\"committedAt\":{},\"unchanged\":true,\"snapshot\":null}}",
                    serde_json::to_string(&head.snapshot_digest)?,
                    serde_json::to_string(&head.committed_at)?
                );
            } else {
                outln!(
                    "project {project}: snapshot {} is still current (committed {}); the copy \
                     you hold is good",
                    head.snapshot_digest,
                    head.committed_at
                );
            }
            return Ok(exit::OK);
        }
        Some(Current::Changed(c)) => c,
    };
    if json {
        let mut line = String::with_capacity(c.canonical_json.len() + 180);
        line.push_str("{\"snapshotDigest\":");
        line.push_str(&serde_json::to_string(&c.snapshot_digest)?);
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
                eprintln!(
                    "error: the stored snapshot {} of project {project} is not one JSON object; \
                     it was written around the executor: run `package-executor verify --project \
                     {project}` and repair the database",
                    c.snapshot_digest
                );
                return Ok(exit::INTEGRITY);
            }
        }
        line.push('}');
        outln!("{line}");
        return Ok(exit::OK);
    }
    let doc: Value = serde_json::from_slice(&c.canonical_json)?;
    if let Some(k) = known {
        outln!("project {project}: snapshot {k} is no longer current; the current one follows");
    }
    outln!("project {project}: current snapshot {}", c.snapshot_digest);
    outln!("  committed      {}", c.committed_at);
    outln!("  active vector  {}", c.active_vector_digest);
    outln!("  definitions    {}", c.definition_digest);
    let packages = doc["activeVector"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    outln!("  packages ({}):", packages.len());
    for p in packages {
        outln!(
            "    {} generation {} ({})",
            p["packageName"].as_str().unwrap_or(""),
            p["generation"],
            p["installationId"].as_str().unwrap_or("")
        );
    }
    let defs = doc["definitions"].as_array().map_or(&[][..], Vec::as_slice);
    outln!("  tools ({}):", defs.len());
    for d in defs {
        outln!(
            "    {:<40} {} {}",
            d["alias"].as_str().unwrap_or(""),
            d["canonicalIdentity"].as_str().unwrap_or(""),
            d["version"].as_str().unwrap_or("")
        );
    }
    Ok(exit::OK)
}

/// `explain PROJECT`.
pub async fn explain(cli: &Cli, project: &str) -> anyhow::Result<i32> {
    let store = connect_migrated(cli, 1).await?;
    let mut a = store.begin().await?;
    if !a.project_exists(project).await? {
        a.rollback().await?;
        outln!("project {project} does not exist; import it or check the id");
        return Ok(exit::OK);
    }
    let current = a.find_current(project).await?;
    let (live, stored) = a.observe_revisions(project).await?;
    let heads: Vec<_> = live.iter().map(|o| o.head.clone()).collect();
    let vector = planner::active_vector_digest(project, &heads);
    let newest = a.newest_snapshot(project).await?;
    let rejection = a.project_rejections(project).await?.remove(vector.as_str());
    let mark = a.mark_version(project).await?;
    a.rollback().await?;
    outln!("project {project}");
    // The observation reads at most one head past the limit, so past it the count is a floor.
    let count = match live.len() {
        1 => "1 active package".to_owned(),
        n if n > planner::MAX_PACKAGES => {
            format!(
                "more than {} active packages, over the limit",
                planner::MAX_PACKAGES
            )
        }
        n => format!("{n} active packages"),
    };
    outln!("  live vector    {vector} ({count})");
    // Read from the live tables, never from a recorded rejection: whether a revision is
    // stored is a condition that changes, not a verdict on the vector.
    let mut missing = None;
    for o in &live {
        let revision = if o.status.is_none() || stored.contains_key(&o.head.revision_digest) {
            ""
        } else {
            missing.get_or_insert(o);
            "; its revision is not stored"
        };
        outln!(
            "    {} installation {} generation {} ({}{revision})",
            o.head.package_name,
            o.head.installation_id,
            o.head.generation,
            o.status.as_deref().unwrap_or("generation row missing")
        );
    }
    match &current {
        Some(c) => outln!(
            "  current        yes: snapshot {} committed {}",
            c.snapshot_digest,
            c.committed_at
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
            n.committed_at,
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
        outln!("  rejected       {}: {}", r.reason, r.detail);
    }
    let standing = match (&current, &rejection, missing) {
        (Some(_), _, _) => Standing::Current,
        (None, Some(_), _) => Standing::Rejected,
        (None, None, Some(o)) => {
            outln!(
                "  waiting        package {} generation {} points at revision {}, which is not \
                 stored yet; a run reports revision-missing until it is, and builds the project \
                 once it is",
                o.head.package_name,
                o.head.generation,
                o.head.revision_digest
            );
            Standing::AwaitingRevision
        }
        (None, None, None) => Standing::Buildable,
    };
    let (pending, next) = pending_lines(project, mark, standing);
    outln!("  pending index  {pending}");
    if let Some(next) = next {
        outln!("  next step      {next}");
    }
    Ok(exit::OK)
}

/// Where a project stands, as `explain` reads it from the live tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// A snapshot is proven current.
    Current,
    /// A rejection recorded for the live vector stands.
    Rejected,
    /// A head's revision is not stored yet: nothing is recorded, and its arrival marks the
    /// project.
    AwaitingRevision,
    /// Neither: a run that looks at it builds it.
    Buildable,
}

/// What `explain` says of a project's mark in the pending index (contract section 9), and the
/// next step when the project is neither current nor rejected: a plain `run` looks only at
/// marked projects, so an unmarked one that is not current waits for a full scan, unless it
/// waits for a revision, whose arrival marks it.
fn pending_lines(project: &str, mark: Option<i64>, standing: Standing) -> (String, Option<String>) {
    let pending = match (mark, standing) {
        (Some(v), Standing::AwaitingRevision) => format!(
            "marked (version {v}): the next `run` looks at it, and reports revision-missing \
             while the revision is not stored"
        ),
        (Some(v), Standing::Buildable) => {
            format!("marked (version {v}): the next `run` looks at it and builds it")
        }
        (Some(v), _) => format!("marked (version {v}): the next `run` looks at it"),
        (None, Standing::Current) => {
            "not marked: nothing changed since it was last dealt with".to_owned()
        }
        (None, Standing::Rejected) => {
            "not marked: the rejection stands until its packages change".to_owned()
        }
        (None, Standing::AwaitingRevision) => "not marked: storing the revision marks it, and \
             the next `run` then builds it"
            .to_owned(),
        (None, Standing::Buildable) => "not marked, though not current: a plain `run` skips it \
             (its mark was lost); `run --full-scan`, the chart's periodic sweep, finds it"
            .to_owned(),
    };
    let next = match (standing, mark) {
        (Standing::Current | Standing::Rejected, _) => None,
        (Standing::AwaitingRevision, _) => Some(
            "materialize the missing revision (the control plane's job); or activate another \
             generation of the package"
                .to_owned(),
        ),
        (Standing::Buildable, Some(_)) => Some(format!(
            "`package-executor publish {project}` (or wait for the next run)"
        )),
        (Standing::Buildable, None) => Some(format!(
            "`package-executor publish {project}` (or `package-executor run --full-scan`)"
        )),
    };
    (pending, next)
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

/// One snapshot as `verify` reports it: which, and what is wrong with it (nothing when it
/// verifies).
struct Checked {
    project_id: String,
    snapshot_id: i64,
    snapshot_digest: String,
    problems: Vec<String>,
}

/// Checks a page on the blocking pool. Re-proving a snapshot is CPU work (parse, canonical
/// form, four digests), several times the cost of reading it, so pages are checked on every
/// core while the next one is read.
fn check_page(page: Vec<crate::store::StoredSnapshot>) -> tokio::task::JoinHandle<Vec<Checked>> {
    tokio::task::spawn_blocking(move || {
        page.into_iter()
            .map(|s| Checked {
                problems: verify::problems(&s),
                project_id: s.project_id,
                snapshot_id: s.snapshot_id,
                snapshot_digest: s.snapshot_digest,
            })
            .collect()
    })
}

/// The document bytes after which a page of `verify` stops. A row comes while the documents
/// before it hold less than this, so a page holds at most this plus one document (8 MiB at
/// most): with a page checked on each core and the next one being read, `verify` holds a few
/// pages of 12 MiB at most, however large the documents are.
const PAGE_BYTES: i64 = 4 << 20;

/// `verify [--project P] [--json]`.
pub async fn verify(cli: &Cli, project: Option<&str>, json: bool) -> anyhow::Result<i32> {
    let store = connect_migrated(cli, 1).await?;
    // Pages being checked at once: one per core. Each holds up to 16 snapshots and at most
    // PAGE_BYTES plus one document, so memory stays a few pages whatever the table's size.
    let workers = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut after = 0i64;
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
    let mut in_flight = std::collections::VecDeque::with_capacity(workers);
    let mut report = |page: Vec<Checked>| {
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
        Ok::<(), super::StdoutError>(())
    };
    loop {
        let page = store.snapshot_page(after, project, PAGE_BYTES).await?;
        let Some(last) = page.last() else { break };
        after = last.snapshot_id;
        in_flight.push_back(check_page(page));
        // Reported in id order: the oldest page first.
        if in_flight.len() >= workers
            && let Some(oldest) = in_flight.pop_front()
        {
            report(oldest.await?)?;
        }
    }
    while let Some(oldest) = in_flight.pop_front() {
        report(oldest.await?)?;
    }
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
    Ok(if bad > 0 { exit::INTEGRITY } else { exit::OK })
}

#[cfg(test)]
mod tests {
    use super::{Standing, pending_lines};

    #[test]
    fn explain_says_whether_a_run_will_look_at_the_project() {
        let (line, next) = pending_lines("p", Some(7), Standing::Buildable);
        assert!(line.starts_with("marked (version 7)"), "{line}");
        assert!(line.ends_with("builds it"), "{line}");
        assert_eq!(
            next.as_deref(),
            Some("`package-executor publish p` (or wait for the next run)")
        );
        let (line, next) = pending_lines("p", None, Standing::Current);
        assert!(line.starts_with("not marked: nothing changed"), "{line}");
        assert_eq!(next, None);
        let (line, next) = pending_lines("p", None, Standing::Rejected);
        assert!(line.contains("rejection stands"), "{line}");
        assert_eq!(next, None);
        // A lost mark: only a full scan or a publish builds it.
        let (line, next) = pending_lines("p", None, Standing::Buildable);
        assert!(
            line.contains("--full-scan") && line.contains("skips it"),
            "{line}"
        );
        assert_eq!(
            next.as_deref(),
            Some("`package-executor publish p` (or `package-executor run --full-scan`)")
        );
        // Marked and rejected (the packages changed again): the run looks, no step to take.
        let (line, next) = pending_lines("p", Some(9), Standing::Rejected);
        assert!(line.starts_with("marked"), "{line}");
        assert_eq!(next, None);
    }

    #[test]
    fn explain_says_a_missing_revision_is_waited_for_not_a_verdict() {
        // The run that met it cleared the mark; the revision's arrival marks it again.
        let (line, next) = pending_lines("p", None, Standing::AwaitingRevision);
        assert!(line.contains("storing the revision marks it"), "{line}");
        assert!(!line.contains("stands") && !line.contains("lost"), "{line}");
        assert!(next.is_some_and(|n| n.contains("materialize the missing revision")));
        let (line, _) = pending_lines("p", Some(3), Standing::AwaitingRevision);
        assert!(line.contains("revision-missing while"), "{line}");
    }
}
