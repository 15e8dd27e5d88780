//! The storage contract: the same test bodies on a real PostgreSQL server and on real SQLite
//! files.

use package_executor_testkit::db;
use package_executor_testkit::pg;
use package_executor_testkit::within;

use db::*;
use package_executor::exit::Exit;
use package_executor::planner::{self, ActiveHead};
use package_executor::rejection::RejectionCode::{ForbiddenField, RevisionMissing};
use package_executor::report::Outcome;
use package_executor::sources;
use package_executor::store::{Dialect, Replay, Scope, Store};

/// The live heads of a project, read in a transaction of their own.
async fn live_heads(store: &Store, project: &str) -> Vec<ActiveHead> {
    let mut a = store.begin().await.unwrap();
    let heads = a.observe(project).await.unwrap();
    a.rollback().await.unwrap();
    heads.into_iter().map(|h| h.head).collect()
}

/// The snapshot a build of the project would append now, planned with the pure planner.
async fn planned(store: &Store, project: &str) -> planner::Snapshot {
    let heads = live_heads(store, project).await;
    let mut a = store.begin().await.unwrap();
    let digests: Vec<&str> = heads.iter().map(|h| h.revision_digest.as_str()).collect();
    let revisions: std::collections::BTreeMap<String, Vec<u8>> = a
        .revision_contents(&digests)
        .await
        .unwrap()
        .into_iter()
        .map(|(d, b)| (d, b.bytes().unwrap().to_vec()))
        .collect();
    a.rollback().await.unwrap();
    planner::plan(project, heads, |d| {
        revisions.get(d).map(|b| (b.len() as i64, b.as_slice()))
    })
    .unwrap()
}

/// The stores a contract body uses: `admin` plays the control plane and the DBA (and, for
/// trigger tests, the table owner); `exec` is the executor. On PostgreSQL the second variant
/// connects the executor as a login that is a member of `ql3_package_executor` only, so no
/// test passes merely because it ran as a superuser.
struct Stores {
    admin: Store,
    exec: Store,
    /// The executor's URL, for the binary.
    exec_url: String,
    /// The `--batch-size` of the body's runs: each dialect runs every body at the default and
    /// at one project a transaction.
    batch_size: usize,
}

impl Stores {
    /// A run of the executor over the marked projects (every project with `full_scan`).
    async fn run(&self, full_scan: bool) -> package_executor::report::RunSummary {
        run_all_at(&self.exec, full_scan, self.batch_size).await
    }
}

/// One project a transaction.
const ALONE: usize = 1;
/// The default batch.
const BATCHED: usize = package_executor::defaults::BATCH_SIZE as usize;

/// A SQLite variant's stores: a fresh file (kept while the second value lives), one login for
/// both roles, runs at `batch_size`.
async fn sqlite_stores(batch_size: usize) -> (Stores, impl Sized) {
    let (url, dir) = pg::fresh_sqlite().await;
    let admin = connect(&url).await;
    let stores = Stores {
        exec: admin.clone(),
        admin,
        exec_url: url,
        batch_size,
    };
    (stores, dir)
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            /// The `pg` tier's variants: the owner's login one project a transaction, the
            /// executor's login at the default batch.
            mod on_postgres {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    let url = super::super::pg::fresh_db().await;
                    let admin = super::super::connect(&url).await;
                    let stores = super::super::Stores {
                        exec: admin.clone(), admin, exec_url: url, batch_size: super::super::ALONE,
                    };
                    super::super::within(180, super::super::$name(stores)).await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres_executor_login() {
                    let url = super::super::pg::fresh_db().await;
                    let admin = super::super::connect(&url).await;
                    let exec_url = super::super::pg::as_login(&url, "login_executor");
                    let exec = super::super::connect(&exec_url).await;
                    let stores = super::super::Stores {
                        admin, exec, exec_url, batch_size: super::super::BATCHED,
                    };
                    super::super::within(180, super::super::$name(stores)).await;
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let (stores, _dir) = super::sqlite_stores(super::BATCHED).await;
                super::within(180, super::$name(stores)).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite_alone() {
                let (stores, _dir) = super::sqlite_stores(super::ALONE).await;
                super::within(180, super::$name(stores)).await;
            }
        }
    )*};
}

contract!(
    import_publish_replay,
    replay_mismatch_is_reported_not_overwritten,
    activation_lifecycle,
    removal_and_empty_project,
    current_proof_refuses_partial_matches,
    append_only_tables,
    generations_are_immutable,
    import_conflicts_abort_everything,
    format_checks_agree_with_the_model,
    open_and_append_steps,
    import_streams_all_or_nothing_and_idempotent,
    every_source_change_marks_its_project,
    a_mark_is_cleared_only_at_the_version_read,
    full_scan_finds_a_project_whose_mark_was_lost,
    large_revisions_build_like_small_ones,
    revisions_read_apart_build_like_inline,
    permission_arrays_are_checked_alike,
    a_dry_run_checks_everything_and_writes_nothing,
    verify_pairs_each_snapshot_with_its_own_sources,
    a_late_revision_is_built,
    a_revision_missing_row_of_an_older_build_never_stands,
    a_late_revision_rejected_for_its_content_stands,
    the_proof_finds_the_current_snapshot_among_a_long_history,
    the_conditional_door_answers_three_ways,
);

/// What `verify` finds, snapshot by snapshot, read page by page as the command reads them
/// (pages stopped after `max_bytes` of documents): (project, problems), in snapshot id order,
/// and the pages' sizes.
async fn verified_in(
    store: &Store,
    project: Option<&str>,
    max_bytes: i64,
) -> (Vec<(String, Vec<String>)>, Vec<usize>) {
    let mut a = store.begin().await.unwrap();
    let (mut out, mut pages, mut after) = (Vec::new(), Vec::new(), 0);
    loop {
        let page = a.snapshot_page(after, project, max_bytes).await.unwrap();
        let Some(last) = page.last() else { break };
        assert!(last.snapshot_id > after, "pages move forward");
        after = last.snapshot_id;
        pages.push(page.len());
        out.extend(
            page.iter()
                .map(|s| (s.project_id.clone(), package_executor::verify::problems(s))),
        );
    }
    a.rollback().await.unwrap();
    (out, pages)
}

async fn verified(store: &Store) -> Vec<(String, Vec<String>)> {
    let (out, pages) = verified_in(store, None, 1 << 30).await;
    assert_eq!(pages, [16, 16, 8], "16 a page when the bytes allow");
    out
}

/// `verify` reads a page's source rows in one statement: over several pages each snapshot gets
/// its own rows back (they differ per project, so a mix-up would not verify), and a source row
/// changed behind the append-only triggers is pinned on its snapshot alone.
async fn verify_pairs_each_snapshot_with_its_own_sources(s: Stores) {
    import(&s.admin, &fixtures::many_projects(40, 3, 1, 0)).await;
    assert_eq!(s.run(false).await.published, 40);
    let clean = verified(&s.exec).await;
    assert_eq!(clean.len(), 40, "every snapshot once, over three pages");
    assert!(clean.iter().all(|(_, p)| p.is_empty()), "{clean:?}");
    // A page stops once its documents hold the bytes asked for, but always takes one.
    let (one_each, pages) = verified_in(&s.exec, None, 1).await;
    assert_eq!((one_each, pages), (clean.clone(), vec![1; 40]));
    let size = scalar(
        &s.exec,
        "SELECT CAST(max(LENGTH(canonical_json)) AS BIGINT) FROM ql3.tool_definition_snapshots",
    )
    .await;
    let (two_each, pages) = verified_in(&s.exec, None, size + 1).await;
    assert_eq!(two_each, clean);
    assert!(
        pages.iter().all(|&n| n <= 2) && pages.len() >= 20,
        "{pages:?}"
    );

    // The database is thrown away after the test, so the triggers stay off.
    let off = match s.admin.dialect() {
        Dialect::Postgres => {
            "ALTER TABLE ql3.tool_definition_snapshot_sources DISABLE TRIGGER USER"
        }
        Dialect::Sqlite => "DROP TRIGGER tool_definition_snapshot_sources_no_update",
    };
    exec(&s.admin, off).await.unwrap();
    let changed = exec(
        &s.admin,
        "UPDATE ql3.tool_definition_snapshot_sources SET generation = 2 \
         WHERE package_name = 'pkg1.tools' AND snapshot_id = \
           (SELECT snapshot_id FROM ql3.tool_definition_snapshots WHERE project_id = 'p00021')",
    )
    .await
    .unwrap();
    assert_eq!(changed, 1);
    let found = verified(&s.exec).await;
    assert_eq!(found.len(), 40);
    let bad: Vec<_> = found.iter().filter(|(_, p)| !p.is_empty()).collect();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0].0, "p00021");
    assert!(
        bad[0].1.iter().any(|p| p.contains("source")),
        "{:?}",
        bad[0].1
    );
    // One project's pages hold its snapshots only.
    for (project, fails) in [("p00021", true), ("p00022", false)] {
        let (one, pages) = verified_in(&s.exec, Some(project), 1 << 30).await;
        assert_eq!(pages, [1], "{project}");
        assert_eq!(one[0].0, project);
        assert_eq!(!one[0].1.is_empty(), fails, "{one:?}");
    }
}

/// `sources import --dry-run`: the same checks as an import, the database's included, and
/// nothing written, marks included; its report is what the import then does.
async fn a_dry_run_checks_everything_and_writes_nothing(s: Stores) {
    import(&s.admin, DEMO).await;
    let fixture = |lock: &str, package: &str| {
        let projects: Vec<serde_json::Value> = (0..3)
            .map(|n| {
                serde_json::json!({"projectId": format!("dry-{n}"), "packages": [
                    {"packageName": package, "installationId": format!("dry-{n}-a"), "generations": [
                        {"generation": 1, "status": "active", "lockDigest": lock,
                         "revisionText": format!("{{\"n\":{n}}}")}]}]})
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schema": "package-executor/fixture@v1", "projects": projects}))
        .unwrap()
    };
    let zeros = format!("sha256:{}", "0".repeat(64));
    let good = fixture(&zeros, "a");
    let rows = source_rows(&s.admin).await;
    let marks = marked(&s.admin).await;
    let check =
        |bytes: &[u8]| sources::check_reader(&s.admin, std::io::Cursor::new(bytes.to_vec()));

    let checked = check(&good).await.unwrap();
    assert_eq!((checked.projects, checked.inserted), (3, 12));
    assert_eq!(source_rows(&s.admin).await, rows, "a dry run wrote rows");
    assert_eq!(marked(&s.admin).await, marks, "a dry run marked projects");
    // The database's own checks run: a package name its CHECK refuses.
    let err = check(&fixture(&zeros, "Bad Name")).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("project dry-0 package \"Bad Name\": the database refused the row"),
        "{err}"
    );

    let imported = import(&s.admin, &good).await;
    assert_eq!((imported.projects, imported.inserted), (3, 12));
    // Against what is stored now: nothing to insert, and a conflict is named as by an import.
    let again = check(&good).await.unwrap();
    assert_eq!((again.projects, again.inserted), (3, 0));
    let other = format!("sha256:{}", "1".repeat(64));
    let err = check(&fixture(&other, "a")).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("already stored with other digests"),
        "{err}"
    );
    assert_eq!(source_rows(&s.admin).await[0], rows[0] + 3);
}

