//! Hostile revisions through `run`, on both dialects: each one the largest the limits allow
//! (24,000,000 bytes, under the 24 MiB limit) with its bulk where it costs most, its outcome
//! code, and the peak RSS of the run (from `/usr/bin/time -v`) against the bound that
//! docs/contract.md states (`package_executor::coordinator::memory_bound`). Also the largest
//! detail, log line and `explain` output any of them produced: input is quoted at most 256
//! bytes at a time, so none of them is large. Then the worst mix rather than the worst single
//! revision: 16 projects whose snapshots are each near the 8 MiB limit, five runs at the default
//! flags and three with all 16 in one batch of one worker (`--batch-size 512 --concurrency 1`)
//! at budgets of 96, 256 and 512 MiB, each peak against the bound at its flags. Every run has the container image's
//! allocator settings.
//!
//! The binary is the test build unless `PE_HOSTILE_BIN` names another (the release build, for
//! the figures in the notes): its allocations are the release build's (the same code and data
//! structures), but its code takes more memory at rest, so the 64 MiB bar is checked on the
//! peak above the binary's own idle peak.

use package_executor_testkit::db;
use package_executor_testkit::pg;

use std::fmt::Write as _;
use std::time::Duration;

use db::*;
use package_executor::coordinator::{RunSettings, memory_bound};
use package_executor::store::Dialect;
use serde_json::{Value, json};

/// The size of every hostile revision: under the 24 MiB limit, as in the security review.
const SIZE: usize = 24_000_000;

/// The bar for one hostile revision at the default flags: 64 MiB for the release build, whose
/// idle process peaks at about 12 MiB. The test build's code and tables take about 11 MiB
/// more at rest, so what is checked is the run's peak above the binary's own idle peak (a
/// `current` of an unknown project on the same database): at most 64 − 12 = 52 MiB.
const ONE_REVISION_WORK: u64 = 52 << 20;

const HEAD: &str = r#"{"schema":"qinglong/materialized-revision@v1","#;
const PKG: &str = r#""package":{"name":"p","version":"1.0.0"}"#;

/// `prefix`, then `unit` repeated, then `suffix`, `SIZE` bytes in all (the repeated part is
/// cut to whole units and padded with spaces, which JSON allows between tokens... or inside a
/// string when `in_string`).
fn filled(prefix: &str, unit: &str, last: &str, suffix: &str) -> String {
    let room = SIZE - prefix.len() - last.len() - suffix.len();
    let n = room / unit.len();
    let mut s = String::with_capacity(SIZE);
    s.push_str(prefix);
    s.push_str(&unit.repeat(n));
    s.push_str(last);
    s.push_str(&" ".repeat(room - n * unit.len()));
    s.push_str(suffix);
    assert_eq!(s.len(), SIZE);
    s
}

