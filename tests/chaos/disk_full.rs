//! A full disk: the import and the run write nothing partial, say what to do, and carry on
//! once there is room again, on both dialects, with the result codes of the databases' own write
//! paths.
//!
//! SQLite: the file is held to its size with SQLite's own `PRAGMA max_page_count`; once it would
//! grow past it, every write fails with `SQLITE_FULL` (13), the result code a full volume gives,
//! from the same place (the pager refuses the page). The pragma holds per connection, so these
//! stores have a pool of one connection.
//!
//! PostgreSQL: the tables a test writes (the snapshot tables for the run, the revisions for the
//! import) move to a tablespace on a small tmpfs, which a file then fills, so the server fails
//! to extend them with `53100` (needs root to mount, like the storm).

use package_executor_testkit::db;
use package_executor_testkit::fixtures;
use package_executor_testkit::pg;
use package_executor_testkit::within;

use db::*;
use package_executor::coordinator::{Coordinator, LogObserver, RunReport, RunSettings, Stop};
use package_executor::exit::Exit;
use package_executor::report::{Outcome, Unresolved};
use package_executor::sources;
use package_executor::store::{ConnectOptions, Store, StoreError};

/// A store on `url` whose only connection lets the file grow by `room` pages at most.
async fn cramped(url: &str, room: i64) -> Store {
    let store = Store::connect(&ConnectOptions {
        max_connections: 1,
        ..ConnectOptions::new(url.parse().unwrap())
    })
    .await
    .expect("connect");
    let pages = scalar(&store, "PRAGMA page_count").await;
    exec(&store, &format!("PRAGMA max_page_count = {}", pages + room))
        .await
        .unwrap();
    assert_eq!(
        scalar(&store, "PRAGMA max_page_count").await,
        pages + room,
        "the limit did not take"
    );
    store
}

/// Lifts the limit on the store's connection.
async fn make_room(store: &Store) {
    exec(store, "PRAGMA max_page_count = 1073741823")
        .await
        .unwrap();
}

/// A run of `workers` workers that tries each project once, with no final probes.
/// The full phase runs at the default batch and at one project a transaction.
const BATCH_SIZES: [usize; 2] = [package_executor::defaults::BATCH_SIZE as usize, 1];

async fn one_attempt_each(store: &Store, workers: usize, batch_size: usize) -> RunReport {
    let settings = RunSettings {
        concurrency: workers,
        max_attempts: 1,
        final_probes: 0,
        batch_size,
        ..settings()
    };
    Coordinator::new(store.clone(), settings, Stop::default(), &LogObserver)
        .run()
        .await
}

/// An import stopped by a full disk: passed on as the database's failure (its `code`), with
/// the next step, and never blamed on a row of the fixture.
fn assert_import_refused_for_space(err: &StoreError, code: &str) {
    assert!(matches!(err, StoreError::Other(_)), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("{code}: ")), "{text}");
    assert!(
        text.contains("free space on it or grow its volume"),
        "{text}"
    );
    assert!(!text.contains("fix the fixture"), "{text}");
}

/// A run on a full disk: nothing published, every one of the 6 projects unresolved for the
/// database (its `code`, and the next step), and exit 3, which a Job retries (once someone has
/// made room).
fn assert_nothing_fit(report: &RunReport, code: &str) {
    let summary = &report.summary;
    assert_eq!(summary.published, 0, "{summary:?}");
    assert_eq!(summary.exit_code, Exit::Unresolved, "{summary:?}");
    assert_eq!(
        summary.unresolved.get(&Unresolved::Database),
        6,
        "{summary:?}"
    );
    for (project, outcome) in &report.outcomes {
        match outcome {
            Outcome::Unresolved {
                reason: Unresolved::Database,
                detail,
            } => assert!(
                detail.contains(&format!("{code}: "))
                    && detail.contains("disk is full: free space on it"),
                "{project}: {detail}"
            ),
            other => panic!("{project}: {other:?}"),
        }
    }
}

#[test]
#[ignore = "chaos tier, needs root: scripts/test.sh chaos"]
fn a_sqlite_import_that_fills_the_disk_writes_nothing_and_says_what_to_do() {
    pg::block_on(within(120, async {
        let (url, _dir) = pg::fresh_sqlite().await;
        let store = cramped(&url, 16).await;
        import(&store, DEMO).await;
        let before = row_counts(&store).await;

        // 80 revisions of 16 KiB each: far more than 16 pages.
        let big = fixtures::many_projects(10, 4, 2, 16 << 10);
        let err = sources::import_bytes(&store, &big)
            .await
            .expect_err("the import fit in 16 pages");
        assert_import_refused_for_space(&err, "13");
        assert_eq!(
            row_counts(&store).await,
            before,
            "the failed import left rows"
        );

        // With room again the same connection imports the same file whole.
        make_room(&store).await;
        let report = sources::import_bytes(&store, &big).await.expect("import");
        assert_eq!(report.projects, 10);
        assert_eq!(
            scalar(&store, "SELECT COUNT(*) FROM projects").await,
            before[0] + 10
        );
        store.close().await;
    }));
}