/// Revisions that come with the first observation and revisions read by a statement of their
/// own (no budget free for them to come inline) give the snapshot the pure planner gives.
async fn revisions_read_apart_build_like_inline(s: Stores) {
    use package_executor::coordinator::{MemoryBudget, Step, attempt};
    import(&s.admin, DEMO).await;
    let mut session = s.exec.session();
    // 1 KiB of budget: never room for the inline cap, so every batch is read apart (a
    // reservation larger than the budget takes all of it and still runs).
    let tight = MemoryBudget::new(1024);
    let ample = MemoryBudget::new(package_executor::defaults::MEMORY_BUDGET.value);
    for (project, budget, kib) in [("demo-1", &tight, 1), ("demo-2", &ample, 96 << 10)] {
        let expected = planned(&s.exec, project).await;
        let step = attempt(&mut session, budget, project).await;
        let Step::Done(Outcome::Published { snapshot_digest }) = step else {
            panic!("{project}: {step:?}");
        };
        assert_eq!(snapshot_digest, Some(expected.snapshot_digest), "{project}");
        assert_eq!(
            budget.available_kib(),
            kib,
            "{project}: every byte returned"
        );
    }
}

async fn import_publish_replay(s: Stores) {
    let first = import(&s.admin, DEMO).await;
    assert!(first.inserted > 0);
    assert_eq!(
        import(&s.admin, DEMO).await.inserted,
        0,
        "a second import changes nothing"
    );

    let o = publish(&s.exec, "demo-1").await;
    assert!(matches!(o, Outcome::Published { .. }), "{o:?}");
    let digest = digest_of(&o);
    assert_eq!(
        current_digest(&s.exec, "demo-1").await,
        Some(digest.clone())
    );
    let again = publish(&s.exec, "demo-1").await;
    assert_eq!(
        again,
        Outcome::AlreadyCurrent {
            snapshot_digest: Some(digest.clone())
        }
    );

    // Exact replay: the same snapshot appended again is `replayed`, not a second row.
    let snapshot = planned(&s.exec, "demo-1").await;
    assert_eq!(snapshot.snapshot_digest.as_str(), digest);
    let mut a = s.exec.begin().await.unwrap();
    assert!(!a.append(&snapshot, None).await.unwrap().inserted);
    assert_eq!(a.replay_outcome(&snapshot).await.unwrap(), Replay::Exact);
    a.rollback().await.unwrap();
    assert_eq!(
        scalar(
            &s.admin,
            "SELECT COUNT(*) FROM ql3.tool_definition_snapshots"
        )
        .await,
        1
    );
    assert_eq!(
        scalar(
            &s.admin,
            "SELECT COUNT(*) FROM ql3.tool_definition_snapshot_sources"
        )
        .await,
        2
    );

    // The stored document is the planner's, byte for byte, and the committed time has millis.
    let current = s.exec.find_current("demo-1").await.unwrap().unwrap();
    assert_eq!(current.canonical_json, snapshot.canonical_json);
    assert_eq!(current.committed_at.len(), 24, "{}", current.committed_at);
    assert!(current.committed_at.ends_with('Z'));

    let rejected = publish(&s.exec, "demo-rejected").await;
    assert_eq!(rejected.reason(), Some("forbidden-field"));
    assert!(rejected.detail().unwrap().contains("handler"));
    assert_eq!(current_digest(&s.exec, "demo-rejected").await, None);
    assert_eq!(
        scalar(
            &s.admin,
            "SELECT COUNT(*) FROM ql3.tool_definition_snapshot_rejections"
        )
        .await,
        1
    );
    // Recorded once per vector; a second publish reads the record, not the revisions.
    assert_eq!(
        publish(&s.exec, "demo-rejected").await.reason(),
        Some("forbidden-field")
    );
    assert_eq!(
        scalar(
            &s.admin,
            "SELECT COUNT(*) FROM ql3.tool_definition_snapshot_rejections"
        )
        .await,
        1
    );
}

async fn replay_mismatch_is_reported_not_overwritten(s: Stores) {
    import(&s.admin, DEMO).await;
    // The digest the real build would give, found on a throwaway copy of the build.
    let heads = live_heads(&s.exec, "demo-2").await;
    let vector = planner::active_vector_digest("demo-2", &heads);
    let forged = "sha256:".to_owned() + &"ab".repeat(32);
    let blob = match s.admin.dialect() {
        Dialect::Postgres => "decode('7b7d', 'hex')",
        Dialect::Sqlite => "X'7B7D'",
    };
    // A row the database's own checks refuse (no source rows, a made-up document): only a
    // database whose owner switched them off can hold one, and the executor still fails closed.
    exec_unchecked(&s.admin, &format!(
        "INSERT INTO ql3.tool_definition_snapshots (project_id, active_vector_digest, definition_digest, \
         snapshot_digest, package_count, definition_count, canonical_json, source_key) \
         VALUES ('demo-2', '{vector}', '{forged}', '{forged}', 1, 0, {blob}, '0000000000000000')"
    )).await.unwrap();
    let o = publish(&s.exec, "demo-2").await;
    assert_eq!(o.name(), "integrity-violation", "{o:?}");
    assert_eq!(o.reason(), Some("replay-mismatch"));
    assert_eq!(
        scalar(
            &s.admin,
            "SELECT COUNT(*) FROM ql3.tool_definition_snapshots"
        )
        .await,
        1
    );
    assert_eq!(
        current_digest(&s.exec, "demo-2").await,
        None,
        "a snapshot without sources is never current"
    );
}

/// The pending projects in one range of the keyset, paged two at a time.
async fn pending_in(store: &Store, after: &str, through: Option<&str>) -> Vec<String> {
    let mut pending = Vec::new();
    let mut cursor = after.to_owned();
    loop {
        let page = store
            .page_through(&cursor, through, 2, Scope::Full)
            .await
            .unwrap();
        pending.extend(page.iter().cloned());
        match page.last() {
            Some(last) if page.len() == 2 => cursor.clone_from(last),
            _ => return pending,
        }
    }
}

/// The pending scan, paged two at a time, yields exactly the projects without a current
/// snapshot, in byte order.
async fn assert_pending_is_not_current(store: &Store, when: &str) {
    let pending = pending_in(store, "", None).await;
    let mut expected = Vec::new();
    for p in ["demo-1", "demo-2", "demo-empty", "demo-rejected"] {
        if current_digest(store, p).await.is_none() {
            expected.push(p.to_owned());
        }
    }
    assert_eq!(pending, expected, "{when}");
    // Read as several ranges of the keyset (as a run with several lanes does): together, in
    // order, the same projects, none twice.
    for parts in [2, 3, 8] {
        let points = store.split_points(parts, Scope::Full).await.unwrap();
        assert!(points.len() < parts, "{when}: {points:?}");
        if store.dialect() == Dialect::Postgres {
            assert!(!points.is_empty(), "{when}: PostgreSQL splits the keyset");
        }
        assert!(points.windows(2).all(|w| w[0] < w[1]), "{when}: {points:?}");
        let mut ranged = Vec::new();
        let mut after = String::new();
        for end in points.iter().map(Some).chain([None]) {
            ranged.extend(pending_in(store, &after, end.map(String::as_str)).await);
            if let Some(end) = end {
                after.clone_from(end);
            }
        }
        assert_eq!(
            ranged, expected,
            "{when}, {parts} ranges split at {points:?}"
        );
    }
}

async fn activation_lifecycle(s: Stores) {
    import(&s.admin, DEMO).await;
    assert_pending_is_not_current(&s.exec, "after import").await;
    let s1 = digest_of(&publish(&s.exec, "demo-1").await);
    assert_eq!(publish(&s.exec, "demo-empty").await.name(), "published");
    assert_pending_is_not_current(&s.exec, "after publishing two").await;
    // Generation 3 is staged; moving it through the pre-activation states keeps S1 current.
    for status in ["queued", "staged", "activating"] {
        exec(&s.admin, &format!(
            "UPDATE ql3.package_generations SET status = '{status}' WHERE installation_id = 'demo-1-github' AND generation = 3"
        )).await.unwrap();
        assert_eq!(
            current_digest(&s.exec, "demo-1").await,
            Some(s1.clone()),
            "during {status}"
        );
        assert_pending_is_not_current(&s.exec, status).await;
    }
    sources::activate(&s.admin, "demo-1-github", 3)
        .await
        .unwrap();
    assert_eq!(
        current_digest(&s.exec, "demo-1").await,
        None,
        "the old snapshot is not current once activation commits"
    );
    assert_pending_is_not_current(&s.exec, "after activation").await;
    let s2 = digest_of(&publish(&s.exec, "demo-1").await);
    assert_ne!(s1, s2);
    assert_eq!(current_digest(&s.exec, "demo-1").await, Some(s2.clone()));
    // Rolling back to generation 2 makes the vector of S1 live again: S1 is current again.
    sources::activate(&s.admin, "demo-1-github", 2)
        .await
        .unwrap();
    assert_eq!(current_digest(&s.exec, "demo-1").await, Some(s1.clone()));
    assert_pending_is_not_current(&s.exec, "after rollback").await;
    // Activation from a status that is not staged/activating/superseded is refused.
    exec(&s.admin, "UPDATE ql3.package_generations SET status = 'failed' WHERE installation_id = 'demo-1-github' AND generation = 3").await.unwrap();
    assert!(
        sources::activate(&s.admin, "demo-1-github", 3)
            .await
            .is_err()
    );
    assert!(
        sources::activate(&s.admin, "no-such-installation", 1)
            .await
            .is_err()
    );
}

async fn removal_and_empty_project(s: Stores) {
    import(&s.admin, DEMO).await;
    let s1 = digest_of(&publish(&s.exec, "demo-1").await);
    sources::remove(&s.admin, "demo-1", "acme.docs")
        .await
        .unwrap();
    assert_eq!(current_digest(&s.exec, "demo-1").await, None);
    let s2 = digest_of(&publish(&s.exec, "demo-1").await);
    assert_ne!(s1, s2);
    let doc = s
        .exec
        .find_current("demo-1")
        .await
        .unwrap()
        .unwrap()
        .canonical_json;
    let doc: serde_json::Value = serde_json::from_slice(&doc).unwrap();
    assert_eq!(doc["activeVector"].as_array().unwrap().len(), 1);
    assert!(
        sources::remove(&s.admin, "demo-1", "acme.docs")
            .await
            .is_ok(),
        "removing twice is harmless"
    );
    assert!(sources::remove(&s.admin, "demo-1", "nope").await.is_err());

    let empty = publish(&s.exec, "demo-empty").await;
    assert!(matches!(empty, Outcome::Published { .. }));
    let doc = s
        .exec
        .find_current("demo-empty")
        .await
        .unwrap()
        .unwrap()
        .canonical_json;
    let doc: serde_json::Value = serde_json::from_slice(&doc).unwrap();
    assert_eq!(doc["activeVector"], serde_json::json!([]));
    assert_eq!(doc["definitions"], serde_json::json!([]));
    // Removing every package leaves a legal empty snapshot too.
    sources::remove(&s.admin, "demo-1", "acme.github")
        .await
        .unwrap();
    let s3 = publish(&s.exec, "demo-1").await;
    assert!(matches!(s3, Outcome::Published { .. }));
    assert!(
        s.exec
            .find_current("missing-project")
            .await
            .unwrap()
            .is_none()
    );
}

