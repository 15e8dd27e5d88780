//! Batches (contract section 9): projects built several a transaction, each keeping the
//! outcome it gets alone. The same fixture, a healthy crowd with one project of every
//! rejection (a revision missing among them), is run at `--batch-size 8` and at 1 on two
//! copies: every project ends the same way with the same digests, and the summary counts
//! projects, never batches. The crowd's projects share their packages' revisions, which a
//! PostgreSQL batch parses once. On PostgreSQL a project whose claim another executor holds through
//! the run is left out of its batch and reported as claimed elsewhere, and its batch commits.

use std::collections::BTreeMap;

use package_executor::coordinator::{Coordinator, LogObserver, RunReport, RunSettings, Stop};
use package_executor::report::Outcome;
use package_executor::store::{Dialect, Store};
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
    // The crowd's projects share their packages' revisions: a batch parsed each once for all
    // its projects, on either dialect (and still ended every project as alone, above).
    assert!(b.reused_revisions >= 40, "{b:?}");
    assert_eq!(one_by_one.batches.reused_revisions, 0);
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

/// A check the database makes of its own on one project's snapshot (a trigger the test owns):
/// the database refuses that project's every insert, as it would a forged snapshot.
const POISONED: &str = "p00003";

async fn poison(store: &Store) {
    let text = match store.dialect() {
        Dialect::Postgres => format!(
            "CREATE FUNCTION public.pe_test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'refused by the test''s own check' USING ERRCODE = 'check_violation'; END $$;
             CREATE TRIGGER pe_test_poison BEFORE INSERT ON ql3.tool_definition_snapshots
               FOR EACH ROW WHEN (NEW.project_id = '{POISONED}') EXECUTE FUNCTION public.pe_test_poison();"
        ),
        Dialect::Sqlite => format!(
            "CREATE TRIGGER pe_test_poison BEFORE INSERT ON ql3.tool_definition_snapshots
               WHEN NEW.project_id = '{POISONED}'
             BEGIN SELECT RAISE(ABORT, 'refused by the test''s own check'); END;"
        ),
    };
    db::script(store, &text).await;
}

/// Both databases loaded for [`every_kind_in_one_batch`].
async fn load_every_kind(batched: &Store, alone: &Store) {
    for store in [batched, alone] {
        load(store).await;
        poison(store).await;
    }
}

