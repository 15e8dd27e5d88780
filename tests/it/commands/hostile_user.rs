//! The third outside review, as tests: what a hostile or careless user did to the release binary,
//! and forms of the same classes of our own. Each test failed on the build the review ran
//! (7475532) and passes now. The ones that need a server, on both dialects, are in
//! `on_postgres::hostile_user` and `hostile_user_sqlite` below.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use package_executor_testkit::{db, free_port};

/// The binary on the SQLite file `db`, logging JSON.
fn exe(db: &Path) -> Command {
    db::exe_blocking(&format!("sqlite://{}", db.display()), "5s")
}

/// Runs it to its end, failing the test after two minutes: a hang is what some of these were.
fn ends(mut cmd: Command) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("the command did not end within two minutes")
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The demo's database in a directory of its own: `dir/package-executor.db`.
fn demo(dir: &Path) -> PathBuf {
    let db = dir.join("package-executor.db");
    let mut cmd = exe(&db);
    cmd.arg("demo");
    let out = ends(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    db
}

fn digest_of_file(p: &Path) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(std::fs::read(p).unwrap()))
}

/// Review item 1: `run --summary-file package-executor.db` replaced the database with 259
/// bytes of JSON. Every path that reaches the database or a file SQLite keeps beside it, by
/// name, through a directory link, a symlink or a hard link, is refused before the run takes
/// work (exit 2), for both output flags, and the database is untouched.
#[test]
fn no_output_file_replaces_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo(dir.path());
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::os::unix::fs::symlink(dir.path(), dir.path().join("again")).unwrap();
    std::os::unix::fs::symlink(&db, dir.path().join("link.db")).unwrap();
    std::fs::hard_link(&db, dir.path().join("hard.db")).unwrap();
    let before = digest_of_file(&db);
    let paths = [
        "package-executor.db",
        "./package-executor.db",
        "package-executor.db-wal",
        "package-executor.db-shm",
        "package-executor.db-journal",
        "sub/../package-executor.db",
        "again/package-executor.db",
        "again/sub/../package-executor.db-wal",
        "link.db",
        "hard.db",
    ];
    for flag in ["--summary-file", "--metrics-file"] {
        for p in paths {
            let mut cmd = exe(Path::new("package-executor.db"));
            cmd.current_dir(dir.path()).args(["run", flag, p]);
            let out = ends(cmd);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{flag} {p}: {stderr}");
            assert!(
                stderr.contains(flag) && stderr.contains("would overwrite"),
                "{flag} {p}: {stderr}"
            );
        }
    }
    assert_eq!(digest_of_file(&db), before, "the database file changed");
    // And the database still answers.
    let mut cmd = exe(&db);
    cmd.args(["current", "demo-1"]);
    assert_eq!(ends(cmd).status.code(), Some(0));
    // A path beside it that is not one of its files is written as before.
    let mut cmd = exe(Path::new("package-executor.db"));
    cmd.current_dir(dir.path())
        .args(["run", "--summary-file", "package-executor.db.json"]);
    assert_eq!(ends(cmd).status.code(), Some(0));
    let summary = std::fs::read_to_string(dir.path().join("package-executor.db.json")).unwrap();
    assert!(summary.contains("\"exitCode\":0"), "{summary}");
}

/// A pipe whose reading end is already closed: every write to it fails with EPIPE.
fn closed_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Stdio::from(writer)
}