async fn current_proof_refuses_partial_matches(s: Stores) {
    import(&s.admin, DEMO).await;
    let live = live_heads(&s.exec, "demo-1").await;
    assert_eq!(live.len(), 2);
    // Fake snapshots whose sources are a strict subset / superset of the live heads.
    let mut extra = live[0].clone();
    extra.package_name = "zzz.extra".into();
    extra.installation_id = "zzz-extra".into();
    let cases = [
        ("subset", vec![live[0].clone()]),
        ("superset", vec![live[0].clone(), live[1].clone(), extra]),
    ];
    for (label, sources) in cases {
        // A whole, well-formed snapshot of those sources (no definitions), as the database
        // requires of every row.
        let fake = planner::SnapshotBuilder::new("demo-1", sources)
            .finish()
            .unwrap();
        let mut a = s.exec.begin().await.unwrap();
        assert!(a.append(&fake, None).await.unwrap().inserted, "{label}");
        a.commit().await.unwrap();
        // Force package_count to the live count is impossible (append-only), so the subset row
        // has count 1 and the superset 3: both must be absent.
        assert_eq!(current_digest(&s.exec, "demo-1").await, None, "{label}");
    }
    let real = digest_of(&publish(&s.exec, "demo-1").await);
    assert_eq!(current_digest(&s.exec, "demo-1").await, Some(real.clone()));
    // A head pointing at a generation that is not active: absent, never a fallback.
    exec(&s.admin, "UPDATE ql3.package_generations SET status = 'superseded' WHERE installation_id = 'demo-1-docs' AND generation = 1").await.unwrap();
    assert_eq!(current_digest(&s.exec, "demo-1").await, None);
    exec(&s.admin, "UPDATE ql3.package_generations SET status = 'active' WHERE installation_id = 'demo-1-docs' AND generation = 1").await.unwrap();
    assert_eq!(current_digest(&s.exec, "demo-1").await, Some(real));
}

async fn append_only_tables(s: Stores) {
    import(&s.admin, DEMO).await;
    publish(&s.exec, "demo-1").await;
    publish(&s.exec, "demo-rejected").await;
    let tables = [
        "tool_definition_snapshots",
        "tool_definition_snapshot_sources",
        "tool_definition_snapshot_rejections",
    ];
    for t in tables {
        let col = if t == "tool_definition_snapshot_rejections" {
            "detail"
        } else {
            "project_id"
        };
        let col = if t == "tool_definition_snapshot_sources" {
            "lock_digest"
        } else {
            col
        };
        let update = exec(&s.admin, &format!("UPDATE ql3.{t} SET {col} = {col}"))
            .await
            .unwrap_err();
        assert!(
            update.contains("append-only") && update.contains("UPDATE"),
            "{t}: {update}"
        );
        let delete = exec(&s.admin, &format!("DELETE FROM ql3.{t}"))
            .await
            .unwrap_err();
        assert!(
            delete.contains("append-only") && delete.contains("DELETE"),
            "{t}: {delete}"
        );
    }
    match s.admin.dialect() {
        Dialect::Postgres => {
            for t in tables {
                let e = exec(&s.admin, &format!("TRUNCATE ql3.{t} CASCADE"))
                    .await
                    .unwrap_err();
                assert!(
                    e.contains("TRUNCATE") && e.contains("append-only"),
                    "{t}: {e}"
                );
            }
            // Replica mode does not switch the triggers off (ENABLE ALWAYS), even for the owner.
            let pool = &s.admin.pg_pool().unwrap();
            let mut tx = pool.begin().await.unwrap();
            sqlx::query("SET LOCAL session_replication_role = replica")
                .execute(&mut *tx)
                .await
                .unwrap();
            sqlx::query("SET LOCAL ROLE ql3_owner")
                .execute(&mut *tx)
                .await
                .unwrap();
            let e = sqlx::query("DELETE FROM ql3.tool_definition_snapshots")
                .execute(&mut *tx)
                .await
                .unwrap_err();
            assert!(e.to_string().contains("append-only"), "{e}");
            tx.rollback().await.unwrap();
            let mut tx = pool.begin().await.unwrap();
            sqlx::query("SET LOCAL session_replication_role = replica")
                .execute(&mut *tx)
                .await
                .unwrap();
            let e = sqlx::query("TRUNCATE ql3.tool_definition_snapshot_rejections")
                .execute(&mut *tx)
                .await
                .unwrap_err();
            assert!(e.to_string().contains("append-only"), "{e}");
            tx.rollback().await.unwrap();
        }
        Dialect::Sqlite => {
            let before = scalar(&s.admin, "SELECT COUNT(*) FROM tool_definition_snapshots").await;
            let digest_before = current_digest(&s.exec, "demo-1").await;
            let n = exec(&s.admin, "INSERT OR REPLACE INTO tool_definition_snapshots \
                (snapshot_id, project_id, active_vector_digest, definition_digest, snapshot_digest, package_count, definition_count, canonical_json, source_key) \
                SELECT snapshot_id, project_id, active_vector_digest, definition_digest, \
                'sha256:' || substr(hex(zeroblob(32)), 1, 64), package_count, definition_count, X'00', source_key \
                FROM tool_definition_snapshots").await;
            assert!(n.is_ok(), "{n:?}");
            exec(&s.admin, "REPLACE INTO tool_definition_snapshot_rejections (project_id, active_vector_digest, reason, detail) \
                SELECT project_id, active_vector_digest, 'source-invalid', 'x' FROM tool_definition_snapshot_rejections").await.unwrap();
            assert_eq!(
                scalar(&s.admin, "SELECT COUNT(*) FROM tool_definition_snapshots").await,
                before
            );
            assert_eq!(
                current_digest(&s.exec, "demo-1").await,
                digest_before,
                "INSERT OR REPLACE left the row unchanged"
            );
            assert_eq!(scalar(&s.admin, "SELECT COUNT(*) FROM tool_definition_snapshot_rejections WHERE reason = 'forbidden-field'").await, 1);
        }
    }
    let e = exec(
        &s.admin,
        "UPDATE ql3.materialized_revisions SET byte_length = byte_length",
    )
    .await
    .unwrap_err();
    assert!(e.contains("append-only"), "{e}");
}

async fn generations_are_immutable(s: Stores) {
    import(&s.admin, DEMO).await;
    for (col, value) in [
        (
            "lock_digest",
            "'sha256:0000000000000000000000000000000000000000000000000000000000000000'",
        ),
        (
            "revision_digest",
            "'sha256:0000000000000000000000000000000000000000000000000000000000000000'",
        ),
        (
            "generation_digest",
            "'sha256:0000000000000000000000000000000000000000000000000000000000000000'",
        ),
        ("approved_permissions", "'[\"everything\"]'"),
    ] {
        let e = exec(&s.admin, &format!("UPDATE ql3.package_generations SET {col} = {value} WHERE installation_id = 'demo-1-github'"))
            .await
            .unwrap_err();
        assert!(e.contains("immutable"), "{col}: {e}");
    }
    // Status moves.
    exec(&s.admin, "UPDATE ql3.package_generations SET status = 'failed' WHERE installation_id = 'demo-1-github' AND generation = 3").await.unwrap();
    // Format checks on source rows.
    for bad in [
        "INSERT INTO ql3.projects (project_id) VALUES ('bad id')",
        "INSERT INTO ql3.projects (project_id) VALUES ('')",
        "INSERT INTO ql3.package_installations (installation_id, project_id, package_name) VALUES ('i-x', 'demo-1', 'Upper')",
        "INSERT INTO ql3.package_installations (installation_id, project_id, package_name) VALUES ('i-y', 'demo-1', '@a/b/c')",
        "INSERT INTO ql3.package_generations (installation_id, generation, status, generation_digest, lock_digest, revision_digest) VALUES ('demo-1-docs', 0, 'staged', 'sha256:0000000000000000000000000000000000000000000000000000000000000000', 'sha256:0000000000000000000000000000000000000000000000000000000000000000', 'sha256:0000000000000000000000000000000000000000000000000000000000000000')",
        "INSERT INTO ql3.package_generations (installation_id, generation, status, generation_digest, lock_digest, revision_digest) VALUES ('demo-1-docs', 9, 'staged', 'sha256:ABC', 'sha256:0000000000000000000000000000000000000000000000000000000000000000', 'sha256:0000000000000000000000000000000000000000000000000000000000000000')",
        "INSERT INTO ql3.package_generations (installation_id, generation, status, generation_digest, lock_digest, revision_digest, approved_permissions) VALUES ('demo-1-docs', 9, 'staged', 'sha256:0000000000000000000000000000000000000000000000000000000000000000', 'sha256:0000000000000000000000000000000000000000000000000000000000000000', 'sha256:0000000000000000000000000000000000000000000000000000000000000000', '[\"a\",\"a\"]')",
        "INSERT INTO ql3.package_generations (installation_id, generation, status, generation_digest, lock_digest, revision_digest) VALUES ('demo-1-docs', 9, 'weird', 'sha256:0000000000000000000000000000000000000000000000000000000000000000', 'sha256:0000000000000000000000000000000000000000000000000000000000000000', 'sha256:0000000000000000000000000000000000000000000000000000000000000000')",
    ] {
        assert!(exec(&s.admin, bad).await.is_err(), "accepted: {bad}");
    }
    exec(&s.admin, "INSERT INTO ql3.package_installations (installation_id, project_id, package_name) VALUES ('i-z', 'demo-1', '@scope/pkg-1.x_y')").await.unwrap();
}