#[test]
#[ignore = "chaos tier, needs root: scripts/test.sh chaos"]
fn a_sqlite_run_that_fills_the_disk_writes_nothing_and_leaves_the_projects_pending() {
    pg::block_on(within(120, async {
        let (url, _dir) = pg::fresh_sqlite().await;
        {
            let store = connect(&url).await;
            // Four tools in each of eight packages: a snapshot needs pages of its own.
            import(&store, &fixtures::many_projects(6, 8, 4, 0)).await;
            store.close().await;
        }
        let store = cramped(&url, 0).await;
        // One connection, so one worker; at the default batch and one project a transaction.
        for batch_size in BATCH_SIZES {
            let report = one_attempt_each(&store, 1, batch_size).await;
            assert_nothing_fit(&report, "13");
            assert_eq!(
                row_counts(&store).await[4..7],
                [0, 0, 0],
                "a snapshot row was written (--batch-size {batch_size})"
            );
            assert_eq!(marked(&store).await.len(), 6, "a project lost its mark");
        }

        make_room(&store).await;
        let again = run_all(&store, false).await;
        assert_eq!(again.exit_code, Exit::Ok, "{again:?}");
        assert_eq!(again.published, 6);
        assert_eq!(partial_snapshots(&store).await, 0);
        assert!(marked(&store).await.is_empty());
        store.close().await;
    }));
}

/// The volume under the snapshot tables in the run test. Whatever its size, the filler takes all
/// of it for the full phase; what matters is the room the run finds once the filler is gone,
/// which must hold what PostgreSQL may take for the rows, not only the rows. Six snapshots take
/// about 136 KiB (their heap and TOAST pages, the source rows' pages and two free-space maps of
/// 24 KiB). But when other backends wait to extend a relation, PostgreSQL extends it by more
/// than a page: 20 pages per waiter on PostgreSQL 15 (`RelationAddExtraBlocks`), up to
/// 1 + waiters pages on 16 and later (`RelationAddBlocks`). With the four workers and the page
/// reader that is up to 80 pages (640 KiB) for each of the three heaps the run writes (the
/// snapshots, their TOAST table, the source rows). A 256 KiB volume failed now and then, when one
/// such extension of the source rows took 19 pages (152 KiB) for 36 rows and the snapshots'
/// TOAST table could then not grow (the commit that set this size has the figures). 4 MiB holds the worst
/// of it.
const RUN_VOLUME_KIB: u32 = 4096;

/// A tmpfs of a few pages, unmounted (lazily: the server keeps its files open) when dropped.
struct SmallVolume {
    dir: tempfile::TempDir,
}