/// Review item 2: a closed pipe or a full device on standard error (and output) aborted the
/// process (exit 134) and left no summary or metrics file. Now a stream that went away never
/// ends the work: the run writes its files with its own code, `current` on a full stderr
/// exits 0, and nothing dies of a signal.
#[test]
fn a_closed_or_full_stream_never_aborts_a_command() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo(dir.path());
    let summary = dir.path().join("summary.json");
    let metrics = dir.path().join("m.prom");

    // Both streams closed: the run's work and its files stand; its code is 1 only because its
    // result on standard output could not be delivered (contract, section 10).
    let mut run = exe(&db);
    run.args(["run", "--full-scan", "--summary-file"])
        .arg(&summary)
        .arg("--metrics-file")
        .arg(&metrics)
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(closed_pipe());
    let status = run.status().unwrap();
    assert_eq!(status.signal(), None, "{status:?}");
    assert_eq!(status.code(), Some(1), "{status:?}");
    let written = std::fs::read_to_string(&summary).unwrap();
    assert!(written.contains("\"exitCode\":1"), "{written}");
    let prom = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        prom.contains("package_executor_last_run_exit_code 1"),
        "{prom}"
    );

    // Only standard error closed: the result is delivered and the code is the run's own.
    let mut run = exe(&db);
    run.args(["run", "--summary-file"])
        .arg(&summary)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(closed_pipe());
    let status = run.status().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        std::fs::read_to_string(&summary)
            .unwrap()
            .contains("\"exitCode\":0")
    );

    // Other commands and streams of our own: a full device, a closed pipe, text and JSON logs,
    // a usage error whose message cannot be written, a panic-free failure path.
    let full = || {
        Stdio::from(
            std::fs::File::options()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
    };
    let cases: [(&[&str], i32); 6] = [
        (&["current", "demo-1"], 0),
        (&["explain", "demo-rejected"], 0),
        (&["verify"], 0),
        (&["--log-format", "text", "current", "demo-1"], 0),
        (&["current", "no-such-project"], 4),
        (&["--no-such-flag"], 2),
    ];
    for (args, want) in cases {
        for err in [full(), closed_pipe()] {
            let status = exe(&db)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(err)
                .status()
                .unwrap();
            assert_eq!(status.signal(), None, "{args:?}: {status:?}");
            assert_eq!(status.code(), Some(want), "{args:?}: {status:?}");
        }
    }
    // `demo` into a pipe closed at once: an error (its output was not delivered), not an abort.
    let scratch = tempfile::tempdir().unwrap();
    let status = exe(&scratch.path().join("d.db"))
        .arg("demo")
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(closed_pipe())
        .status()
        .unwrap();
    assert_eq!(status.signal(), None, "{status:?}");
    assert_eq!(status.code(), Some(1), "{status:?}");
}

/// Review item 3: a database URL given without its flag was echoed whole by the argument
/// parser; a Pushgateway URL's query password reached standard output, the push path went
/// after the query, and a URL without a scheme was printed on both streams.
#[test]
fn no_password_reaches_output_through_a_misplaced_or_misshapen_url() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo(dir.path());
    // The argument parser's own errors, in forms of our own too.
    for args in [
        &["postgres://u:PwSecret1@db/app", "run"][..],
        &["run", "postgres://u:PwSecret1@db/app"],
        &["run", "--page-size", "postgres://u:PwSecret1@db/app"],
        &["--database-url"],
        &["current", "demo-1", "--known-digest", "u:PwSecret1@db:5432"],
    ] {
        let out = ends({
            let mut c = exe(&db);
            c.args(args);
            c
        });
        let all = text(&out.stdout) + &text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {all}");
        assert!(!all.contains("PwSecret1"), "{args:?}: {all}");
    }
    // Pushgateway URLs: nothing listens on the port, so each push fails and is reported.
    let port = free_port();
    for url in [
        format!("http://127.0.0.1:{port}/gw?password=PwSecret2"),
        format!("http://127.0.0.1:{port}?token=x&password=PwSecret2"),
        format!("http://me:PwSecret2@127.0.0.1:{port}"),
        format!("me:PwSecret2@127.0.0.1:{port}"),
        format!("127.0.0.1:{port}?password=PwSecret2"),
        format!("//me:PwSecret2@127.0.0.1:{port}"),
    ] {
        let out = ends({
            let mut c = exe(&db);
            c.args(["run", "--metrics-push-url", &url]);
            c
        });
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{url}: {stderr}");
        assert!(stdout.contains("warning: metrics"), "{url}: {stdout}");
        assert!(!stdout.contains("PwSecret2"), "{url}: {stdout}");
        assert!(!stderr.contains("PwSecret2"), "{url}: {stderr}");
    }
}