/// The coordinator's combined steps (one statement each on PostgreSQL) read what the single
/// queries read, and honour a claim held by another session.
async fn open_and_append_steps(s: Stores) {
    import(&s.admin, DEMO).await;
    let mut a = s.exec.begin().await.unwrap();
    let opening = a.open("demo-1").await.unwrap();
    assert!(opening.claimed);
    assert_eq!(opening.current, None);
    assert_eq!(opening.heads, a.observe("demo-1").await.unwrap());
    assert!(!opening.heads.is_empty());
    for h in &opening.heads {
        let stored = opening.lengths[&h.head.revision_digest];
        assert_eq!(stored.byte_length, stored.actual_length);
    }
    assert!(opening.rejections.is_empty());
    assert!(opening.inline.is_empty(), "asked for no contents");
    // Imported, so marked: the opening carries the version the plain read finds.
    assert!(opening.mark.is_some());
    assert_eq!(opening.mark, a.mark_version("demo-1").await.unwrap());
    let empty = a.open("demo-empty").await.unwrap();
    assert!(empty.claimed && empty.heads.is_empty() && empty.lengths.is_empty());
    a.rollback().await.unwrap();

    // Revisions within the cap come with the observation, all of them or none, byte for byte
    // as stored.
    let total: i64 = opening.lengths.values().map(|l| l.actual_length).sum();
    let mut a = s.exec.begin().await.unwrap();
    let within = a.open_with("demo-1", Some(total as u64)).await.unwrap();
    let over = a.open_with("demo-1", Some(total as u64 - 1)).await.unwrap();
    assert_eq!(within.heads, opening.heads);
    assert_eq!(within.lengths, opening.lengths);
    assert!(over.inline.is_empty(), "one byte over the cap: none inline");
    assert_eq!(within.inline.len(), opening.heads.len());
    for h in &opening.heads {
        let digest = &h.head.revision_digest;
        let stored = a.revision_contents(&[digest.as_str()]).await.unwrap();
        assert_eq!(
            within.inline[digest],
            stored[digest].bytes().unwrap(),
            "{digest}"
        );
    }
    a.rollback().await.unwrap();

    // The append's second observation equals the first, and the row lands only on commit.
    let snapshot = planned(&s.exec, "demo-1").await;
    let mut a = s.exec.begin().await.unwrap();
    let appending = a.append(&snapshot, None).await.unwrap();
    assert!(appending.inserted);
    assert_eq!(appending.second, opening.heads);
    a.rollback().await.unwrap();
    assert_eq!(current_digest(&s.exec, "demo-1").await, None, "rolled back");
    let mut a = s.exec.begin().await.unwrap();
    assert!(a.append(&snapshot, None).await.unwrap().inserted);
    a.commit().await.unwrap();
    assert_eq!(
        current_digest(&s.exec, "demo-1").await.as_ref(),
        Some(&snapshot.snapshot_digest)
    );
    let mut a = s.exec.begin().await.unwrap();
    let again = a.append(&snapshot, None).await.unwrap();
    assert!(!again.inserted, "both unique keys arbitrate");
    assert_eq!(a.replay_outcome(&snapshot).await.unwrap(), Replay::Exact);
    assert_eq!(
        a.open("demo-1").await.unwrap().current.as_ref(),
        Some(&snapshot.snapshot_digest)
    );
    a.rollback().await.unwrap();
    assert_eq!(partial_snapshots(&s.exec).await, 0);

    // A recorded rejection comes back with the opening, keyed by its vector.
    let rejected = publish(&s.exec, "demo-rejected").await;
    assert!(matches!(rejected, Outcome::Rejected { .. }), "{rejected:?}");
    let mut a = s.exec.begin().await.unwrap();
    let opening = a.open("demo-rejected").await.unwrap();
    let heads: Vec<_> = opening.heads.iter().map(|o| o.head.clone()).collect();
    let vector = planner::active_vector_digest("demo-rejected", &heads);
    assert!(opening.rejections.contains_key(&vector), "{opening:?}");
    // The same reasons and details as the plain read.
    assert_eq!(
        opening.rejections,
        a.project_rejections("demo-rejected").await.unwrap()
    );
    a.rollback().await.unwrap();

    // PostgreSQL: a claim held by another session means nothing else is read.
    if s.exec.dialect() == Dialect::Postgres {
        let pool = s.admin.pg_pool().unwrap();
        let mut holder = pool.begin().await.unwrap();
        // A claim is a row lock on the project's claim row (migration 11).
        let held: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM ql3.project_claims WHERE project_id = 'demo-2' FOR UPDATE)",
        )
        .fetch_one(&mut *holder)
        .await
        .unwrap();
        assert!(held);
        let mut a = s.exec.begin().await.unwrap();
        let opening = a.open("demo-2").await.unwrap();
        assert!(!opening.claimed);
        assert!(opening.heads.is_empty() && opening.current.is_none());
        a.rollback().await.unwrap();
        assert_eq!(
            publish(&s.exec, "demo-2").await.name(),
            "unresolved",
            "claimed elsewhere"
        );
        holder.rollback().await.unwrap();
        assert_eq!(publish(&s.exec, "demo-2").await.name(), "published");
    }
}

/// The database's format checks accept exactly what the model's validators accept, at every
/// boundary (the PostgreSQL checks are written without bounded repetition, for speed).
async fn format_checks_agree_with_the_model(s: Stores) {
    use package_executor::model::{is_digest, is_installation_id, is_project_id};
    import(&s.admin, DEMO).await;
    let hex64 = "0123456789abcdef".repeat(4);
    let ids = [
        String::new(),
        "a".into(),
        "A.b_c-d".into(),
        "x:y".into(),
        "a b".into(),
        "a\n".into(),
        "\u{e9}".into(),
        "a".repeat(128),
        "a".repeat(129),
        format!("{}\u{e9}", "a".repeat(127)),
    ];
    for (n, id) in ids.iter().enumerate() {
        let project = exec(
            &s.admin,
            &format!("INSERT INTO ql3.projects (project_id) VALUES ('{id}')"),
        )
        .await;
        assert_eq!(
            project.is_ok(),
            is_project_id(id),
            "project id {id:?}: {project:?}"
        );
        let installation = exec(&s.admin, &format!(
            "INSERT INTO ql3.package_installations (installation_id, project_id, package_name) VALUES ('{id}', 'demo-1', 'p{n}')"
        )).await;
        assert_eq!(
            installation.is_ok(),
            is_installation_id(id),
            "installation id {id:?}: {installation:?}"
        );
    }
    let digests = [
        format!("sha256:{hex64}"),
        format!("sha256:{}", &hex64[1..]),
        format!("sha256:{hex64}0"),
        format!("sha256:{}", hex64.to_uppercase()),
        format!("sha256:{}g", &hex64[1..]),
        format!("SHA256:{hex64}"),
        format!("sha256:{hex64}\n"),
        format!("sha512:{hex64}"),
        String::new(),
    ];
    for d in &digests {
        let r = exec(&s.admin, &format!(
            "INSERT INTO ql3.materialized_revisions (revision_digest, content, byte_length) VALUES ('{d}', {}, 0)",
            if s.admin.dialect() == Dialect::Postgres { "'\\x'::bytea" } else { "X''" }
        )).await;
        assert_eq!(r.is_ok(), is_digest(d), "digest {d:?}: {r:?}");
    }
}