/// The hostile revisions: (name, bytes, expected outcome code).
fn cases() -> Vec<(&'static str, String, &'static str)> {
    let tool = |schema_prefix: &str| {
        format!(
            r#"{HEAD}{PKG},"tools":[{{"name":"t","version":"1.0.0","inputSchema":{{"default":{schema_prefix}"#
        )
    };
    vec![
        (
            "zeros in package",
            filled(
                &format!(r#"{HEAD}"package":{{"name":"p","version":"1.0.0","pad":["#),
                "0,",
                "0",
                "]}}",
            ),
            "published",
        ),
        (
            "zeros as tools",
            filled(&format!(r#"{HEAD}{PKG},"tools":["#), "0,", "0", "]}"),
            "revision-malformed",
        ),
        (
            "zeros in an ignored member",
            filled(&format!(r#"{HEAD}{PKG},"files":["#), "0,", "0", "]}"),
            "published",
        ),
        (
            "zeros as the schema",
            filled(&format!(r#"{{{PKG},"schema":["#), "0,", "0", "]}"),
            "revision-malformed",
        ),
        (
            "zeros in a definition",
            filled(&tool("["), "0,", "0", "]}}]}"),
            "invalid-definition",
        ),
        (
            "empty objects in a definition",
            filled(&tool("["), "{},", "{}", "]}}]}"),
            "invalid-definition",
        ),
        (
            "empty strings in a definition",
            filled(&tool("["), r#""","#, r#""""#, "]}}]}"),
            "invalid-definition",
        ),
        (
            "empty objects as tools",
            filled(&format!(r#"{HEAD}{PKG},"tools":["#), "{},", "{}", "]}"),
            "invalid-definition",
        ),
        (
            "a 24 MB package name",
            filled(
                &format!(r#"{HEAD}"package":{{"version":"1.0.0","name":""#),
                "p",
                "",
                r#""}}"#,
            ),
            "package-mismatch",
        ),
        (
            "a 24 MB tool name",
            filled(
                &format!(r#"{HEAD}{PKG},"tools":[{{"version":"1.0.0","inputSchema":{{}},"name":""#),
                "n",
                "",
                r#""}]}"#,
            ),
            "invalid-definition",
        ),
        (
            "a 24 MB string in a definition",
            filled(&tool("\""), "x", "", "\"}}]}"),
            "invalid-definition",
        ),
        (
            "a 24 MB number in a definition",
            filled(&tool("1."), "0", "", "}}]}"),
            "published",
        ),
        (
            "12M nested arrays",
            filled(&format!(r#"{HEAD}{PKG},"files":"#), "[", "", ""),
            "revision-malformed",
        ),
    ]
}

fn fixture(projects: &[(String, &str)]) -> Vec<u8> {
    let projects: Vec<Value> = projects
        .iter()
        .map(|(id, text)| {
            json!({"projectId": id, "packages": [{
                "packageName": "p", "installationId": format!("{id}-p"),
                "generations": [{"generation": 1, "status": "active", "revisionText": text}]}]})
        })
        .collect();
    serde_json::to_vec(&json!({"schema": "package-executor/fixture@v1", "projects": projects}))
        .unwrap()
}

/// The allocator settings the container image gives the binary (the Dockerfile's
/// `GLIBC_TUNABLES`), so that a peak measured here is the pod's.
pub(super) fn image_tunables() -> String {
    let dockerfile = include_str!("../../../Dockerfile");
    dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ENV GLIBC_TUNABLES="))
        .expect("the Dockerfile sets GLIBC_TUNABLES")
        .trim()
        .to_owned()
}

/// What one run of the binary showed.
pub(super) struct Measured {
    pub(super) peak: u64,
    pub(super) exit: Option<i32>,
    longest_log_line: usize,
    pub(super) stdout: String,
}

/// `package-executor ARGS` under `/usr/bin/time -v`, logging JSON.
pub(super) async fn measured(url: &str, args: &[&str]) -> Measured {
    let mut cmd = tokio::process::Command::new("/usr/bin/time");
    cmd.arg("-v")
        .arg(
            std::env::var("PE_HOSTILE_BIN")
                .unwrap_or_else(|_| env!("CARGO_BIN_EXE_package-executor").to_owned()),
        )
        .args(args)
        .env("DATABASE_URL", url)
        .env("PACKAGE_EXECUTOR_LOG_FORMAT", "json")
        .env("GLIBC_TUNABLES", image_tunables())
        .env_remove("MALLOC_ARENA_MAX")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("PACKAGE_EXECUTOR_LOG")
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(600), cmd.output())
        .await
        .expect("the run finishes")
        .expect("/usr/bin/time runs (Debian's `time` package; the test command installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let kib: u64 = stderr
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak in {stderr}"));
    let longest_log_line = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(str::len)
        .max()
        .unwrap_or(0);
    Measured {
        peak: kib * 1024,
        exit: out.status.code(),
        longest_log_line,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// An empty migrated database of the dialect, and the folder that holds it (SQLite).
pub(super) async fn fresh(dialect: Dialect) -> (String, Option<tempfile::TempDir>) {
    match dialect {
        Dialect::Postgres => (pg::fresh_db().await, None),
        Dialect::Sqlite => {
            let (url, dir) = pg::fresh_sqlite().await;
            (url, Some(dir))
        }
    }
}

pub(super) fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / f64::from(1 << 20))
}

/// One `run --json` on `url` with `flags` (name, value), judged against the bound at its
/// `--memory-budget` (`budget`, bytes) and `--concurrency`: its line in `report` (the flags,
/// what it published, its exit and its peak against the bound), its summary, and whether its
/// peak held.
pub(super) async fn judged_run(
    url: &str,
    flags: &[(&str, String)],
    budget: u64,
    concurrency: usize,
    report: &mut String,
) -> (Value, bool) {
    let mut args = vec!["run", "--json", "--summary-file", "/dev/null"];
    for (name, value) in flags {
        args.extend([*name, value.as_str()]);
    }
    let got = measured(url, &args).await;
    let summary: Value = serde_json::from_str(got.stdout.trim()).expect("one JSON summary");
    let bound = memory_bound(budget, concurrency);
    let held = got.peak <= bound;
    let label: Vec<String> = flags.iter().map(|(n, v)| format!("{n} {v}")).collect();
    writeln!(
        report,
        "  {}: published {} exit {:?}  peak {:>9} of {:>9}  {}",
        label.join(" "),
        summary["published"],
        got.exit,
        mib(got.peak),
        mib(bound),
        if held { "ok" } else { "OVER" }
    )
    .unwrap();
    (summary, held)
}

async fn suite(dialect: Dialect) {
    let settings = RunSettings::default();
    let one = memory_bound(settings.memory_budget, 1);
    let all = memory_bound(settings.memory_budget, settings.concurrency);
    let mut report = format!(
        "hostile revisions on {dialect} (default flags; stated bound {} for one worker, {} for {}):\n",
        mib(one),
        mib(all),
        settings.concurrency
    );
    let (mut longest_detail, mut longest_log, mut longest_explain) = (0, 0, 0);
    let mut failures = Vec::new();
    let cases = cases();
    for (i, (name, text, want)) in cases.iter().enumerate() {
        let (url, _dir) = fresh(dialect).await;
        let store = connect(&url).await;
        import(&store, &fixture(&[(format!("h{i}"), text)])).await;
        store.close().await;
        let idle = measured(&url, &["current", "no-such-project"]).await.peak;
        let run = measured(&url, &["run", "--json", "--summary-file", "/dev/null"]).await;
        let summary: Value = serde_json::from_str(run.stdout.trim()).expect("one JSON summary");
        let got = if summary["published"] == 1 {
            "published".to_owned()
        } else {
            summary["rejected"]
                .as_object()
                .and_then(|m| m.keys().next().cloned())
                .unwrap_or_else(|| format!("{summary}"))
        };
        let explain = measured(&url, &["explain", &format!("h{i}")]).await;
        let store = connect(&url).await;
        let detail = scalar(
            &store,
            "SELECT CAST(COALESCE(MAX(LENGTH(detail)), 0) AS BIGINT) FROM ql3.tool_definition_snapshot_rejections",
        )
        .await as usize;
        store.close().await;
        longest_detail = longest_detail.max(detail);
        longest_log = longest_log.max(run.longest_log_line);
        longest_explain = longest_explain.max(explain.stdout.len());
        let work = run.peak.saturating_sub(idle);
        let held = work <= ONE_REVISION_WORK && run.peak <= one && got == *want;
        writeln!(
            report,
            "  {name:<32} {got:<20} exit {:?}  peak {:>9}  above idle {:>9}  {}",
            run.exit,
            mib(run.peak),
            mib(work),
            if held { "ok" } else { "OVER OR WRONG" }
        )
        .unwrap();
        if !held {
            failures.push(format!(
                "{name}: {got} (want {want}), peak {} ({} above idle)",
                mib(run.peak),
                mib(work)
            ));
        }
    }
    // Every hostile revision at once, at the default concurrency.
    let (url, _dir) = fresh(dialect).await;
    let store = connect(&url).await;
    for (i, (_, text, _)) in cases.iter().enumerate() {
        import(&store, &fixture(&[(format!("h{i}"), text)])).await;
    }
    store.close().await;
    let run = measured(&url, &["run", "--json", "--summary-file", "/dev/null"]).await;
    writeln!(
        report,
        "  {:<32} {:<20} exit {:?}  peak {:>9}  {}",
        format!("all {} at once", cases.len()),
        "",
        run.exit,
        mib(run.peak),
        if run.peak <= all { "ok" } else { "OVER" }
    )
    .unwrap();
    if run.peak > all {
        failures.push(format!(
            "all at once: peak {} over {}",
            mib(run.peak),
            mib(all)
        ));
    }
    writeln!(
        report,
        "  largest detail {longest_detail} bytes, log line {longest_log} bytes, explain output {longest_explain} bytes"
    )
    .unwrap();
    println!("{report}");
    report_to_file(&report);
    assert!(failures.is_empty(), "{report}\n{failures:#?}");
    assert!(longest_detail <= 4096, "{report}");
    assert!(longest_log <= 16 * 1024, "{report}");
    assert!(longest_explain <= 16 * 1024, "{report}");
}

/// The snapshot-heavy mix: 16 projects, each of one package with 128 tools whose canonical
/// snapshot is just under the 8 MiB limit, so that every worker assembles, writes and sends a
/// document of the largest size at once, again and again.
const HEAVY_PROJECTS: usize = 16;

/// The filler of each tool's `inputSchema`: 128 of them make a snapshot of about 8.3 MB.
const HEAVY_FILLER: usize = 64_800;

/// How many runs of the mix on each dialect (glibc's arenas make the peak vary from run to run).
const HEAVY_RUNS: usize = 5;

/// The revision every project of the mix activates (one row; the projects' snapshots differ by
/// their project id).
fn heavy_revision() -> String {
    let filler = "x".repeat(HEAVY_FILLER);
    let tools: Vec<String> = (0..128)
        .map(|i| {
            format!(
                r#"{{"name":"t{i}","version":"1.0.0","inputSchema":{{"type":"object","default":"{filler}"}}}}"#
            )
        })
        .collect();
    format!("{HEAD}{PKG},\"tools\":[{}]}}", tools.join(","))
}

/// A database holding the mix: the first project carries the revision's text, the others name
/// it by its digest.
async fn heavy_database(dialect: Dialect) -> (String, Option<tempfile::TempDir>) {
    let (url, dir) = fresh(dialect).await;
    let text = heavy_revision();
    let digest = package_executor::model::Digest::of(text.as_bytes()).to_string();
    let project = |i: usize, (member, value): (&str, &str)| {
        json!({"projectId": format!("heavy-{i}"), "packages": [{
            "packageName": "p", "installationId": format!("heavy-{i}-p"),
            "generations": [{"generation": 1, "status": "active", member: value}]}]})
    };
    let store = connect(&url).await;
    let first = json!({"schema": "package-executor/fixture@v1",
        "projects": [project(0, ("revisionText", &text))]});
    import(&store, &serde_json::to_vec(&first).unwrap()).await;
    let rest: Vec<Value> = (1..HEAVY_PROJECTS)
        .map(|i| project(i, ("revisionDigest", &digest)))
        .collect();
    let rest = json!({"schema": "package-executor/fixture@v1", "projects": rest});
    import(&store, &serde_json::to_vec(&rest).unwrap()).await;
    store.close().await;
    (url, dir)
}

async fn snapshot_heavy(dialect: Dialect) {
    let settings = RunSettings::default();
    let all = memory_bound(settings.memory_budget, settings.concurrency);
    let mut report = format!(
        "snapshot-heavy runs on {dialect} ({HEAVY_PROJECTS} projects, one 128-tool package each, \
         snapshots of about 8.3 MB; default flags, the image's allocator settings; bound {}):\n",
        mib(all)
    );
    let mut over = 0;
    // The default flags, HEAVY_RUNS times; then every project in one batch (`--batch-size 512`)
    // at three budgets, where a batch's later snapshots are what the budget must hold.
    // One worker there: its share is the whole budget.
    let runs = (1..=HEAVY_RUNS)
        .map(|_| {
            (
                settings.batch_size,
                settings.concurrency,
                settings.memory_budget >> 20,
            )
        })
        .chain([96, 256, 512].map(|budget| (512, 1, budget)));
    for (batch, concurrency, budget) in runs {
        let (url, _dir) = heavy_database(dialect).await;
        let flags = [
            ("--batch-size", batch.to_string()),
            ("--concurrency", concurrency.to_string()),
            ("--memory-budget", format!("{budget}MiB")),
        ];
        let (summary, held) =
            judged_run(&url, &flags, budget << 20, concurrency, &mut report).await;
        over += usize::from(!held);
        assert_eq!(
            summary["published"], HEAVY_PROJECTS,
            "every snapshot of the mix fits the limit: {summary}"
        );
    }
    writeln!(
        report,
        "  runs over the bound: {over} of {}",
        HEAVY_RUNS + 3
    )
    .unwrap();
    println!("{report}");
    report_to_file(&report);
    assert_eq!(over, 0, "{report}");
}

/// Appends the report where the test command prints it from.
pub(super) fn report_to_file(report: &str) {
    use std::io::Write as _;
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile-report.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(report.as_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_revisions_on_sqlite() {
    suite(Dialect::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_heavy_runs_on_sqlite() {
    snapshot_heavy(Dialect::Sqlite).await;
}

/// The `pg` tier's part of this module: the tests that start PostgreSQL.
mod on_postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hostile_revisions_on_postgres() {
        suite(Dialect::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn snapshot_heavy_runs_on_postgres() {
        snapshot_heavy(Dialect::Postgres).await;
    }
}
