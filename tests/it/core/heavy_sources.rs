//! The heaviest source rows the contract allows, through `run`, on both dialects: 128 projects
//! of 128 packages, every id and name as long as its format allows, each generation approving
//! 256 permissions of 64 characters (contract sections 2 and 5). Each run's peak RSS (from
//! `/usr/bin/time -v`) is checked against the bound docs/contract.md states at its flags
//! (`memory_bound`), at eight flag sets: batches of 1, 32 and 512, concurrency 1, 2 and 4,
//! pages of 256 to 1,024. A batch holds its projects' observations until it commits, so these
//! are the rows that tested whether a batch's observations are counted.
//!
//! The database is loaded once per dialect and copied for each run (a PostgreSQL template, a
//! SQLite file), so every run is a cold one over the same rows.

use std::fmt::Write as _;

use package_executor::store::Dialect;
use package_executor_testkit::db::{connect, import, scalar};
use package_executor_testkit::{pg, within};

use super::hostile::{fresh, judged_run, report_to_file};

const PROJECTS: usize = 128;
const PACKAGES: usize = 128;
const PERMISSIONS: usize = 256;

/// (`--batch-size`, `--concurrency`, `--page-size`).
const FLAG_SETS: [(usize, usize, usize); 8] = [
    (32, 4, 256),
    (1, 1, 256),
    (1, 4, 1024),
    (32, 1, 1024),
    (32, 2, 512),
    (512, 1, 256),
    (512, 2, 512),
    (512, 4, 1024),
];

/// Package `k`'s name: 214 characters, the most the format allows.
fn package_name(k: usize) -> String {
    format!("@{}/k{k:0>111}", "s".repeat(100))
}

/// Package `k`'s revision (shared by every project that installs it): no tools, so that the
/// observations, not the snapshots, are what the run holds.
fn revision(k: usize) -> String {
    format!(
        r#"{{"schema":"qinglong/materialized-revision@v1","package":{{"name":"{}","version":"1.0.0"}},"tools":[]}}"#,
        package_name(k)
    )
}

/// The fixture, written as text (about 300 MB): the first project carries each revision's
/// text, the others name it by its digest.
fn fixture() -> Vec<u8> {
    let permissions: Vec<String> = (0..PERMISSIONS)
        .map(|j| format!("{:a<64}", format!("perm{j}.")))
        .collect();
    let approved = serde_json::to_string(&permissions).unwrap();
    let digests: Vec<String> = (0..PACKAGES)
        .map(|k| package_executor::model::Digest::of(revision(k).as_bytes()).to_string())
        .collect();
    let mut out = String::with_capacity(PROJECTS * PACKAGES * (approved.len() + 600));
    out.push_str(r#"{"schema":"package-executor/fixture@v1","projects":["#);
    for p in 0..PROJECTS {
        if p > 0 {
            out.push(',');
        }
        write!(
            out,
            r#"{{"projectId":"{:0>128}","packages":["#,
            format!("p{p}")
        )
        .unwrap();
        for (k, digest) in digests.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            let source = if p == 0 {
                format!(
                    r#""revisionText":{}"#,
                    serde_json::to_string(&revision(k)).unwrap()
                )
            } else {
                format!(r#""revisionDigest":"{digest}""#)
            };
            write!(
                out,
                r#"{{"packageName":"{}","installationId":"{:x<128}","generations":[{{"generation":1,"status":"active","approvedPermissions":{approved},{source}}}]}}"#,
                package_name(k),
                format!("i{p:03}-{k:03}-"),
            )
            .unwrap();
        }
        out.push_str("]}");
    }
    out.push_str("]}");
    out.into_bytes()
}

/// A loaded database of the dialect, and the folder that holds it (SQLite).
async fn loaded(dialect: Dialect) -> (String, Option<tempfile::TempDir>) {
    let (url, dir) = fresh(dialect).await;
    let store = connect(&url).await;
    import(&store, &fixture()).await;
    let heads = scalar(
        &store,
        "SELECT COUNT(*) FROM ql3.package_installations WHERE active_generation IS NOT NULL",
    )
    .await;
    assert_eq!(heads, (PROJECTS * PACKAGES) as i64);
    store.close().await;
    (url, dir)
}

/// A copy of the loaded database for run `n`, and what to remove after it.
async fn copy(url: &str, dialect: Dialect, n: usize) -> (String, Option<std::path::PathBuf>) {
    match dialect {
        Dialect::Postgres => {
            let from = url.rsplit('/').next().unwrap().split('?').next().unwrap();
            let to = format!("{from}_run{n}");
            (pg::clone_db(from, &to).await, None)
        }
        Dialect::Sqlite => {
            let path = url.strip_prefix("sqlite://").unwrap();
            let to = format!("{path}.run{n}");
            std::fs::copy(path, &to).unwrap();
            (format!("sqlite://{to}"), Some(to.into()))
        }
    }
}

async fn heavy_sources(dialect: Dialect) {
    let (url, _dir) = loaded(dialect).await;
    let budget = package_executor::defaults::MEMORY_BUDGET.value;
    let mut report = format!(
        "heavy source rows on {dialect} ({PROJECTS} projects × {PACKAGES} packages, ids and \
         names at their longest, {PERMISSIONS} approved permissions of 64 characters a \
         generation; the image's allocator settings):\n"
    );
    let mut over = 0;
    for (n, (batch, concurrency, page)) in FLAG_SETS.into_iter().enumerate() {
        let (run_url, file) = copy(&url, dialect, n).await;
        let flags = [
            ("--batch-size", batch.to_string()),
            ("--concurrency", concurrency.to_string()),
            ("--page-size", page.to_string()),
        ];
        let (summary, held) = judged_run(&run_url, &flags, budget, concurrency, &mut report).await;
        if let Some(file) = file {
            std::fs::remove_file(file).unwrap();
        }
        over += usize::from(!held);
        assert_eq!(summary["published"], PROJECTS, "{summary}");
    }
    writeln!(
        report,
        "  runs over the bound: {over} of {}",
        FLAG_SETS.len()
    )
    .unwrap();
    println!("{report}");
    report_to_file(&report);
    assert_eq!(over, 0, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_source_rows_on_sqlite() {
    within(1500, heavy_sources(Dialect::Sqlite)).await;
}

/// The `pg` tier's part of this module, on the system's server alone (PostgreSQL 15 in the test
/// command): what is measured is the executor's memory, which the server's major does not
/// change, and a run over these rows is four minutes of the tier.
mod on_postgres {
    mod system_server {
        use super::super::*;

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn heavy_source_rows_on_postgres() {
            within(1500, heavy_sources(Dialect::Postgres)).await;
        }
    }
}
