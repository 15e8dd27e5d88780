//! Batches (contract section 9): projects built several a transaction, each keeping the
//! outcome it gets alone. The same fixture, a healthy crowd with one project of every
//! rejection (a revision missing among them), is run at `--batch-size 8` and at 1 on two
//! copies: every project ends the same way with the same digests, and the summary counts
//! projects, never batches. On PostgreSQL a project whose claim another executor holds through
//! the run is left out of its batch and reported as claimed elsewhere, and its batch commits.

use std::collections::BTreeMap;

use package_executor::coordinator::{Coordinator, LogObserver, RunReport, RunSettings, Stop};
use package_executor::report::Outcome;
use package_executor::store::Store;
use package_executor_testkit::db::{self, connect, import};
use package_executor_testkit::{fixtures, pg, within};

async fn run_at(store: &Store, batch_size: usize) -> RunReport {
    let observer = LogObserver;
    Coordinator::new(
        store.clone(),
        RunSettings {
            batch_size,
            concurrency: 2,
            max_attempts: 2,
            full_scan: true,
            ..db::settings()
        },
        Stop::default(),
        &observer,
    )
    .run()
    .await
}

/// What a project ended with, comparable across runs: outcome, reason and digest.
fn ends(outcomes: &BTreeMap<String, Outcome>) -> BTreeMap<String, (String, String, String)> {
    outcomes
        .iter()
        .map(|(p, o)| {
            (
                p.clone(),
                (
                    o.name().to_owned(),
                    o.reason().unwrap_or_default().to_owned(),
                    o.snapshot_digest()
                        .map(|d| d.as_str().to_owned())
                        .unwrap_or_default(),
                ),
            )
        })
        .collect()
}

async fn load(store: &Store) {
    import(store, &fixtures::many_projects(40, 2, 2, 100)).await;
    import(store, &fixtures::every_rejection()).await;
}

/// The body on two fresh databases of one dialect: `batched` runs at 8, `alone` at 1.
async fn batches_keep_each_projects_outcome(batched: Store, alone: Store) {
    load(&batched).await;
    load(&alone).await;
    let with_batches = run_at(&batched, 8).await;
    let one_by_one = run_at(&alone, 1).await;
    assert_eq!(ends(&with_batches.outcomes), ends(&one_by_one.outcomes));
    // The batches did the work: none failed as a whole and was built again one by one.
    let b = with_batches.batches;
    assert!(b.attempts >= 5 && b.failed == 0, "{b:?}");
    assert_eq!(one_by_one.batches.attempts, 0);
    let projects = with_batches.outcomes.len() as u64;
    assert!(projects > 40, "{projects}");
    let s = &with_batches.summary;
    assert_eq!(s.projects_scanned, projects);
    assert_eq!(
        s.published + s.rejected.total() + s.unresolved.total(),
        projects,
        "{s:?}"
    );
    assert!(s.rejected.total() > 5, "{s:?}");
    // Replicas of different batch sizes converge: a second run at the other size changes
    // nothing.
    let again = run_at(&alone, 8).await;
    assert_eq!(again.summary.published, 0, "{:?}", again.summary);
    let again = run_at(&batched, 1).await;
    assert_eq!(again.summary.published, 0, "{:?}", again.summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_keep_each_projects_outcome_on_sqlite() {
    let (a, _da) = pg::fresh_sqlite().await;
    let (b, _db) = pg::fresh_sqlite().await;
    let (a, b) = (connect(&a).await, connect(&b).await);
    within(300, batches_keep_each_projects_outcome(a, b)).await;
}

mod on_postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_keep_each_projects_outcome() {
        let a = connect(&pg::fresh_db().await).await;
        let b = connect(&pg::fresh_db().await).await;
        within(300, super::batches_keep_each_projects_outcome(a, b)).await;
    }

    /// A claim another executor holds through the run: its project is left out of each batch
    /// it lands in, without waiting, and tried again alone; the rest of its batch commits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_held_elsewhere_leaves_only_its_project_out() {
        let url = pg::fresh_db().await;
        let store = connect(&url).await;
        within(300, async {
            load(&store).await;
            let holder = connect(&pg::as_login(&url, "login_executor")).await;
            let mut held = holder.begin().await.unwrap();
            let locked: i64 = match &mut held {
                package_executor::store::Attempt::Pg(tx) => sqlx::query_scalar(
                    "SELECT count(*) FROM (SELECT 1 FROM ql3.project_claims \
                     WHERE project_id = 'p00005' FOR UPDATE) AS k",
                )
                .fetch_one(&mut **tx)
                .await
                .unwrap(),
                _ => unreachable!(),
            };
            assert_eq!(locked, 1);
            let report = run_at(&store, 8).await;
            held.rollback().await.unwrap();
            assert_eq!(report.batches.failed, 0, "{:?}", report.batches);
            let mine = &report.outcomes["p00005"];
            assert_eq!(mine.reason(), Some("claimed-elsewhere"), "{mine:?}");
            assert_eq!(report.summary.claimed_elsewhere, 1, "{:?}", report.summary);
            for (p, o) in &report.outcomes {
                if p.starts_with('p') && p != "p00005" {
                    assert_eq!(o.name(), "published", "{p}: {o:?}");
                }
            }
            // Released, it is built like any other.
            let report = run_at(&store, 8).await;
            assert_eq!(report.outcomes["p00005"].name(), "published");
        })
        .await;
    }
}
