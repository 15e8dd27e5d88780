//! What a SQLite URL may name, and the exit codes of what it must not: a file no retry can make
//! usable (read-only, in a read-only directory, a directory, a device, a symlink loop, random
//! bytes, another application's database) is a configuration error, exit 1, never "database
//! unavailable" (8) or "unresolved" (3), which a Job retries; a shard setting that cannot hold
//! is a usage error, exit 2. And no command changes a file it has not recognised as ours: no
//! switch to WAL mode, no `-wal` or `-shm` beside it.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output};

use package_executor_testkit::{db, executable};

fn exe(db: &Path, args: &[&str]) -> Output {
    db::exe_blocking(&format!("sqlite://{}", db.display()), "5s")
        .args(args)
        .output()
        .unwrap()
}

/// The bytes and names of a directory's entries, to show that nothing in it changed.
fn listing(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    out.sort();
    out
}

/// A migrated database with the demo imported, at `dir/pe.db`.
fn ours(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("pe.db");
    let fixture = package_executor_testkit::db::DEMO_PATH;
    assert!(exe(&db, &["migrate"]).status.success());
    assert!(exe(&db, &["sources", "import", fixture]).status.success());
    db
}

/// The binary, run as another user than root where the test runs as root (root writes
/// read-only files). That user may not reach the build's own copy (a clone under a home
/// directory of mode 0700), so it runs a copy in a directory of its own that anyone can read.
fn as_nobody(work: &Path) -> Command {
    use std::os::unix::process::CommandExt as _;
    if !package_executor_testkit::pg::is_root() {
        return Command::new(executable());
    }
    let copy = work.join("package-executor");
    std::fs::copy(executable(), &copy).unwrap();
    std::fs::set_permissions(work, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(copy);
    cmd.uid(65534).gid(65534).env_remove("HOME");
    cmd
}

#[test]
fn files_no_retry_can_use_are_configuration_errors() {
    let dir = tempfile::tempdir().unwrap();
    let random = dir.path().join("random.db");
    std::fs::write(
        &random,
        (0..4096u32)
            .map(|i| (i * 7919 % 251) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let looped = dir.path().join("loop.db");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    let cases: [(&str, &Path); 4] = [
        ("a directory", dir.path()),
        ("a device", Path::new("/dev/null")),
        ("a symlink loop", &looped),
        ("random bytes", &random),
    ];
    for (what, path) in cases {
        for args in [&["run"][..], &["current", "demo-1"], &["migrate"]] {
            let out = exe(path, args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{what} {args:?}: {stderr}");
            assert!(stderr.contains("DATABASE_URL"), "{what} {args:?}: {stderr}");
        }
    }

    // Read-only for the user that runs it: the file, then its directory.
    let ro = tempfile::tempdir().unwrap();
    let db = ours(ro.path());
    std::fs::set_permissions(ro.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    let bin = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        as_nobody(bin.path())
            .args(args)
            .env("DATABASE_URL", format!("sqlite://{}", db.display()))
            .env("PACKAGE_EXECUTOR_LOG_FORMAT", "json")
            .output()
            .unwrap()
    };
    let out = run(&["run"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a read-only file: {stderr}");
    assert!(stderr.contains("writable"), "{stderr}");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(ro.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    for f in ["pe.db-wal", "pe.db-shm"] {
        let _ = std::fs::remove_file(ro.path().join(f));
    }
    let out = run(&["run"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    std::fs::set_permissions(ro.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a read-only directory: {stderr}"
    );
    assert!(stderr.contains("writable"), "{stderr}");
}

#[test]
fn no_command_changes_a_file_it_has_not_recognised_as_ours() {
    let dir = tempfile::tempdir().unwrap();
    // Another application's database, in the rollback journal mode, and an empty file.
    let theirs = dir.path().join("theirs.db");
    {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            use sqlx::ConnectOptions as _;
            let mut c = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&theirs)
                .create_if_missing(true)
                .connect()
                .await
                .unwrap();
            sqlx::raw_sql("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine')")
                .execute(&mut c)
                .await
                .unwrap();
            sqlx::Connection::close(c).await.unwrap();
        });
    }
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let before = listing(dir.path());
    for (path, code_for_readers) in [(&theirs, 1), (&empty, 8)] {
        for args in [
            &["current", "demo-1"][..],
            &["explain", "demo-1"],
            &["verify"],
            &["run"],
            &["publish", "demo-1"],
        ] {
            let out = exe(path, args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(code_for_readers),
                "{} {args:?}: {stderr}",
                path.display()
            );
        }
    }
    // migrate sets up an empty file, and refuses another application's.
    let out = exe(&theirs, &["migrate"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("another application's"));
    let after = listing(dir.path());
    assert_eq!(before, after, "a command changed a file that is not ours");
    assert!(exe(&empty, &["migrate"]).status.success());
}

#[test]
fn shard_settings_that_cannot_hold_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = ours(dir.path());
    for (args, env) in [
        (&["run", "--shard-count", "0"][..], None),
        (&["run", "--shard-index", "3", "--shard-count", "3"], None),
        (&["run", "--shard-count", "3"], Some("x1")),
    ] {
        let mut cmd = Command::new(executable());
        cmd.args(args)
            .env("DATABASE_URL", format!("sqlite://{}", db.display()))
            .env_remove("KUBERNETES_SERVICE_HOST");
        match env {
            Some(v) => cmd.env("JOB_COMPLETION_INDEX", v),
            None => cmd.env_remove("JOB_COMPLETION_INDEX"),
        };
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {out:?}");
    }
}

/// An in-memory SQLite database lasts only as long as the command: `migrate` into one reported
/// success into a database that was then thrown away. Refused, with what to do.
#[test]
fn an_in_memory_database_is_refused() {
    for url in ["sqlite::memory:", "sqlite://", "sqlite:"] {
        for args in [&["migrate"][..], &["run"], &["current", "demo-1"]] {
            let out = Command::new(executable())
                .args(args)
                .env("DATABASE_URL", url)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{url} {args:?}: {stderr}");
            assert!(
                stderr.contains("point DATABASE_URL at"),
                "{url} {args:?}: {stderr}"
            );
        }
    }
}