/// Approved permissions must be a JSON array of at most 256 distinct permissions (contract
/// section 5: each `^[a-z][a-z0-9._:-]{0,63}$`), whatever its length: the SQLite trigger
/// compares short arrays in pairs and counts distinct values in long ones, and both dialects
/// accept and refuse the same arrays.
async fn permission_arrays_are_checked_alike(s: Stores) {
    import(&s.admin, DEMO).await;
    let list = |n: usize, dup: Option<(usize, usize)>| {
        let mut items: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
        if let Some((from, to)) = dup {
            items[to] = items[from].clone();
        }
        serde_json::to_string(&items).unwrap()
    };
    let cases: Vec<(String, bool)> = vec![
        ("[]".into(), true),
        (r#"["a"]"#.into(), true),
        (r#"["a","A"]"#.into(), false),
        (r#"["a","b.c:d_e-f9"]"#.into(), true),
        (r#"["9a"]"#.into(), false),
        (r#"[""]"#.into(), false),
        (r#"["a b"]"#.into(), false),
        (r#"["\u00e9"]"#.into(), false),
        (serde_json::to_string(&["a".repeat(64)]).unwrap(), true),
        (serde_json::to_string(&["a".repeat(65)]).unwrap(), false),
        (list(256, None), true),
        (list(257, None), false),
        (r#"["a","a"]"#.into(), false),
        (r#"["a","\u0061"]"#.into(), false),
        (r#"["a",1]"#.into(), false),
        (r#"[1]"#.into(), false),
        (r#"[null]"#.into(), false),
        (r#"[["a"]]"#.into(), false),
        (r#"{"a":"b"}"#.into(), false),
        (r#""a""#.into(), false),
        ("not json".into(), false),
        (list(16, None), true),
        (list(16, Some((0, 15))), false),
        (list(16, Some((7, 8))), false),
        (list(17, None), true),
        (list(17, Some((0, 16))), false),
        (list(40, None), true),
        (list(40, Some((3, 39))), false),
    ];
    for (n, (perms, ok)) in cases.iter().enumerate() {
        let r = exec(&s.admin, &format!(
            "INSERT INTO ql3.package_generations (installation_id, generation, status, generation_digest, lock_digest, revision_digest, approved_permissions) VALUES ('demo-1-docs', {}, 'staged', {D}, {D}, {D}, '{}')",
            100 + n,
            perms.replace('\'', "''")
        )).await;
        assert_eq!(r.is_ok(), *ok, "approved permissions {perms}: {r:?}");
    }
}

async fn import_conflicts_abort_everything(s: Stores) {
    import(&s.admin, DEMO).await;
    let before = scalar(&s.admin, "SELECT COUNT(*) FROM ql3.projects").await;
    // A new project plus a conflicting immutable column on an existing generation.
    let text = String::from_utf8(DEMO.to_vec()).unwrap();
    let conflicting = text
        .replacen(
            "\"projectId\": \"demo-empty\"",
            "\"projectId\": \"brand-new\"",
            1,
        )
        .replacen(
            "\"approvedPermissions\": [\n        \"network\"\n       ]",
            "\"approvedPermissions\": [\"other\"]",
            1,
        );
    assert_ne!(conflicting, text);
    let err = sources::import_bytes(&s.admin, conflicting.as_bytes())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("immutable"), "{err}");
    assert_eq!(
        scalar(&s.admin, "SELECT COUNT(*) FROM ql3.projects").await,
        before,
        "all or nothing"
    );
    // Missing revision needs a digest; revisionText is stored raw.
    let missing = br#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"m","packages":[{"packageName":"a","installationId":"m-a","generations":[{"generation":1,"status":"active"}]}]}]}"#;
    assert!(sources::import_bytes(&s.admin, missing).await.is_err());
    let raw = br#"{"schema":"package-executor/fixture@v1","projects":[{"projectId":"m","packages":[{"packageName":"a","installationId":"m-a","generations":[{"generation":1,"status":"active","revisionText":"not json"}]}]}]}"#;
    sources::import_bytes(&s.admin, raw).await.unwrap();
    assert_eq!(
        publish(&s.exec, "m").await.reason(),
        Some("revision-malformed")
    );
    assert!(sources::parse_fixture(br#"{"schema":"nope","projects":[]}"#).is_err());
}

use package_executor_testkit::fixtures;

/// Rows in the four source tables.
async fn source_rows(store: &Store) -> [i64; 4] {
    let mut out = [0; 4];
    for (i, t) in [
        "projects",
        "package_installations",
        "package_generations",
        "materialized_revisions",
    ]
    .iter()
    .enumerate()
    {
        out[i] = scalar(store, &format!("SELECT COUNT(*) FROM ql3.{t}")).await;
    }
    out
}

/// A fixture of several batches (400 projects, 4,400 rows) with one more project at the end.
fn with_last_project(last: serde_json::Value) -> Vec<u8> {
    let mut f: serde_json::Value =
        serde_json::from_slice(&fixtures::many_projects(400, 2, 1, 50)).unwrap();
    f["projects"].as_array_mut().unwrap().push(last);
    serde_json::to_vec(&f).unwrap()
}

async fn import_streams_all_or_nothing_and_idempotent(s: Stores) {
    let late = |package: &str, installation: &str| {
        serde_json::json!({"projectId": "zz-last", "packages": [{"packageName": package,
            "installationId": installation, "generations": [{"generation": 1,
            "status": "active", "revisionText": "{}"}]}]})
    };
    // Each bad last project leaves nothing of the 400 before it, and the error names it.
    let mut broken = with_last_project(late("fine", "zz-i"));
    broken.truncate(broken.len() - 3);
    broken.extend_from_slice(b"]}");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("bad JSON at the end", broken, "not valid JSON"),
        (
            "a refused package name",
            with_last_project(late("Bad Name", "zz-i")),
            "project zz-last package \"Bad Name\": the database refused the row",
        ),
        (
            "an installation id of another project",
            with_last_project(late("fine", "p00000-k0")),
            "project zz-last package fine: installation p00000-k0 already exists for project p00000",
        ),
        (
            "two active generations",
            with_last_project(serde_json::json!({"projectId": "zz-last", "packages": [
                {"packageName": "a", "installationId": "zz-a", "generations": [
                    {"generation": 1, "status": "active", "revisionText": "x"},
                    {"generation": 2, "status": "active", "revisionText": "y"}]}]})),
            "more than one generation is active",
        ),
    ];
    for (what, bytes, want) in cases {
        let err = sources::import_bytes(&s.admin, &bytes).await.unwrap_err();
        assert!(err.to_string().contains(want), "{what}: {err}");
        assert_eq!(
            source_rows(&s.admin).await,
            [0; 4],
            "{what}: all or nothing"
        );
    }
    // A good file, then the same file again: the second import changes nothing.
    let good = with_last_project(late("fine", "zz-i"));
    let first = sources::import_bytes(&s.admin, &good).await.unwrap();
    let rows = source_rows(&s.admin).await;
    // Revisions are shared between projects: four of the 400, and the last one's.
    assert_eq!(rows, [401, 801, 1601, 5]);
    assert_eq!(first.projects, 401);
    assert_eq!(first.inserted as i64, rows.iter().sum::<i64>());
    if s.admin.dialect() == Dialect::Sqlite {
        // The import's larger page cache is given back to the pooled connection.
        assert_eq!(scalar(&s.admin, "PRAGMA cache_size").await, -2000);
    }
    let again = sources::import_bytes(&s.admin, &good).await.unwrap();
    assert_eq!((again.projects, again.inserted), (401, 0));
    assert_eq!(source_rows(&s.admin).await, rows);
    // A late conflict with what is stored leaves what is stored, and adds nothing.
    let changed = String::from_utf8(good)
        .unwrap()
        .replace(r#""revisionText":"{}""#, r#""revisionText":"{}","lockDigest":"sha256:0000000000000000000000000000000000000000000000000000000000000000""#);
    let mut extra: serde_json::Value = serde_json::from_str(&changed).unwrap();
    extra["projects"]
        .as_array_mut()
        .unwrap()
        .insert(0, late("new", "zz-new"));
    extra["projects"][0]["projectId"] = "aa-first".into();
    let err = sources::import_bytes(&s.admin, &serde_json::to_vec(&extra).unwrap())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(
            "project zz-last package fine generation 1: already stored with other digests"
        ),
        "{err}"
    );
    assert_eq!(source_rows(&s.admin).await, rows);
    // A second installation of a stored package, under a new id: the unique key refuses it,
    // and the refusal names the row and the stored id (not a retryable error) on both dialects.
    let twin = with_last_project(late("fine", "zz-twin"));
    let err = sources::import_bytes(&s.admin, &twin).await.unwrap_err();
    assert!(
        err.to_string().contains(
            "project zz-last package fine: the project already has this package, as installation zz-i"
        ),
        "{err}"
    );
    assert!(!err.is_transient(), "{err:?}");
    assert_eq!(source_rows(&s.admin).await, rows);
}

async fn snapshots_of(store: &Store) -> Vec<(String, String, String, String, Vec<u8>)> {
    let mut a = store.begin().await.unwrap();
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = a.snapshot_page(after, None, 1 << 30).await.unwrap();
        let Some(last) = page.last() else { break };
        after = last.snapshot_id;
        for s in page {
            out.push((
                s.project_id,
                s.snapshot_digest,
                s.active_vector_digest,
                s.definition_digest,
                s.canonical_json,
            ));
        }
    }
    a.rollback().await.unwrap();
    out.sort();
    out
}

/// An empty PostgreSQL database `name` (not the migrated template) and an empty SQLite file,
/// with the directory that holds the file.
async fn unmigrated(name: &str) -> (Store, Store, tempfile::TempDir) {
    let cluster = pg::cluster();
    let admin = connect(&cluster.url("postgres")).await;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin.pg_pool().unwrap())
        .await
        .unwrap();
    admin.close().await;
    let pg = connect(&cluster.url(name)).await;
    let dir = tempfile::tempdir().unwrap();
    let lite = connect(&format!("sqlite://{}", dir.path().join("m.db").display())).await;
    (pg, lite, dir)
}

/// A well-formed digest, for rows whose digests are never checked.
const D: &str = "'sha256:0000000000000000000000000000000000000000000000000000000000000000'";

/// Runs until nothing is marked, and checks that it is so.
async fn settle(s: &Stores) {
    let summary = s.run(false).await;
    assert_eq!(summary.exit_code, Exit::Ok, "{summary:?}");
    assert_eq!(marked(&s.exec).await, Vec::<String>::new(), "{summary:?}");
}

/// Every kind of source change marks exactly its project, whether it is made by our `sources`
/// commands or by plain SQL as a control plane would, and a run then clears the mark.
async fn every_source_change_marks_its_project(s: Stores) {
    import(&s.admin, DEMO).await;
    assert_eq!(
        marked(&s.exec).await,
        ["demo-1", "demo-2", "demo-empty", "demo-rejected"],
        "an import marks what it wrote"
    );
    settle(&s).await;
    // The head of demo-1 lacks its revision: rejected now, and marked when the row arrives.
    let missing_text = "{\"schema\":\"qinglong/materialized-revision@v1\",\"package\":{\"name\":\"late.pkg\",\"version\":\"1.0.0\"},\"tools\":[]}";
    let missing_digest = package_executor::model::Digest::of(missing_text.as_bytes());
    let late = format!(
        r#"{{"schema":"package-executor/fixture@v1","projects":[{{"projectId":"late","packages":[{{"packageName":"late.pkg","installationId":"late-1","generations":[{{"generation":1,"status":"active","revisionDigest":"{missing_digest}"}}]}}]}}]}}"#
    );
    import(&s.admin, late.as_bytes()).await;
    assert_eq!(marked(&s.exec).await, ["late"]);
    assert_eq!(
        publish(&s.exec, "late").await.reason(),
        Some("revision-missing")
    );
    settle(&s).await;

    let bytes_literal = match s.admin.dialect() {
        Dialect::Postgres => format!("convert_to('{missing_text}', 'UTF8')"),
        Dialect::Sqlite => format!("CAST('{missing_text}' AS BLOB)"),
    };
    let cases: Vec<(&str, String, &str)> = vec![
        ("a project", "INSERT INTO ql3.projects (project_id) VALUES ('fresh')".into(), "fresh"),
        (
            "an installation",
            "INSERT INTO ql3.package_installations (installation_id, project_id, package_name, active_generation) VALUES ('demo-2-extra', 'demo-2', 'extra.pkg', NULL)".into(),
            "demo-2",
        ),
        (
            "a generation",
            format!("INSERT INTO ql3.package_generations (installation_id, generation, status, generation_digest, lock_digest, revision_digest, approved_permissions) VALUES ('demo-1-docs', 2, 'staged', {D}, {D}, {D}, '[]')"),
            "demo-1",
        ),
        (
            "a status",
            "UPDATE ql3.package_generations SET status = 'failed' WHERE installation_id = 'demo-1-github' AND generation = 1".into(),
            "demo-1",
        ),
        (
            "a head moved by SQL",
            "UPDATE ql3.package_installations SET active_generation = NULL WHERE installation_id = 'demo-rejected-shady'".into(),
            "demo-rejected",
        ),
        (
            "a revision arriving for a head that lacked it",
            format!("INSERT INTO ql3.materialized_revisions (revision_digest, content, byte_length) VALUES ('{missing_digest}', {bytes_literal}, {})", missing_text.len()),
            "late",
        ),
        (
            "an installation deleted",
            "DELETE FROM ql3.package_installations WHERE installation_id = 'demo-2-extra'".into(),
            "demo-2",
        ),
    ];
    for (what, statement, project) in cases {
        exec(&s.admin, &statement)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(marked(&s.exec).await, [project], "{what}");
        settle(&s).await;
    }
    // The arrival marked the project, and the run built it: `revision-missing` was a condition,
    // never recorded (contract section 7).
    assert!(current_digest(&s.exec, "late").await.is_some());
    // The sources commands: activation and removal.
    sources::activate(&s.admin, "demo-1-github", 3)
        .await
        .unwrap();
    assert_eq!(marked(&s.exec).await, ["demo-1"], "activation");
    settle(&s).await;
    sources::remove(&s.admin, "demo-2", "@acme/slack")
        .await
        .unwrap();
    assert_eq!(marked(&s.exec).await, ["demo-2"], "removal");
    settle(&s).await;
    // A deleted project takes its mark with it.
    exec(
        &s.admin,
        "DELETE FROM ql3.projects WHERE project_id = 'fresh'",
    )
    .await
    .unwrap();
    exec(
        &s.admin,
        "INSERT INTO ql3.projects (project_id) VALUES ('gone')",
    )
    .await
    .unwrap();
    exec(
        &s.admin,
        "DELETE FROM ql3.projects WHERE project_id = 'gone'",
    )
    .await
    .unwrap();
    assert_eq!(marked(&s.exec).await, Vec::<String>::new());
}

/// The executor clears a mark only if it still holds the version read when the attempt opened:
/// a change committed after that read leaves the project marked for the next run.
async fn a_mark_is_cleared_only_at_the_version_read(s: Stores) {
    import(&s.admin, DEMO).await;
    settle(&s).await;
    exec(&s.admin, "UPDATE ql3.package_generations SET status = 'queued' WHERE installation_id = 'demo-1-github' AND generation = 3").await.unwrap();
    let read = {
        let mut a = s.exec.begin().await.unwrap();
        let v = a.mark_version("demo-1").await.unwrap();
        a.rollback().await.unwrap();
        v.expect("marked")
    };
    // A change lands after the read (a build in flight would not have seen it).
    exec(&s.admin, "UPDATE ql3.package_generations SET status = 'staged' WHERE installation_id = 'demo-1-github' AND generation = 3").await.unwrap();
    let mut a = s.exec.begin().await.unwrap();
    a.clear_mark("demo-1", read).await.unwrap();
    a.commit().await.unwrap();
    assert_eq!(
        marked(&s.exec).await,
        ["demo-1"],
        "the newer change stays marked"
    );
    // The next run deals with it and clears it.
    let summary = s.run(false).await;
    assert_eq!((summary.projects_scanned, summary.already_current), (1, 1));
    assert_eq!(marked(&s.exec).await, Vec::<String>::new());
}

/// A mark lost (deleted by the owner here) hides a change from the default run; `--full-scan`
/// proves every project and builds it.
async fn full_scan_finds_a_project_whose_mark_was_lost(s: Stores) {
    import(&s.admin, DEMO).await;
    settle(&s).await;
    sources::activate(&s.admin, "demo-1-github", 3)
        .await
        .unwrap();
    exec(
        &s.admin,
        "DELETE FROM ql3.pending_projects WHERE project_id = 'demo-1'",
    )
    .await
    .unwrap();
    assert_eq!(current_digest(&s.exec, "demo-1").await, None);
    let summary = s.run(false).await;
    assert_eq!((summary.projects_scanned, summary.published), (0, 0));
    assert_eq!(
        current_digest(&s.exec, "demo-1").await,
        None,
        "nothing stale is served"
    );
    let summary = s.run(true).await;
    assert_eq!(summary.published, 1, "{summary:?}");
    assert!(current_digest(&s.exec, "demo-1").await.is_some());
}

/// A revision over 1 MiB (read in slices on PostgreSQL) builds exactly as a small one would, and
/// a tampered one is still caught by its digest.
async fn large_revisions_build_like_small_ones(s: Stores) {
    let revision = |name: &str| {
        serde_json::json!({"schema": "qinglong/materialized-revision@v1",
            "package": {"name": name, "version": "1.0.0"},
            "tools": [{"name": "big", "version": "1.0.0", "inputSchema": {"type": "object"}}],
            "files": {"blob": "y".repeat(9 * 1024 * 1024 + 17)}})
    };
    let text = |name: &str| package_executor::canonical::to_vec(&revision(name));
    let wrong = format!("{}", package_executor::model::Digest::of(b"other bytes"));
    // A control character deep inside the skipped blob, in the fourth MiB-slice or later.
    let mut damaged = String::from_utf8(text("big.pkg")).unwrap();
    damaged.replace_range(7_000_000..7_000_001, "\u{1}");
    let fixture = serde_json::json!({"schema": "package-executor/fixture@v1", "projects": [
        {"projectId": "large", "packages": [{"packageName": "big.pkg", "installationId": "large-1",
            "generations": [{"generation": 1, "status": "active", "revision": revision("big.pkg")}]}]},
        {"projectId": "large-tampered", "packages": [{"packageName": "big.pkg", "installationId": "large-2",
            "generations": [{"generation": 1, "status": "active",
                "revisionText": String::from_utf8(text("big.pkg")).unwrap(), "revisionDigest": wrong}]}]},
        {"projectId": "large-malformed", "packages": [{"packageName": "big.pkg", "installationId": "large-3",
            "generations": [{"generation": 1, "status": "active", "revisionText": damaged}]}]}]});
    import(&s.admin, &serde_json::to_vec(&fixture).unwrap()).await;
    let built = publish(&s.exec, "large").await;
    assert_eq!(built.name(), "published", "{built:?}");
    // The planner on the bytes read whole gives the same snapshot.
    assert_eq!(
        digest_of(&built),
        planned(&s.exec, "large").await.snapshot_digest.as_str()
    );
    assert_eq!(
        publish(&s.exec, "large-tampered").await.reason(),
        Some("revision-digest-mismatch")
    );
    assert_eq!(
        publish(&s.exec, "large-malformed").await.reason(),
        Some("revision-malformed")
    );
}

/// A revision document for package `late.pkg`, with `extra` merged into its one tool.
pub(crate) fn late_revision(extra: serde_json::Value) -> Vec<u8> {
    let mut tool = serde_json::json!({"name": "lookup", "version": "1.0.0",
        "title": "Look up", "inputSchema": {"type": "object"}});
    tool.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let revision = serde_json::json!({"schema": "qinglong/materialized-revision@v1",
        "package": {"name": "late.pkg", "version": "1.0.0"}, "tools": [tool]});
    package_executor::canonical::to_vec(&revision)
}

/// Project `late` with one active generation of `late.pkg` pointing at `revision`: stored
/// with it when `stored`, else only named by its digest (the row comes later).
pub(crate) fn late_fixture(revision: &[u8], stored: bool) -> Vec<u8> {
    let digest = package_executor::model::Digest::of(revision).to_string();
    let mut generation = serde_json::json!({"generation": 1, "status": "active",
        "revisionDigest": digest});
    if stored {
        generation["revision"] = serde_json::from_slice(revision).unwrap();
    }
    serde_json::to_vec(&serde_json::json!({"schema": "package-executor/fixture@v1",
        "projects": [{"projectId": "late", "packages": [{"packageName": "late.pkg",
            "installationId": "late-1", "generations": [generation]}]}]}))
    .unwrap()
}

/// Stores `revision` by plain SQL, as a control plane materializes one.
pub(crate) async fn store_revision_by_sql(admin: &Store, revision: &[u8]) {
    let digest = package_executor::model::Digest::of(revision);
    let hex: String = revision.iter().map(|b| format!("{b:02x}")).collect();
    let bytes = match admin.dialect() {
        Dialect::Postgres => format!("decode('{hex}', 'hex')"),
        Dialect::Sqlite => format!("X'{hex}'"),
    };
    exec(
        admin,
        &format!(
            "INSERT INTO ql3.materialized_revisions (revision_digest, content, byte_length) \
             VALUES ('{digest}', {bytes}, {})",
            revision.len()
        ),
    )
    .await
    .unwrap();
}

/// `explain late` as the executor runs it: its standard output.
async fn explain_late(s: &Stores) -> String {
    let out = succeeds(exe(&s.exec_url, "10s").args(["explain", "late"])).await;
    String::from_utf8(out.stdout).unwrap()
}

async fn recorded_rejections(store: &Store, reason: &str) -> i64 {
    scalar(
        store,
        &format!(
            "SELECT COUNT(*) FROM ql3.tool_definition_snapshot_rejections \
             WHERE project_id = 'late' AND reason = '{reason}'"
        ),
    )
    .await
}

/// The three digests and the document of a project's current snapshot.
async fn current_of(store: &Store, project: &str) -> (String, String, String, Vec<u8>) {
    let c = store
        .find_current(project)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{project} has no current snapshot"));
    (
        c.snapshot_digest.to_string(),
        c.active_vector_digest.to_string(),
        c.definition_digest.to_string(),
        c.canonical_json,
    )
}

/// The snapshot of `late` built in a fresh SQLite file whose revision was there from the start.
async fn built_on_time(revision: &[u8]) -> (String, String, String, Vec<u8>) {
    let (url, _dir) = pg::fresh_sqlite().await;
    let store = connect(&url).await;
    import(&store, &late_fixture(revision, true)).await;
    assert_eq!(run_all(&store, false).await.published, 1);
    current_of(&store, "late").await
}

/// A revision that arrives late is built (contract section 7): `revision-missing` is reported
/// but never recorded, the revision row stored by plain SQL marks the project, and the next
/// plain run publishes it, and only it, with the digests of a project whose revision was there
/// from the start. `explain` reads the live tables before and after.
async fn a_late_revision_is_built(s: Stores) {
    import(&s.admin, DEMO).await;
    settle(&s).await;
    let revision = late_revision(serde_json::json!({}));
    import(&s.admin, &late_fixture(&revision, false)).await;
    assert_eq!(marked(&s.exec).await, ["late"]);
    let said = explain_late(&s).await;
    assert!(said.contains("its revision is not stored"), "{said}");
    assert!(said.contains("reports revision-missing while"), "{said}");
    assert!(!said.contains("rejected"), "{said}");

    let summary = s.run(false).await;
    assert_eq!(summary.projects_scanned, 1, "{summary:?}");
    assert_eq!(summary.rejected.get(&RevisionMissing.into()), 1);
    assert_eq!(recorded_rejections(&s.admin, "revision-missing").await, 0);
    assert_eq!(
        marked(&s.exec).await,
        Vec::<String>::new(),
        "the mark it saw"
    );
    let said = explain_late(&s).await;
    assert!(said.contains("its revision is not stored"), "{said}");
    assert!(said.contains("storing the revision marks it"), "{said}");
    assert!(
        !said.contains("rejected") && !said.contains("lost"),
        "{said}"
    );

    store_revision_by_sql(&s.admin, &revision).await;
    assert_eq!(marked(&s.exec).await, ["late"], "the arrival marks it");
    let said = explain_late(&s).await;
    assert!(!said.contains("not stored"), "{said}");
    assert!(
        said.contains("the next `run` looks at it and builds it"),
        "{said}"
    );

    let summary = s.run(false).await;
    assert_eq!(
        (
            summary.projects_scanned,
            summary.published,
            summary.exit_code
        ),
        (1, 1, Exit::Ok),
        "{summary:?}"
    );
    assert!(summary.rejected.is_empty(), "{summary:?}");
    assert_eq!(
        current_of(&s.exec, "late").await,
        built_on_time(&revision).await,
        "the same snapshot as if the revision had been there from the start"
    );
    let said = explain_late(&s).await;
    assert!(said.contains("current        yes"), "{said}");
}

/// A `revision-missing` row recorded by an older build (inserted here as the owner, the way
/// such a build wrote it) never skips a build, and `explain` never gives it as the reason.
async fn a_revision_missing_row_of_an_older_build_never_stands(s: Stores) {
    let revision = late_revision(serde_json::json!({}));
    import(&s.admin, &late_fixture(&revision, false)).await;
    let vector = planner::active_vector_digest("late", &live_heads(&s.exec, "late").await);
    exec(
        &s.admin,
        &format!(
            "INSERT INTO ql3.tool_definition_snapshot_rejections \
             (project_id, active_vector_digest, reason, detail) VALUES ('late', '{vector}', \
             'revision-missing', 'package late.pkg: generation 1 points at a revision which is \
             not stored')"
        ),
    )
    .await
    .unwrap();
    let said = explain_late(&s).await;
    assert!(said.contains("its revision is not stored"), "{said}");
    assert!(!said.contains("rejected"), "{said}");
    assert_eq!(
        publish(&s.exec, "late").await.reason(),
        Some("revision-missing")
    );

    store_revision_by_sql(&s.admin, &revision).await;
    let said = explain_late(&s).await;
    assert!(
        !said.contains("rejected") && !said.contains("not stored"),
        "{said}"
    );
    let summary = s.run(false).await;
    assert_eq!(
        (summary.published, summary.exit_code),
        (1, Exit::Ok),
        "{summary:?}"
    );
    assert_eq!(
        current_of(&s.exec, "late").await,
        built_on_time(&revision).await
    );
    assert_eq!(
        recorded_rejections(&s.admin, "revision-missing").await,
        1,
        "the old row stays, as history"
    );
}

/// A late revision whose content is rejected records that reason, which then stands for the
/// vector like every rejection of content: a full scan reports it again and records nothing.
async fn a_late_revision_rejected_for_its_content_stands(s: Stores) {
    let revision = late_revision(serde_json::json!({"command": "rm -rf /"}));
    import(&s.admin, &late_fixture(&revision, false)).await;
    let summary = s.run(false).await;
    assert_eq!(summary.rejected.get(&RevisionMissing.into()), 1);
    store_revision_by_sql(&s.admin, &revision).await;
    let summary = s.run(false).await;
    assert_eq!(
        summary.rejected.get(&ForbiddenField.into()),
        1,
        "{summary:?}"
    );
    assert_eq!(recorded_rejections(&s.admin, "forbidden-field").await, 1);
    let said = explain_late(&s).await;
    assert!(said.contains("rejected       forbidden-field"), "{said}");
    assert!(said.contains("the rejection stands"), "{said}");
    let summary = s.run(true).await;
    assert_eq!(
        summary.rejected.get(&ForbiddenField.into()),
        1,
        "{summary:?}"
    );
    assert_eq!(
        scalar(
            &s.admin,
            "SELECT COUNT(*) FROM ql3.tool_definition_snapshot_rejections"
        )
        .await,
        1
    );
    assert_eq!(current_digest(&s.exec, "late").await, None);
}

/// Adds generation `generation` of `installation` as a copy of its generation `like` with a
/// generation digest and lock digest of their own (`tag` makes them), staged.
async fn add_generation(admin: &Store, installation: &str, like: i64, generation: i64, tag: &str) {
    let gd = format!("'sha256:{}'", format!("{tag:0>8}").repeat(8));
    let ld = format!("'sha256:{}'", format!("{generation:0>16x}").repeat(4));
    exec(admin, &format!(
        "INSERT INTO ql3.package_generations (installation_id, generation, status, generation_digest, \
         lock_digest, revision_digest, approved_permissions) \
         SELECT g.installation_id, {generation}, 'staged', {gd}, {ld}, g.revision_digest, g.approved_permissions \
         FROM ql3.package_generations AS g WHERE g.installation_id = '{installation}' AND g.generation = {like}"
    ))
    .await
    .unwrap();
}

/// How many of a project's snapshots carry the key of its live heads.
async fn with_live_key(s: &Stores, project: &str) -> i64 {
    let key = package_executor::source_key::source_key(&live_heads(&s.exec, project).await);
    scalar(
        &s.admin,
        &format!(
            "SELECT COUNT(*) FROM ql3.tool_definition_snapshots AS s \
         WHERE s.project_id = '{project}' AND s.source_key = '{key}'"
        ),
    )
    .await
}

/// A project with a long history (a package that updates often): the proof finds the current
/// snapshot by its key among all of them, an earlier vector that comes back makes its earlier
/// snapshot current again, and two snapshots whose keys match (the same generation and revision
/// digests under other generation numbers, with other lock digests) are told apart by the full
/// comparison: only the one whose source rows are the live heads is ever returned.
async fn the_proof_finds_the_current_snapshot_among_a_long_history(s: Stores) {
    import(&s.admin, DEMO).await;
    let first = digest_of(&publish(&s.exec, "demo-1").await);
    let mut digests = vec![first.clone()];
    for generation in 10..130 {
        add_generation(
            &s.admin,
            "demo-1-github",
            2,
            generation,
            &generation.to_string(),
        )
        .await;
        sources::activate(&s.admin, "demo-1-github", generation)
            .await
            .unwrap();
        assert_eq!(
            current_digest(&s.exec, "demo-1").await,
            None,
            "generation {generation}"
        );
        let d = digest_of(&publish(&s.exec, "demo-1").await);
        assert_eq!(current_digest(&s.exec, "demo-1").await, Some(d.clone()));
        digests.push(d);
    }
    assert_eq!(
        scalar(
            &s.admin,
            "SELECT COUNT(*) FROM ql3.tool_definition_snapshots WHERE project_id = 'demo-1'"
        )
        .await,
        121
    );
    assert_eq!(
        with_live_key(&s, "demo-1").await,
        1,
        "the key is the live vector's alone"
    );
    // The first vector again: its snapshot, 120 snapshots back, is current again.
    sources::activate(&s.admin, "demo-1-github", 2)
        .await
        .unwrap();
    assert_eq!(current_digest(&s.exec, "demo-1").await, Some(first.clone()));
    assert_eq!(publish(&s.exec, "demo-1").await.name(), "already-current");
    // One from the middle of the history, too.
    sources::activate(&s.admin, "demo-1-github", 70)
        .await
        .unwrap();
    assert_eq!(
        current_digest(&s.exec, "demo-1").await,
        Some(digests[61].clone())
    );

    // Twins: generation 200 repeats generation 70's generation and revision digests (so its
    // vector has the same key) with its own lock digest.
    add_generation(&s.admin, "demo-1-github", 70, 200, "70").await;
    sources::activate(&s.admin, "demo-1-github", 200)
        .await
        .unwrap();
    assert_eq!(
        with_live_key(&s, "demo-1").await,
        1,
        "generation 70's snapshot has this key"
    );
    assert_eq!(
        current_digest(&s.exec, "demo-1").await,
        None,
        "a snapshot whose key matches but whose source rows differ is never current"
    );
    let twin = digest_of(&publish(&s.exec, "demo-1").await);
    assert_ne!(twin, digests[61]);
    assert_eq!(with_live_key(&s, "demo-1").await, 2, "two candidates now");
    assert_eq!(current_digest(&s.exec, "demo-1").await, Some(twin.clone()));
    sources::activate(&s.admin, "demo-1-github", 70)
        .await
        .unwrap();
    assert_eq!(
        current_digest(&s.exec, "demo-1").await,
        Some(digests[61].clone())
    );
    assert_pending_is_not_current(&s.exec, "after the twins").await;
    sources::activate(&s.admin, "demo-1-github", 200)
        .await
        .unwrap();
    assert_eq!(current_digest(&s.exec, "demo-1").await, Some(twin));
}

/// The conditional door: the copy the caller holds is current (no document), another snapshot
/// is current (the whole row), none is (nothing). On PostgreSQL the consumer's SQL door too.
async fn the_conditional_door_answers_three_ways(s: Stores) {
    use package_executor::store::Current;
    import(&s.admin, DEMO).await;
    let old = digest_of(&publish(&s.exec, "demo-1").await);
    let full = s.exec.find_current("demo-1").await.unwrap().unwrap();
    match s.exec.revalidate("demo-1", Some(&old)).await.unwrap() {
        Some(Current::Unchanged(head)) => {
            assert_eq!(head.snapshot_digest, old);
            assert_eq!(head.committed_at, full.committed_at);
            assert_eq!(head.active_vector_digest, full.active_vector_digest);
        }
        other => panic!("the held copy is current: {other:?}"),
    }
    match s.exec.revalidate("demo-1", None).await.unwrap() {
        Some(Current::Changed(c)) => assert_eq!(c, full),
        other => panic!("no copy held: {other:?}"),
    }
    sources::activate(&s.admin, "demo-1-github", 3)
        .await
        .unwrap();
    assert_eq!(
        s.exec.revalidate("demo-1", Some(&old)).await.unwrap(),
        None,
        "none is current"
    );
    let new = digest_of(&publish(&s.exec, "demo-1").await);
    match s.exec.revalidate("demo-1", Some(&old)).await.unwrap() {
        Some(Current::Changed(c)) => {
            assert_eq!(c.snapshot_digest, new);
            assert_eq!(
                package_executor::model::Digest::of(&c.canonical_json).as_str(),
                new
            );
        }
        other => panic!("another snapshot is current: {other:?}"),
    }
    if let Some(pool) = s.admin.pg_pool() {
        let door = async |known: Option<&str>| -> Option<(String, Option<Vec<u8>>)> {
            sqlx::query_as(
                "SELECT snapshot_digest, canonical_json FROM ql3.current_tool_snapshot($1, $2)",
            )
            .bind("demo-1")
            .bind(known)
            .fetch_optional(&pool)
            .await
            .unwrap()
        };
        let (d, doc) = door(Some(new.as_str())).await.unwrap();
        assert_eq!((d.as_str(), doc), (new.as_str(), None));
        let (d, doc) = door(Some(old.as_str())).await.unwrap();
        assert_eq!(d, new);
        assert_eq!(
            package_executor::model::Digest::of(&doc.unwrap()).as_str(),
            new
        );
        let (_, doc) = door(None).await.unwrap();
        assert!(doc.is_some(), "a NULL digest is no copy");
        sources::activate(&s.admin, "demo-1-github", 1)
            .await
            .unwrap();
        assert_eq!(door(Some(new.as_str())).await, None);
    }
}

/// A snapshot as an executor from before the key wrote it: every column but `source_key`, with
/// its source rows, in one transaction.
async fn insert_without_key(store: &Store, snap: &planner::Snapshot) -> Result<(), String> {
    let hex: String = snap
        .canonical_json
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let blob = match store.dialect() {
        Dialect::Postgres => format!("decode('{hex}', 'hex')"),
        Dialect::Sqlite => format!("X'{hex}'"),
    };
    let row = format!(
        "INSERT INTO ql3.tool_definition_snapshots (project_id, active_vector_digest, \
         definition_digest, snapshot_digest, package_count, definition_count, canonical_json) \
         VALUES ('{}', '{}', '{}', '{}', {}, {}, {blob})",
        snap.project_id,
        snap.active_vector_digest.as_str(),
        snap.definition_digest.as_str(),
        snap.snapshot_digest.as_str(),
        snap.sources.len(),
        snap.definition_count
    );
    let values: Vec<String> = snap
        .sources
        .iter()
        .map(|h| {
            format!(
                "('{}', '{}', {}, '{}', '{}', '{}')",
                h.package_name,
                h.installation_id,
                h.generation,
                h.generation_digest,
                h.lock_digest,
                h.revision_digest
            )
        })
        .collect();
    let sources = |id: &str| {
        format!(
            "INSERT INTO ql3.tool_definition_snapshot_sources \
             SELECT {id}, v.* FROM (VALUES {}) AS v",
            values.join(", ")
        )
    };
    match store.dialect() {
        Dialect::Postgres => {
            let text = format!(
                "WITH s AS ({row} RETURNING snapshot_id) {}",
                sources("(SELECT s.snapshot_id FROM s)")
            );
            exec(store, if values.is_empty() { &row } else { &text }).await?;
        }
        Dialect::Sqlite => {
            exec(store, &row).await?;
            if !values.is_empty() {
                let id = format!(
                    "(SELECT s.snapshot_id FROM ql3.tool_definition_snapshots AS s \
                     WHERE s.snapshot_digest = '{}')",
                    snap.snapshot_digest.as_str()
                );
                exec(store, &sources(&id)).await?;
            }
        }
    }
    Ok(())
}

/// Every stored snapshot's columns that a digest covers, read by plain SQL (so that it reads a
/// database from before the key as well): project, the three digests and the document.
async fn stored_digests(store: &Store) -> Vec<(String, String, String, String, Vec<u8>)> {
    let text = "SELECT project_id, snapshot_digest, active_vector_digest, definition_digest, \
                canonical_json FROM ql3.tool_definition_snapshots ORDER BY snapshot_digest";
    match (store.pg_pool(), store.sqlite_pool()) {
        (Some(p), _) => sqlx::query_as(text).fetch_all(&p).await.unwrap(),
        (_, Some(p)) => sqlx::query_as(sqlx::AssertSqlSafe(
            Dialect::Sqlite.render(text).into_owned(),
        ))
        .fetch_all(p)
        .await
        .unwrap(),
        _ => unreachable!(),
    }
}

/// The `pg` tier's part of this module: the tests that start PostgreSQL.
mod on_postgres {
    use super::*;

    /// The same fixture gives byte-identical snapshots, with the same three digests, in both dialects.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn same_fixture_same_bytes_in_both_dialects() {
        within(180, async {
            let pg = connect(&pg::fresh_db().await).await;
            let (url, _dir) = pg::fresh_sqlite().await;
            let lite = connect(&url).await;
            let varied = fixtures::many_projects(12, 3, 2, 300);
            for store in [&pg, &lite] {
                import(store, DEMO).await;
                import(store, &varied).await;
                let observer = package_executor::coordinator::LogObserver;
                let report = package_executor::coordinator::Coordinator::new(
                    store.clone(),
                    settings(),
                    package_executor::coordinator::Stop::default(),
                    &observer,
                )
                .run()
                .await;
                assert_eq!(report.summary.published, 15, "{:?}", report.summary);
            }
            let (a, b) = (snapshots_of(&pg).await, snapshots_of(&lite).await);
            assert_eq!(a.len(), 15);
            assert_eq!(a, b, "PostgreSQL and SQLite must store identical snapshots");
        })
        .await;
    }

    /// Each migration applies in order on an empty database, in both dialects.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn migrations_apply_one_by_one() {
        within(180, async {
            let (pg, lite, _dir) = unmigrated("migrate_steps").await;
            for store in [&pg, &lite] {
                assert!(
                    store.check_migrated().await.is_err(),
                    "an empty database is not migrated"
                );
                let all = store.migrations();
                for m in all {
                    let report = store.migrate(false, Some(m.version)).await.unwrap();
                    assert_eq!(
                        report.applied,
                        vec![m.name.to_owned()],
                        "{:?}",
                        store.dialect()
                    );
                    let table = if store.dialect() == Dialect::Postgres {
                        "ql3.schema_migrations"
                    } else {
                        "schema_migrations"
                    };
                    assert_eq!(
                        scalar(store, &format!("SELECT MAX(version) FROM {table}")).await,
                        m.version
                    );
                }
                assert!(
                    store.migrate(false, None).await.unwrap().applied.is_empty(),
                    "idempotent"
                );
                store.check_migrated().await.unwrap();
                // Sample data loads after the last step.
                import(store, DEMO).await;
            }
        })
        .await;
    }

    /// A change committed while a build is in flight (PostgreSQL, where builds and control-plane
    /// writes interleave): the build publishes what it observed, the project's mark stays because
    /// the change gave it a new version, and the next run deals with the change.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_change_during_a_build_stays_marked_for_the_next_run() {
        within(180, async {
            let store = connect(&pg::fresh_db().await).await;
            import(&store, DEMO).await;
            assert_eq!(run_all(&store, false).await.exit_code, Exit::Ok);
            sources::activate(&store, "demo-1-github", 3).await.unwrap();
            assert_eq!(marked(&store).await, ["demo-1"]);
            let snapshot = planned(&store, "demo-1").await;

            let mut a = store.begin().await.unwrap();
            let opening = a.open("demo-1").await.unwrap();
            assert!(opening.claimed && opening.current.is_none() && opening.mark.is_some());
            // Mid-build, a control plane retires an old generation: the live vector is unchanged.
            exec(&store, "UPDATE ql3.package_generations SET status = 'failed' WHERE installation_id = 'demo-1-github' AND generation = 1")
                .await
                .unwrap();
            let appending = a.append(&snapshot, opening.mark).await.unwrap();
            assert!(appending.inserted);
            assert_eq!(appending.second, opening.heads, "no drift");
            a.commit().await.unwrap();

            assert_eq!(marked(&store).await, ["demo-1"], "the change stays marked");
            assert_eq!(
                current_digest(&store, "demo-1").await.as_ref(),
                Some(&snapshot.snapshot_digest)
            );
            let next = run_all(&store, false).await;
            assert_eq!((next.projects_scanned, next.already_current), (1, 1));
            assert_eq!(marked(&store).await, Vec::<String>::new());
        })
        .await;
    }

    const SOURCE_INVALID: package_executor::rejection::ReportedCode =
        package_executor::rejection::ReportedCode::Known(
            package_executor::rejection::RejectionCode::SourceInvalid,
        );

    /// A database from before the permission limits (PostgreSQL migration 16, SQLite 7) holding
    /// a generation that approves 257 permissions (demo-1) and one that approves a 65-character
    /// one (demo-2), each active: the migration keeps both rows and both stay writable (the
    /// control plane supersedes one), the database refuses such a row from then on, and a run
    /// ends both projects `source-invalid`, naming the generation; the other projects publish.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn generations_past_the_permission_limits_stored_before_them_are_source_invalid() {
        within(180, async {
            let (pg, lite, _dir) = unmigrated("before_permission_limits").await;
            let many: Vec<String> = (0..257).map(|i| format!("p{i:03}")).collect();
            let long = vec!["a".repeat(65)];
            let huge: Vec<String> = (0..20_000).map(|i| format!("perm{i:05}")).collect();
            let generation = |installation: &str, n: i64, perms: &[String]| {
                format!(
                    "INSERT INTO ql3.package_generations (installation_id, generation, status, \
                     generation_digest, lock_digest, revision_digest, approved_permissions) \
                     VALUES ('{installation}', {n}, 'staged', {D}, {D}, {D}, '{}')",
                    serde_json::to_string(perms).unwrap()
                )
            };
            for (store, before) in [(&pg, 16), (&lite, 7)] {
                store.migrate(false, Some(before)).await.unwrap();
                import(store, DEMO).await;
                exec(store, &generation("demo-1-github", 50, &many))
                    .await
                    .unwrap();
                exec(store, &generation("demo-2-slack", 50, &long))
                    .await
                    .unwrap();
                exec(store, &generation("demo-rejected-shady", 50, &huge))
                    .await
                    .unwrap();
                for installation in ["demo-1-github", "demo-2-slack", "demo-rejected-shady"] {
                    sources::activate(store, installation, 50).await.unwrap();
                }
                store.migrate(false, None).await.unwrap();
                // Refused from now on, on both dialects.
                for (perms, what) in [
                    (&many, "257 permissions"),
                    (&long, "65 characters"),
                    (&huge, "20,000 permissions"),
                ] {
                    let refused = exec(store, &generation("demo-1-docs", 60, perms)).await;
                    assert!(
                        refused
                            .as_ref()
                            .is_err_and(|e| e.contains("approved_permissions")),
                        "{what}: {refused:?}"
                    );
                }
                let summary = run_all(store, false).await;
                assert_eq!(summary.rejected.get(&SOURCE_INVALID), 3, "{summary:?}");
                // The 20,000 permissions (about 180 KB) never reach the executor: the
                // observation brings their length.
                let huge_bytes = serde_json::to_string(&huge).unwrap().len();
                let too_long = format!("approved_permissions holds {huge_bytes} bytes");
                for (project, installation, problem) in [
                    ("demo-1", "demo-1-github", "257 approved permissions"),
                    (
                        "demo-2",
                        "demo-2-slack",
                        "approved permission [0] is not a permission",
                    ),
                    ("demo-rejected", "demo-rejected-shady", too_long.as_str()),
                ] {
                    let outcome = publish(store, project).await;
                    assert_eq!(outcome.reason(), Some("source-invalid"), "{outcome:?}");
                    let detail = outcome.detail().unwrap();
                    assert!(
                        detail
                            .contains(&format!("generation 50 of installation \"{installation}\""))
                            && detail.contains(problem),
                        "{detail}"
                    );
                }
                // The rows stay writable: the control plane moves on from them.
                sources::activate(store, "demo-1-github", 2).await.unwrap();
                assert_eq!(publish(store, "demo-1").await.name(), "published");
            }
        })
        .await;
    }

    /// A database from before the key (PostgreSQL migration 11, SQLite 5) with snapshots as the
    /// executor wrote them then, history included: the migration gives each its key without
    /// changing a digest or a byte, each project's snapshot is still found current (the old one of
    /// demo-1 too, once its vector comes back), and a run afterwards publishes nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn snapshots_from_before_the_key_stay_current() {
        within(180, async {
            let (pg, lite, _dir) = unmigrated("before_the_key").await;
            for (store, before) in [(&pg, 11), (&lite, 5)] {
                store.migrate(false, Some(before)).await.unwrap();
                import(store, DEMO).await;
                let stores = Stores {
                    admin: store.clone(),
                    exec: store.clone(),
                    exec_url: String::new(),
                    batch_size: BATCHED,
                };
                let projects = ["demo-1", "demo-2", "demo-empty"];
                for p in projects {
                    insert_without_key(store, &planned(store, p).await)
                        .await
                        .unwrap();
                }
                // History: demo-1 at generation 3, then back at 2, whose snapshot is the older.
                sources::activate(store, "demo-1-github", 3).await.unwrap();
                insert_without_key(store, &planned(store, "demo-1").await)
                    .await
                    .unwrap();
                sources::activate(store, "demo-1-github", 2).await.unwrap();
                let stored = stored_digests(store).await;
                assert_eq!(stored.len(), 4);

                store.migrate(false, None).await.unwrap();
                assert_eq!(
                    stored_digests(store).await,
                    stored,
                    "no digest and no byte changed"
                );
                for (project, problems) in verified_in(store, None, 1 << 30).await.0 {
                    assert_eq!(problems, Vec::<String>::new(), "verify, {project}");
                }
                for p in projects {
                    let c = store
                        .find_current(p)
                        .await
                        .unwrap()
                        .unwrap_or_else(|| panic!("{p}"));
                    assert_eq!(
                        scalar(
                            store,
                            &format!(
                                "SELECT COUNT(*) FROM ql3.tool_definition_snapshots AS s \
                             WHERE s.snapshot_id = {} AND s.source_key = '{}'",
                                c.snapshot_id,
                                package_executor::source_key::source_key(
                                    &live_heads(store, p).await
                                )
                            )
                        )
                        .await,
                        1,
                        "{p}: the migration's key is the executor's"
                    );
                }
                // An executor from before the key, writing to the migrated database, is refused
                // (it would write a snapshot the proof can never find).
                sources::activate(store, "demo-1-github", 1).await.unwrap();
                let old_style = planned(store, "demo-1").await;
                let refused = insert_without_key(store, &old_style).await.unwrap_err();
                assert!(
                    refused.contains("source_key"),
                    "a snapshot without a key is refused after the migration: {refused}"
                );
                sources::activate(store, "demo-1-github", 2).await.unwrap();
                let summary = run_all(store, true).await;
                assert_eq!(summary.exit_code, Exit::Ok, "{summary:?}");
                assert_eq!(
                    stored_digests(store).await.len(),
                    4,
                    "nothing republished: {summary:?}"
                );
                sources::activate(store, "demo-1-github", 3).await.unwrap();
                assert!(store.find_current("demo-1").await.unwrap().is_some());
                assert_eq!(
                    publish(&stores.exec, "demo-1").await.name(),
                    "already-current"
                );
            }
        })
        .await;
    }
}