/// Review item 3, the push path: the grouping key goes after the base URL's path and before its
/// query, as a real listener on loopback receives it.
#[test]
fn the_push_path_goes_before_the_query() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo(dir.path());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n") && conn.read(&mut byte).unwrap() == 1 {
            head.push(byte[0]);
        }
        conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .unwrap();
        String::from_utf8(head).unwrap()
    });
    let out = ends({
        let mut c = exe(&db);
        c.args([
            "run",
            "--metrics-instance",
            "pe.test",
            "--metrics-push-url",
            &format!("http://127.0.0.1:{port}/gw/?password=PwSecret3"),
        ]);
        c
    });
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stdout).contains("warning"),
        "{}",
        text(&out.stdout)
    );
    let request_line = server.join().unwrap();
    assert_eq!(
        request_line,
        "POST /gw/metrics/job/package_executor/instance/pe.test/kind/recovery/shard/0?password=PwSecret3 HTTP/1.1\r\n"
    );
}

fn mkfifo(p: &Path) {
    let made = Command::new("mkfifo").arg(p).status().unwrap();
    assert!(made.success());
}

/// Review item 5: a FIFO as the summary or metrics file hung the run after its work (and a
/// SIGTERM then ended it with exit 3 and words about projects in flight). A FIFO nobody reads
/// is now a warning at once, and one that is read gets the text.
#[test]
fn a_fifo_output_never_hangs_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo(dir.path());
    let (summary, metrics) = (dir.path().join("s.fifo"), dir.path().join("m.fifo"));
    mkfifo(&summary);
    mkfifo(&metrics);
    let out = ends({
        let mut c = exe(&db);
        c.args(["run", "--summary-file"])
            .arg(&summary)
            .arg("--metrics-file")
            .arg(&metrics);
        c
    });
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains("no process has open for reading"),
        "{stdout}"
    );
    assert!(stderr.contains("cannot write the summary file"), "{stderr}");
    // With a reader on each, the text arrives whole.
    let open_reader = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(p)
            .unwrap()
    };
    let (mut s, mut m) = (open_reader(&summary), open_reader(&metrics));
    let out = ends({
        let mut c = exe(&db);
        c.args(["run", "--summary-file"])
            .arg(&summary)
            .arg("--metrics-file")
            .arg(&metrics);
        c
    });
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (mut got_s, mut got_m) = (String::new(), String::new());
    s.read_to_string(&mut got_s).unwrap();
    m.read_to_string(&mut got_m).unwrap();
    assert!(
        got_s.starts_with("{\"schema\":\"package-executor/run-summary@v1\""),
        "{got_s}"
    );
    assert!(
        got_m.contains("package_executor_last_run_exit_code 0"),
        "{got_m}"
    );
}

/// Review item 6: `trigger --timeout` did not bound reading the template (a FIFO blocked past
/// it; `/dev/zero` grew without bound). Forms of our own: a directory, a large regular file.
#[test]
fn trigger_reads_its_template_within_the_timeout_and_a_size_bound() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("job.fifo");
    mkfifo(&fifo);
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, "#".repeat(2 * 1024 * 1024)).unwrap();
    let trigger = |template: &Path, timeout: &str| {
        let mut c = Command::new(package_executor_testkit::executable());
        c.env_remove("KUBERNETES_SERVICE_HOST")
            .args([
                "trigger",
                "--publication-id",
                "p1",
                "--dry-run",
                "--timeout",
                timeout,
            ])
            .arg("--job-template")
            .arg(template);
        ends(c)
    };
    let started = std::time::Instant::now();
    let out = trigger(&fifo, "2s");
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("within --timeout"));
    // Bounded by the timeout, not by the test's two minutes (a coarse bound, not a timing).
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    for (path, words) in [
        (Path::new("/dev/zero"), "larger than"),
        (big.as_path(), "larger than"),
        (dir.path(), "give a readable"),
    ] {
        let out = trigger(path, "30s");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", path.display());
        assert!(stderr.contains(words), "{}: {stderr}", path.display());
    }
}

