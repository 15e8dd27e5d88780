//! What a control plane changes while a run is building (contract section 9): a project deleted
//! outright between the listing and its batch ends `vanished` (no snapshot, no mark, not a
//! failure), and a revision that arrives after its project was rejected `revision-missing` is
//! built in the same run, by a final probe. The changes are made from inside the run, at a
//! point the run itself reports (the observer's first listing, a project's outcome), on a
//! thread and a connection of their own, so nothing here waits on a clock.

use std::sync::Mutex;

use package_executor::coordinator::{
    Coordinator, LogObserver, Observer, RunReport, RunSettings, Stop,
};
use package_executor::exit::Exit;
use package_executor::report::Outcome;
use package_executor::store::Store;
use package_executor_testkit::db::{self, connect, import, marked, scalar};
use package_executor_testkit::{fixtures, pg, within};

use crate::store::contract::{late_fixture, late_revision, store_revision_by_sql};

/// The project deleted mid-run.
const GONE: &str = "p00004";

/// Runs `change` once, to its end, on a thread and runtime of its own (a connection of the
/// run's runtime cannot be used there), while the run waits for it.
fn blocking(change: impl FnOnce(tokio::runtime::Runtime) + Send) {
    std::thread::scope(|s| {
        s.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            change(runtime);
        })
        .join()
        .unwrap();
    });
}

/// Logs as a run does, and makes one change the first time `when` holds.
struct ChangeOnce {
    when: When,
    change: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

/// When the change is made: at the first project listed (`None`), or at an outcome.
type When = fn(Option<(&str, &Outcome)>) -> bool;

impl ChangeOnce {
    fn new(when: When, change: impl FnOnce() + Send + 'static) -> Self {
        Self {
            when,
            change: Mutex::new(Some(Box::new(change))),
        }
    }

    fn fire(&self, at: Option<(&str, &Outcome)>) {
        if (self.when)(at) {
            let change = self.change.lock().unwrap().take();
            if let Some(change) = change {
                change();
            }
        }
    }
}

impl Observer for ChangeOnce {
    fn outcome(&self, project_id: &str, o: &Outcome) {
        LogObserver.outcome(project_id, o);
        self.fire(Some((project_id, o)));
    }

    fn listed(&self, _n: usize) {
        self.fire(None);
    }
}

async fn run_with(store: &Store, settings: RunSettings, observer: &dyn Observer) -> RunReport {
    Coordinator::new(store.clone(), settings, Stop::default(), observer)
        .run()
        .await
}

/// Deletes a project outright, as a control plane removes a tenant: its heads, generations and
/// row, in one transaction.
fn delete_project(project: &str) -> String {
    format!(
        "BEGIN;
         UPDATE ql3.package_installations SET active_generation = NULL WHERE project_id = '{project}';
         DELETE FROM ql3.package_generations WHERE installation_id IN
           (SELECT installation_id FROM ql3.package_installations WHERE project_id = '{project}');
         DELETE FROM ql3.package_installations WHERE project_id = '{project}';
         DELETE FROM ql3.projects WHERE project_id = '{project}';
         COMMIT;"
    )
}

/// Ten projects listed in one page; the first listing (before any is handed to a worker)
/// deletes one of them. Its batch opens it gone: no snapshot row, `vanished` 1, no mark left,
/// exit 0, and every other project published.
async fn a_project_deleted_mid_batch_vanishes(url: String, batch_size: usize) {
    let store = connect(&url).await;
    import(&store, &fixtures::many_projects(10, 2, 2, 100)).await;
    let observer = ChangeOnce::new(
        |at| at.is_none(),
        move || blocking(|rt| rt.block_on(db::script_at(&url, &delete_project(GONE)))),
    );
    // One worker: the page is read whole before the first project is listed, so the deleted
    // project is handed out with the rest.
    let settings = RunSettings {
        batch_size,
        concurrency: 1,
        ..db::settings()
    };
    let report = run_with(&store, settings, &observer).await;
    let s = &report.summary;
    assert_eq!(report.outcomes.get(GONE), Some(&Outcome::Vanished), "{s:?}");
    assert_eq!(
        (s.vanished, s.published, s.projects_scanned),
        (1, 9, 10),
        "{s:?}"
    );
    assert_eq!(s.exit_code, Exit::Ok, "{s:?}");
    assert!(s.to_json().contains(r#""vanished":1"#), "{}", s.to_json());
    let rows = scalar(
        &store,
        &format!("SELECT COUNT(*) FROM ql3.tool_definition_snapshots WHERE project_id = '{GONE}'"),
    )
    .await;
    assert_eq!(rows, 0, "no snapshot is stored for a project without a row");
    assert_eq!(marked(&store).await, Vec::<String>::new());
}

/// Project `late` rejected `revision-missing` in the run's first pass; its revision is stored
/// at that outcome (marking it again). A final probe builds it in the same run, whichever
/// kind of pass: it ends published, nothing stays marked, and the run exits 0.
async fn a_revision_after_its_rejection_is_built_in_the_same_run(
    url: String,
    batch_size: usize,
    full_scan: bool,
) {
    let store = connect(&url).await;
    let revision = late_revision(serde_json::json!({}));
    import(&store, &late_fixture(&revision, false)).await;
    let observer = ChangeOnce::new(
        |at| at.is_some_and(|(p, o)| p == "late" && o.reason() == Some("revision-missing")),
        move || {
            blocking(|rt| {
                rt.block_on(async {
                    let admin = connect(&url).await;
                    store_revision_by_sql(&admin, &revision).await;
                    admin.close().await;
                })
            })
        },
    );
    let settings = RunSettings {
        batch_size,
        full_scan,
        ..db::settings()
    };
    let report = run_with(&store, settings, &observer).await;
    let s = &report.summary;
    assert_eq!(report.outcomes["late"].name(), "published", "{s:?}");
    assert!(s.final_probes >= 1 && s.rejected.is_empty(), "{s:?}");
    assert_eq!(s.exit_code, Exit::Ok, "{s:?}");
    assert_eq!(marked(&store).await, Vec::<String>::new());
}

const BATCHED: usize = package_executor::defaults::BATCH_SIZE as usize;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_deleted_mid_batch_vanishes_on_sqlite() {
    for batch_size in [BATCHED, 1] {
        let (url, _dir) = pg::fresh_sqlite().await;
        within(120, a_project_deleted_mid_batch_vanishes(url, batch_size)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_after_its_rejection_is_built_in_the_same_run_on_sqlite() {
    for (batch_size, full_scan) in [(BATCHED, false), (1, false), (BATCHED, true)] {
        let (url, _dir) = pg::fresh_sqlite().await;
        within(
            120,
            a_revision_after_its_rejection_is_built_in_the_same_run(url, batch_size, full_scan),
        )
        .await;
    }
}

mod on_postgres {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_project_deleted_mid_batch_vanishes() {
        for batch_size in [BATCHED, 1] {
            let url = pg::fresh_db().await;
            within(
                120,
                super::a_project_deleted_mid_batch_vanishes(url, batch_size),
            )
            .await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_revision_after_its_rejection_is_built_in_the_same_run() {
        for (batch_size, full_scan) in [(BATCHED, false), (1, false), (BATCHED, true)] {
            let url = pg::fresh_db().await;
            within(
                120,
                super::a_revision_after_its_rejection_is_built_in_the_same_run(
                    url, batch_size, full_scan,
                ),
            )
            .await;
        }
    }
}