impl SmallVolume {
    /// Mounts a tmpfs of `kib` KiB owned by the OS user the servers run as.
    fn mount(kib: u32) -> Self {
        assert!(
            pg::is_root(),
            "filling a PostgreSQL volume needs root (mount); CI runs as root"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let id = |flag: &str| {
            let out = std::process::Command::new("id")
                .args([flag, "postgres"])
                .output()
                .expect("id");
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        let options = format!("size={kib}k,mode=0700,uid={},gid={}", id("-u"), id("-g"));
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount");
        assert!(mounted.success(), "mount -t tmpfs failed");
        Self { dir }
    }

    fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Takes every free byte of the volume with a file of its own; returns the file.
    fn fill(&self) -> std::path::PathBuf {
        let file = self.path().join("filler");
        let mut f = std::fs::File::create(&file).expect("filler");
        let chunk = vec![0u8; 4096];
        loop {
            use std::io::Write as _;
            match f.write_all(&chunk) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                Err(e) => panic!("filling the volume: {e}"),
            }
        }
        file
    }
}

impl Drop for SmallVolume {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// What the tablespace on `volume` holds: each file's size, the volume's free bytes, and each
/// moved table's live and dead tuples as the statistics collector saw them.
async fn space_report(admin: &Store, volume: &SmallVolume, tables: &[&str]) -> String {
    fn walk(dir: &std::path::Path, out: &mut Vec<(String, u64)>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.metadata() {
                Ok(m) if m.is_dir() => walk(&path, out),
                Ok(m) => out.push((
                    path.file_name().unwrap().to_string_lossy().into_owned(),
                    m.len(),
                )),
                Err(_) => {}
            }
        }
    }
    let mut files = Vec::new();
    walk(volume.path(), &mut files);
    files.sort();
    let used: u64 = files.iter().map(|(_, n)| n).sum();
    let mut out = format!("files ({} KiB in all):", used / 1024);
    for (name, len) in &files {
        out.push_str(&format!(" {name}={}K", len / 1024));
    }
    // The statistics are sent at the end of each transaction; make this session see them now.
    let _ = exec(admin, "SELECT pg_stat_clear_snapshot()").await;
    for table in tables {
        let live = scalar(
            admin,
            &format!(
                "SELECT COALESCE(n_live_tup, 0) FROM pg_stat_user_tables WHERE relname = '{table}'"
            ),
        )
        .await;
        let dead = scalar(
            admin,
            &format!(
                "SELECT COALESCE(n_dead_tup, 0) FROM pg_stat_user_tables WHERE relname = '{table}'"
            ),
        )
        .await;
        let pages = scalar(
            admin,
            &format!("SELECT pg_relation_size('ql3.{table}') / 8192"),
        )
        .await;
        let toast_pages = scalar(
            admin,
            &format!(
                "SELECT COALESCE(pg_relation_size(reltoastrelid) / 8192, 0) FROM pg_class \
                 WHERE oid = 'ql3.{table}'::regclass"
            ),
        )
        .await;
        out.push_str(&format!(
            "\n  {table}: {live} live, {dead} dead, {pages} heap pages, {toast_pages} toast pages"
        ));
    }
    out
}

/// Moves `tables` (with their TOAST tables) to a tablespace on a volume of `kib` KiB, then
/// fills it; returns the volume and the file that fills it.
async fn fill_under(admin: &Store, tables: &[&str], kib: u32) -> (SmallVolume, std::path::PathBuf) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let volume = SmallVolume::mount(kib);
    // Tablespaces are cluster-wide, and the tests of this binary share a cluster.
    let space = format!(
        "pe_full_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    );
    let location = volume.path().display();
    exec(
        admin,
        &format!("CREATE TABLESPACE {space} LOCATION '{location}'"),
    )
    .await
    .unwrap();
    for table in tables {
        exec(
            admin,
            &format!("ALTER TABLE ql3.{table} SET TABLESPACE {space}"),
        )
        .await
        .unwrap();
    }
    let filler = volume.fill();
    (volume, filler)
}

#[test]
#[ignore = "chaos tier, needs root: scripts/test.sh chaos"]
fn a_postgres_import_that_fills_the_disk_writes_nothing_and_says_what_to_do() {
    pg::block_on(within(120, async {
        let url = pg::fresh_db().await;
        let admin = connect(&url).await;
        import(&admin, DEMO).await;
        let projects = "SELECT COUNT(*) FROM ql3.projects";
        let revisions = "SELECT COUNT(*) FROM ql3.materialized_revisions";
        let before = (
            scalar(&admin, projects).await,
            scalar(&admin, revisions).await,
        );
        // One connection writes, so no relation grows by more than it needs.
        let (_volume, filler) = fill_under(&admin, &["materialized_revisions"], 256).await;

        let big = fixtures::many_projects(10, 4, 2, 16 << 10);
        let err = sources::import_bytes(&admin, &big)
            .await
            .expect_err("the import fit on a full volume");
        assert_import_refused_for_space(&err, "53100");
        let after = (
            scalar(&admin, projects).await,
            scalar(&admin, revisions).await,
        );
        assert_eq!(after, before, "the failed import left rows");

        std::fs::remove_file(filler).expect("remove the filler");
        let report = sources::import_bytes(&admin, &big).await.expect("import");
        assert_eq!(report.projects, 10);
        assert_eq!(scalar(&admin, projects).await, before.0 + 10);
        admin.close().await;
    }));
}

#[test]
#[ignore = "chaos tier, needs root: scripts/test.sh chaos"]
fn a_postgres_run_that_fills_the_disk_writes_nothing_and_leaves_the_projects_pending() {
    pg::block_on(within(120, async {
        let url = pg::fresh_db().await;
        let admin = connect(&url).await;
        import(&admin, &fixtures::many_projects(6, 8, 4, 0)).await;

        let moved = [
            "tool_definition_snapshots",
            "tool_definition_snapshot_sources",
        ];
        let (volume, filler) = fill_under(&admin, &moved, RUN_VOLUME_KIB).await;

        let exec_store = connect(&pg::as_login(&url, "login_executor")).await;
        for batch_size in BATCH_SIZES {
            let report = one_attempt_each(&exec_store, 4, batch_size).await;
            assert_nothing_fit(&report, "53100");
            assert_eq!(
                scalar(&admin, "SELECT COUNT(*) FROM ql3.tool_definition_snapshots").await,
                0,
                "--batch-size {batch_size}"
            );
            assert_eq!(marked(&admin).await.len(), 6, "a project lost its mark");
        }
        println!(
            "after the full phase: {}",
            space_report(&admin, &volume, &moved).await
        );

        std::fs::remove_file(filler).expect("remove the filler");
        // With the room back, one run builds every project.
        let summary = run_all(&exec_store, false).await;
        let space = space_report(&admin, &volume, &moved).await;
        println!("the run with room: {summary:?}\nafter it: {space}");
        assert_eq!(summary.exit_code, Exit::Ok, "{summary:?}\n{space}");
        assert_eq!(summary.published, 6, "{summary:?}\n{space}");
        assert_eq!(partial_snapshots(&admin).await, 0);
        assert!(marked(&admin).await.is_empty());
        exec_store.close().await;
        admin.close().await;
    }));
}