/// Review item 11: after `migrate` the schema sat in the `-wal` file, so the database file
/// copied alone was not migrated.
#[test]
fn the_migrated_database_file_stands_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("pe.db");
    let out = ends({
        let mut c = exe(&db);
        c.arg("migrate");
        c
    });
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    std::fs::copy(&db, copy.join("pe.db")).unwrap();
    let out = ends({
        let mut c = exe(&copy.join("pe.db"));
        c.args(["migrate", "--check"]);
        c
    });
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// Review item 11: `canonicalize -` read a file named `-`; and a fixture that starts with a
/// byte-order mark got only the parser's "expected value at line 1 column 1".
#[test]
fn a_dash_is_standard_input_and_a_bom_is_named() {
    let mut c = Command::new(package_executor_testkit::executable());
    c.args(["canonicalize", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"b":1,"a":2}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(out.stdout, br#"{"a":2,"b":1}"#);

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("pe.db");
    let mut c = exe(&db);
    c.arg("migrate");
    assert_eq!(ends(c).status.code(), Some(0));
    let fixture = dir.path().join("bom.json");
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend_from_slice(db::DEMO);
    std::fs::write(&fixture, bytes).unwrap();
    let out = ends({
        let mut c = exe(&db);
        c.args(["sources", "import"]).arg(&fixture);
        c
    });
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("byte-order mark"), "{stderr}");
}

/// Review item 8 on SQLite: one damaged file gave `run` 8, `publish` 3 (which a Job retries as
/// transient) and `current`, `explain` and `verify` 1. A damaged file is no transient state:
/// every command exits 1 and says to restore it.
#[test]
fn a_damaged_sqlite_file_exits_1_from_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let good = demo(dir.path());
    for table in ["tool_definition_snapshots", "package_generations"] {
        let damaged = dir.path().join(format!("{table}.db"));
        damage(&good, &damaged, table);
        for args in [
            &["run", "--full-scan"][..],
            &["publish", "demo-1"],
            &["current", "demo-1"],
            &["explain", "demo-1"],
            &["verify"],
        ] {
            let out = ends({
                let mut c = exe(&damaged);
                c.args(args);
                c
            });
            let stderr = text(&out.stderr);
            if table == "package_generations" && args[0] == "verify" {
                // verify reads snapshots only: their table is whole here.
                continue;
            }
            assert_eq!(out.status.code(), Some(1), "{table} {args:?}: {stderr}");
            assert!(stderr.contains("damaged"), "{table} {args:?}: {stderr}");
        }
    }
}

/// A copy of the SQLite file `from` at `to`, checkpointed, with `table`'s root page overwritten
/// by a leaf page header and garbage: the schema reads, the table's rows do not.
fn damage(from: &Path, to: &Path, table: &str) {
    let out = ends({
        let mut c = Command::new("python3");
        c.args([
            "-c",
            r#"
import shutil, sqlite3, sys
src, dst, table = sys.argv[1:]
c = sqlite3.connect(src); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()
shutil.copyfile(src, dst)
c = sqlite3.connect(dst)
root = c.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
c.close()
b = bytearray(open(dst, "rb").read())
size = int.from_bytes(b[16:18], "big")
b[(root - 1) * size:root * size] = b"\x0d" + b"\xee" * (size - 1)
open(dst, "wb").write(b)
"#,
        ])
        .arg(from)
        .arg(to)
        .arg(table);
        c
    });
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Review item 7: input reached output raw and whole (100 KB seen), terminal escapes and line
/// breaks included, from `current`, `explain`, `verify`, `publish` and the control commands.
/// Every line stays short, and no control character reaches it raw, in text or JSON logs.
#[test]
fn input_reaches_output_quoted_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo(dir.path());
    let hostile = format!("x\u{1b}[2J\r\nEVIL{}", "y".repeat(100_000));
    for format in ["text", "json"] {
        for args in [
            vec!["current", hostile.as_str()],
            vec!["current", hostile.as_str(), "--json"],
            vec!["explain", hostile.as_str()],
            vec!["verify", "--project", hostile.as_str()],
            vec!["publish", hostile.as_str()],
            vec![
                "sources",
                "remove",
                "--project",
                hostile.as_str(),
                "--package",
                hostile.as_str(),
            ],
            vec![
                "sources",
                "activate",
                "--installation",
                hostile.as_str(),
                "--generation",
                "1",
            ],
        ] {
            let out = ends({
                let mut c = exe(&db);
                c.args(["--log-format", format]).args(&args);
                c
            });
            for stream in [&out.stdout, &out.stderr] {
                let s = text(stream);
                assert!(
                    !s.contains('\u{1b}') && !s.contains('\r'),
                    "{args:?}: {s:.300}"
                );
                assert!(!s.contains("\nEVIL"), "{args:?}: {s:.300}");
                for line in s.lines() {
                    assert!(
                        line.len() < 2048,
                        "{args:?}: a line of {} bytes",
                        line.len()
                    );
                }
            }
        }
    }
}