/// The healthy crowd with every rejection (a revision missing among them) and one project the
/// database refuses, in batches of 8 and one by one: each project ends as it does alone, every
/// healthy one publishes, and the summary counts projects. `held` names a project whose claim
/// another executor holds through the run, `drifting` one a control plane keeps re-activating
/// (PostgreSQL: SQLite has one writer, and a transaction there reads one snapshot throughout).
async fn every_kind_in_one_batch(
    batched: Store,
    alone: Store,
    held: Option<&str>,
    drifting: Option<&str>,
) {
    let with_batches = run_at(&batched, 8).await;
    let one_by_one = run_at(&alone, 1).await;
    let (b, a) = (ends(&with_batches.outcomes), ends(&one_by_one.outcomes));
    assert_eq!(b.len(), a.len());
    for (project, end) in &b {
        if Some(project.as_str()) == drifting {
            assert!(
                matches!(end.0.as_str(), "published" | "replayed" | "already-current")
                    || matches!(end.1.as_str(), "vector-drift" | "generation-drift"),
                "{project}: {end:?}"
            );
            continue;
        }
        assert_eq!(Some(end), a.get(project), "{project} ends as it does alone");
        let healthy =
            project.starts_with('p') && Some(project.as_str()) != held && project != POISONED;
        if healthy {
            assert_eq!(end.0, "published", "{project}: {end:?}");
        }
    }
    assert_eq!(b[POISONED].0, "unresolved", "{:?}", b[POISONED]);
    if let Some(held) = held {
        assert_eq!(b[held].1, "claimed-elsewhere", "{:?}", b[held]);
    }
    assert!(b.values().any(|e| e.1 == "revision-missing"), "{b:?}");
    // The poisoned project's batch failed as a whole, once for each of its attempts, and
    // was built again one by one; every other batch did its work.
    let tally = with_batches.batches;
    assert!(
        tally.failed >= 1 && tally.attempts > tally.failed + 3,
        "{tally:?}"
    );
    let s = &with_batches.summary;
    assert_eq!(s.projects_scanned, b.len() as u64, "{s:?}");
    let counted = s.published
        + s.replayed
        + s.already_current
        + s.claimed_elsewhere
        + s.rejected.total()
        + s.unresolved.total();
    assert_eq!(counted, b.len() as u64, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_in_one_batch_on_sqlite() {
    let (a, _da) = pg::fresh_sqlite().await;
    let (b, _db) = pg::fresh_sqlite().await;
    let (a, b) = (connect(&a).await, connect(&b).await);
    within(300, async {
        load_every_kind(&a, &b).await;
        every_kind_in_one_batch(a, b, None, None).await;
    })
    .await;
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

    /// Holds `project`'s claim as another executor would, until the transaction ends.
    async fn hold_claim(url: &str, project: &str) -> package_executor::store::Attempt<'static> {
        let holder = connect(&pg::as_login(url, "login_executor")).await;
        let mut held = holder.begin().await.unwrap();
        let locked: i64 = match &mut held {
            package_executor::store::Attempt::Pg(tx) => sqlx::query_scalar(
                "SELECT count(*) FROM (SELECT 1 FROM ql3.project_claims \
                 WHERE project_id = $1 FOR UPDATE) AS k",
            )
            .bind(project)
            .fetch_one(&mut **tx)
            .await
            .unwrap(),
            _ => unreachable!(),
        };
        assert_eq!(locked, 1);
        held
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_kind_in_one_batch() {
        let (url_a, url_b) = (pg::fresh_db().await, pg::fresh_db().await);
        let (batched, alone) = (connect(&url_a).await, connect(&url_b).await);
        within(300, async {
            let (held, drifting) = ("p00005", "p00007");
            load_every_kind(&batched, &alone).await;
            let claims = (
                hold_claim(&url_a, held).await,
                hold_claim(&url_b, held).await,
            );
            // A control plane keeps re-activating one project's first package, in the batched
            // database, until the run ends.
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let mutator = {
                let (store, stop) = (batched.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut flips = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        let generation = if flips.is_multiple_of(2) { 2 } else { 1 };
                        package_executor::sources::activate(
                            &store,
                            &format!("{drifting}-k0"),
                            generation,
                        )
                        .await
                        .unwrap();
                        flips += 1;
                    }
                    flips
                })
            };
            super::every_kind_in_one_batch(batched.clone(), alone, Some(held), Some(drifting))
                .await;
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            assert!(mutator.await.unwrap() > 0);
            claims.0.rollback().await.unwrap();
            claims.1.rollback().await.unwrap();
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_keep_each_projects_outcome() {
        let a = connect(&pg::fresh_db().await).await;
        let b = connect(&pg::fresh_db().await).await;
        within(300, super::batches_keep_each_projects_outcome(a, b)).await;
    }

    /// Revisions too large to come with the opening (two of about 160 KB a project, over its
    /// 256 KiB cap), shared by every project: a batch reads each in a statement of its own once,
    /// for its first project, and every project ends as it does alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shared_revisions_read_apart_are_read_once_a_batch() {
        let (batched, alone) = (
            connect(&pg::fresh_db().await).await,
            connect(&pg::fresh_db().await).await,
        );
        within(300, async {
            for store in [&batched, &alone] {
                import(store, &fixtures::many_projects(12, 2, 2, 160_000)).await;
            }
            let with_batches = run_at(&batched, 8).await;
            let one_by_one = run_at(&alone, 1).await;
            assert_eq!(ends(&with_batches.outcomes), ends(&one_by_one.outcomes));
            assert_eq!(with_batches.summary.published, 12);
            // Twelve projects in at most six batches: each batch's first project reads the two
            // revisions, the rest take them.
            let b = with_batches.batches;
            assert!(b.failed == 0 && b.reused_revisions >= 12, "{b:?}");
        })
        .await;
    }

    /// The reverse-order control plane (see `lock_order`), ten rounds at each of the batch sizes
    /// 8, 32, 512 and 1, one database: every round commits, no batch fails, and the changes are
    /// built by the next run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_control_plane_is_never_a_deadlock_victim() {
        let url = pg::fresh_db().await;
        let admin = connect(&url).await;
        let exec = connect(&pg::as_login(&url, "login_executor")).await;
        within(600, async {
            import(&admin, &fixtures::many_projects(4, 2, 2, 100)).await;
            let mut generation = 1;
            for batch_size in [8, 32, 512, 1] {
                for _ in 0..10 {
                    generation = 3 - generation;
                    super::lock_order::round(
                        &admin,
                        &exec,
                        ("p00000", "p00001"),
                        generation,
                        batch_size,
                    )
                    .await;
                    // Both changes committed after the executor read them: marked, and built now.
                    // (A generation activated again makes its earlier snapshot current again.)
                    let s = &db::run_all_at(&exec, false, batch_size).await;
                    assert_eq!(s.projects_scanned, 2, "{s:?}");
                    assert_eq!(s.published + s.already_current, 2, "{s:?}");
                    assert_eq!(db::marked(&exec).await, Vec::<String>::new());
                }
            }
        })
        .await;
    }

    /// A claim another executor holds through the run: its project is left out of each batch
    /// it lands in, without waiting, and tried again alone; the rest of its batch commits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_held_elsewhere_leaves_only_its_project_out() {
        let url = pg::fresh_db().await;
        let store = connect(&url).await;
        within(300, async {
            load(&store).await;
            let held = hold_claim(&url, "p00005").await;
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

/// A control plane's transaction that changes the batch's projects in the reverse order of the
/// batch (contract section 9.2: a batch never waits for a row lock while it holds another).
/// SQLite has one writer: a batch holds the file's write lock from its first write to its
/// commit and no row locks, so a control plane's transaction waits for it (or it for the
/// control plane's) whole, never row by row, and no deadlock can form there. PostgreSQL's row
/// locks can; `on_postgres::the_control_plane_is_never_a_deadlock_victim` shows the executor
/// never makes one.
mod lock_order {
    use super::*;
    use package_executor::coordinator::RunReport;
    use package_executor::exit::Exit;
    use sqlx::PgConnection;

    /// Activates generation `generation` of installation `installation` inside an open
    /// transaction, as a control plane does: the generations' statuses, then the head (whose
    /// triggers lock the project's mark until the transaction ends).
    async fn activate_in(tx: &mut PgConnection, installation: &str, generation: i64) {
        let other = 3 - generation;
        for text in [
            format!(
                "UPDATE ql3.package_generations SET status = 'superseded' \
                 WHERE installation_id = '{installation}' AND generation = {other}"
            ),
            format!(
                "UPDATE ql3.package_generations SET status = 'active' \
                 WHERE installation_id = '{installation}' AND generation = {generation}"
            ),
            format!(
                "UPDATE ql3.package_installations SET active_generation = {generation} \
                 WHERE installation_id = '{installation}'"
            ),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(text))
                .execute(&mut *tx)
                .await
                .unwrap();
        }
    }

    /// Whether a session of the executor's login waits for a lock now.
    async fn executor_waits(admin: &Store) -> bool {
        sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
             WHERE usename = 'login_executor' AND wait_event_type = 'Lock')",
        )
        .fetch_one(&admin.pg_pool().unwrap())
        .await
        .unwrap()
    }

    /// One round: the control plane activates a package of `b`, the executor builds the batch
    /// [`a`, `b`, …] while that transaction is open, and the control plane then activates a
    /// package of `a` (at once if the executor is seen waiting for a lock, which is when the
    /// old clearing of marks deadlocked) and commits. The commit must succeed, and the run must
    /// end without a failed batch or a project left unresolved.
    pub(super) async fn round(
        admin: &Store,
        exec: &Store,
        (a, b): (&str, &str),
        generation: i64,
        batch_size: usize,
    ) -> RunReport {
        let pool = admin.pg_pool().unwrap();
        let mut control = pool.begin().await.unwrap();
        activate_in(&mut control, &format!("{b}-k0"), generation).await;
        let observer = package_executor::coordinator::LogObserver;
        let settings = RunSettings {
            batch_size,
            concurrency: 1,
            ..db::settings()
        };
        let coordinator = Coordinator::new(exec.clone(), settings, Stop::default(), &observer);
        let run = coordinator.run();
        tokio::pin!(run);
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(5));
        let report = loop {
            tokio::select! {
                report = &mut run => break Some(report),
                _ = tick.tick() => if executor_waits(admin).await { break None },
            }
        };
        // The second half of the control plane's transaction, in the reverse order of the
        // batch's, then its commit: PostgreSQL aborted it with `deadlock detected` when the
        // executor waited for `b`'s mark while holding `a`'s.
        activate_in(&mut control, &format!("{a}-k0"), generation).await;
        control
            .commit()
            .await
            .expect("the control plane's transaction commits");
        let report = match report {
            Some(report) => report,
            None => run.await,
        };
        let s = &report.summary;
        assert_eq!(s.exit_code, Exit::Ok, "{s:?}");
        assert_eq!(report.batches.failed, 0, "{:?}", report.batches);
        report
    }
}