// The bodies that run on both dialects: here on SQLite files, and in
// `on_postgres::hostile_user` on the test server.

/// The binary on `url` (either dialect).
pub(super) fn on(url: &str) -> tokio::process::Command {
    db::exe(url, "5s")
}

/// Runs it to its end (two minutes at most): its code, stdout and stderr.
pub(super) async fn outcome(mut cmd: tokio::process::Command) -> (Option<i32>, String, String) {
    let out = db::ends(&mut cmd).await;
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// `url` with the demo imported and built.
pub(super) async fn with_demo(url: &str) {
    for args in [&["sources", "import", db::DEMO_PATH][..], &["run"]] {
        let mut c = on(url);
        c.args(args);
        let (code, _, err) = outcome(c).await;
        assert_eq!(code, Some(0), "{args:?}: {err}");
    }
}

/// Review item 4: a `projectId` or `lockDigest` holding U+0000 passed SQLite's checks (which
/// read text only up to the NUL) and became a project no command could name. The fixture
/// reader refuses it on both dialects, naming where, and the database refuses it from plain
/// SQL too (PostgreSQL has no NUL in text; SQLite's triggers of migration 7).
pub(super) async fn nul_bytes_never_reach_the_source_tables(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    for (field, project, lock) in [
        ("projectId", "demo\\u0000x", digest.to_owned()),
        (
            "packages[0].generations[0].lockDigest",
            "nul-lock",
            format!("{digest}\\u0000junk"),
        ),
    ] {
        let fixture = dir.path().join("nul.json");
        std::fs::write(
            &fixture,
            format!(
                r#"{{"schema":"package-executor/fixture@v1","projects":[{{"projectId":"{project}",
                "packages":[{{"packageName":"a","installationId":"nul-a","generations":[
                {{"generation":1,"status":"active","lockDigest":"{lock}","revisionText":"{{}}"}}]}}]}}]}}"#
            ),
        )
        .unwrap();
        let mut c = on(url);
        c.args(["sources", "import"]).arg(&fixture);
        let (code, _, err) = outcome(c).await;
        assert_eq!(code, Some(1), "{field}: {err}");
        assert!(
            err.contains(&format!("{field} holds a NUL byte")),
            "{field}: {err}"
        );
    }
    let store = db::connect(url).await;
    let nul = match store.dialect() {
        package_executor::store::Dialect::Postgres => "chr(0)",
        package_executor::store::Dialect::Sqlite => "char(0)",
    };
    for statement in [
        format!("INSERT INTO ql3.projects (project_id) VALUES ('nul-sql' || {nul} || 'x')"),
        format!(
            "INSERT INTO ql3.package_installations (installation_id, project_id, package_name) \
             VALUES ('demo-1-nul' || {nul}, 'demo-1', 'nul-pkg')"
        ),
        format!(
            "INSERT INTO ql3.package_installations (installation_id, project_id, package_name) \
             VALUES ('demo-1-nul', 'demo-1', 'nul-pkg' || {nul} || 'x')"
        ),
    ] {
        let refused = db::exec(&store, &statement).await;
        assert!(refused.is_err(), "{statement}: {refused:?}");
    }
    assert_eq!(
        db::scalar(
            &store,
            "SELECT count(*) FROM ql3.projects WHERE project_id LIKE 'nul%' OR project_id LIKE 'demo%x'"
        )
        .await,
        0
    );
    store.close().await;
    // Every project stays reachable: nothing became `source-invalid`.
    let mut c = on(url);
    c.args(["run", "--full-scan", "--json"]);
    let (code, out, err) = outcome(c).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains("source-invalid"), "{out}");
}

/// Review item 8: `run --deadline 0` with nothing pending exited 3. A run stopped before it
/// took work says 3 only when something of its shard is pending.
pub(super) async fn a_stopped_run_is_pending_only_if_something_is(url: &str) {
    let mut c = on(url);
    c.args(["run", "--deadline", "0", "--json"]);
    let (code, out, err) = outcome(c).await;
    assert_eq!(code, Some(0), "nothing pending: {out} {err}");
    let mut c = on(url);
    c.args([
        "sources",
        "activate",
        "--installation",
        "demo-1-github",
        "--generation",
        "3",
    ]);
    assert_eq!(outcome(c).await.0, Some(0));
    let mut c = on(url);
    c.args(["run", "--deadline", "0", "--json"]);
    let (code, out, err) = outcome(c).await;
    assert_eq!(code, Some(3), "demo-1 pending: {out} {err}");
    assert!(out.contains("\"exitCode\":3"), "{out}");
}

/// Review item 11: `explain` sent a person to `publish` for a head on a `queued` generation,
/// which can only end in generation-drift; and `verify --project NOPE` said "0 snapshots".
pub(super) async fn explain_and_verify_name_the_real_next_step(url: &str) {
    let store = db::connect(url).await;
    db::exec(
        &store,
        "UPDATE ql3.package_generations SET status = 'queued' \
         WHERE installation_id = 'demo-1-github' AND generation = 2",
    )
    .await
    .unwrap();
    store.close().await;
    let mut c = on(url);
    c.args(["explain", "demo-1"]);
    let (code, out, err) = outcome(c).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("generation 2 is queued, not active"), "{out}");
    assert!(out.contains("generation-drift"), "{out}");
    let next = out
        .lines()
        .find(|l| l.trim_start().starts_with("next step"))
        .unwrap_or_default();
    assert!(!next.contains("publish demo-1`"), "{out}");
    // And the run does what explain said.
    let mut c = on(url);
    c.args(["publish", "demo-1", "--json"]);
    let (_, out, _) = outcome(c).await;
    assert!(out.contains("generation-drift"), "{out}");

    let mut c = on(url);
    c.args(["verify", "--project", "no-such-project"]);
    let (code, _, err) = outcome(c).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("does not exist"), "{err}");
    let mut c = on(url);
    c.args(["verify", "--project", "demo-1"]);
    assert_eq!(outcome(c).await.0, Some(0));
}

/// Review item 7 on either dialect: a hostile id typed on the command line comes back quoted,
/// bounded and escaped from every command that names it.
pub(super) async fn a_hostile_id_is_quoted_by_every_command(url: &str) {
    let hostile = format!("x\u{1b}]0;title\u{7}\r\n{}", "z".repeat(50_000));
    for args in [
        vec!["current", hostile.as_str()],
        vec!["explain", hostile.as_str()],
        vec!["verify", "--project", hostile.as_str()],
        vec!["publish", hostile.as_str()],
        vec![
            "sources",
            "remove",
            "--project",
            hostile.as_str(),
            "--package",
            "a",
        ],
    ] {
        let mut c = on(url);
        c.args(&args);
        let (_, out, err) = outcome(c).await;
        for s in [&out, &err] {
            assert!(
                !s.contains('\u{1b}') && !s.contains('\u{7}'),
                "{:?}: {s:.200}",
                args[0]
            );
            assert!(s.lines().all(|l| l.len() < 2048), "{:?}: {s:.200}", args[0]);
        }
        assert!(
            (out.clone() + &err).contains(&format!("({} bytes)", hostile.len())),
            "{:?}: the full length is given: {out:.300} {err:.300}",
            args[0]
        );
    }
}

mod on_sqlite {
    use package_executor_testkit::{pg, within};

    #[tokio::test]
    async fn nul_bytes_never_reach_the_source_tables() {
        let (url, _dir) = pg::fresh_sqlite().await;
        within(120, super::nul_bytes_never_reach_the_source_tables(&url)).await;
    }

    #[tokio::test]
    async fn a_stopped_run_is_pending_only_if_something_is() {
        let (url, _dir) = pg::fresh_sqlite().await;
        super::with_demo(&url).await;
        within(
            120,
            super::a_stopped_run_is_pending_only_if_something_is(&url),
        )
        .await;
    }

    #[tokio::test]
    async fn explain_and_verify_name_the_real_next_step() {
        let (url, _dir) = pg::fresh_sqlite().await;
        super::with_demo(&url).await;
        within(120, super::explain_and_verify_name_the_real_next_step(&url)).await;
    }

    #[tokio::test]
    async fn a_hostile_id_is_quoted_by_every_command() {
        let (url, _dir) = pg::fresh_sqlite().await;
        super::with_demo(&url).await;
        within(120, super::a_hostile_id_is_quoted_by_every_command(&url)).await;
    }
}
