//! SIGINT (Ctrl-C) and SIGTERM end a run within its grace period, on a terminal and off it,
//! while every attempt hangs on a lock another session holds: the run takes no new project,
//! abandons the attempts in flight when the grace period is over (their transactions roll
//! back), prints its summary and exits 3; a second signal ends it at once. Nothing is written,
//! `verify` passes, and a later run builds every project.
//!
//! The same bodies on PostgreSQL, in the `pg` tier (another session holds `project_claims` in
//! ACCESS EXCLUSIVE mode; the executor's lock timeout is 10 minutes, so every attempt hangs),
//! and on SQLite (another connection holds the write lock). On SQLite a held write lock does
//! not hang an attempt: its read transaction cannot become a write one, so SQLite answers
//! SQLITE_BUSY at once, without waiting in the busy timeout, and the attempt is retried after
//! a backoff. There the signal meets attempts between retries, and the run ends at once.

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use package_executor_testkit::db::{self, DEMO};
use package_executor_testkit::executable;
use package_executor_testkit::pg;
use package_executor_testkit::pty::OnPty;
use sqlx::Connection as _;

/// The grace period the runs are given, and how long a stopped run may take in all: the grace,
/// the signal thread's margin, and slack for a loaded machine. A run that ignores its signal
/// runs into the lock's timeout (30 s on SQLite, 10 minutes on PostgreSQL) and fails here.
const GRACE: &str = "2s";
const ENDS_WITHIN: Duration = Duration::from_secs(20);

/// A session that keeps every executor write waiting until it is dropped.
enum Hold {
    Lite(sqlx::SqliteConnection),
    Pg(sqlx::PgConnection),
}

impl Hold {
    async fn take(url: &str) -> Self {
        if url.starts_with("sqlite:") {
            let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
            sqlx::raw_sql("BEGIN IMMEDIATE")
                .execute(&mut c)
                .await
                .unwrap();
            Self::Lite(c)
        } else {
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::raw_sql("BEGIN; LOCK TABLE ql3.project_claims IN ACCESS EXCLUSIVE MODE")
                .execute(&mut c)
                .await
                .unwrap();
            Self::Pg(c)
        }
    }

    /// Waits (at most 30 s) until an executor's session waits for this one's lock (SQLite
    /// has no waiters; see the module's comment).
    async fn until_waited_for(&mut self) {
        if let Self::Pg(c) = self {
            pg::until_a_session_waits_for_a_lock(c, Duration::from_secs(30)).await;
        }
    }

    async fn release(self) {
        match self {
            Self::Lite(c) => c.close().await.unwrap(),
            Self::Pg(c) => c.close().await.unwrap(),
        }
    }
}

/// The flags that make an attempt wait for the lock rather than give up on it.
fn run_args(extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec![
        "run",
        "--shutdown-grace",
        GRACE,
        "--lock-timeout",
        "10m",
        "--statement-timeout",
        "10m",
    ];
    args.extend_from_slice(extra);
    args
}

/// The log filter that shows each attempt as it starts: a project in flight.
const SHOW_ATTEMPTS: (&str, &str) = ("PACKAGE_EXECUTOR_LOG", "info,package_executor=debug");

/// A database with the example fixture imported: its URL, and the folder that keeps it.
async fn imported(sqlite: bool) -> (String, Option<tempfile::TempDir>) {
    let (url, dir) = if sqlite {
        let (url, dir) = pg::fresh_sqlite().await;
        (url, Some(dir))
    } else {
        (pg::fresh_db().await, None)
    };
    let store = db::connect(&url).await;
    db::import(&store, DEMO).await;
    store.close().await;
    (url, dir)
}

/// After a stopped run: nothing was written, every project is still marked, `verify` passes,
/// and a run with the lock free builds them all.
async fn assert_nothing_written_then_converges(url: &str) {
    let store = db::connect(url).await;
    assert_eq!(
        db::scalar(&store, "SELECT COUNT(*) FROM ql3.tool_definition_snapshots").await,
        0,
        "a stopped run wrote a snapshot"
    );
    assert_eq!(db::marked(&store).await.len(), 4, "a project lost its mark");
    store.close().await;
    let verify = Command::new(executable())
        .args(["verify"])
        .env("DATABASE_URL", url)
        .output()
        .unwrap();
    assert_eq!(verify.status.code(), Some(0), "{verify:?}");
    let again = Command::new(executable())
        .args(["run", "--json"])
        .env("DATABASE_URL", url)
        .output()
        .unwrap();
    let summary: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(summary["exitCode"], 0, "{again:?}");
    assert_eq!(summary["published"], 3, "{summary}");
}

/// A run on a terminal, stopped by Ctrl-C typed into it.
async fn ctrl_c_on_a_terminal(sqlite: bool) {
    let (url, _dir) = imported(sqlite).await;
    let mut hold = Hold::take(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let mut run = OnPty::spawn(
        &executable(),
        &run_args(&[]),
        &[("DATABASE_URL", &url), SHOW_ATTEMPTS],
        dir.path(),
    );
    run.wait_for("attempt started", ENDS_WITHIN);
    hold.until_waited_for().await;
    let signalled = Instant::now();
    run.type_in(b"\x03");
    let done = run.finish(ENDS_WITHIN);
    println!("Ctrl-C to exit: {:?}", signalled.elapsed());
    assert_eq!(done.code(), 3, "{}", done.screen);
    assert!(done.screen.contains("SIGINT"), "{}", done.screen);
    assert!(done.screen.contains("run finished"), "{}", done.screen);
    assert!(done.screen.contains("exit code 3"), "{}", done.screen);
    assert!(
        sqlite
            || done
                .screen
                .contains("did not finish within the grace period"),
        "{}",
        done.screen
    );
    hold.release().await;
    assert_nothing_written_then_converges(&url).await;
}

/// `args` on `url` off a terminal (as in a pod), each attempt logged as it starts; the
/// process, and its standard error's lines as they come.
fn off_a_terminal(url: &str, args: &[&str]) -> (Child, Receiver<String>) {
    let mut child = Command::new(executable())
        .args(args)
        .env("DATABASE_URL", url)
        .env(SHOW_ATTEMPTS.0, SHOW_ATTEMPTS.1)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    (child, lines)
}

/// Lines of a child's standard error as they come.
fn lines_of(child: &mut Child) -> Receiver<String> {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits for a line containing `text`; returns every line read so far.
fn wait_for_line(lines: &Receiver<String>, seen: &mut Vec<String>, text: &str) {
    let end = Instant::now() + ENDS_WITHIN;
    while !seen.iter().any(|l| l.contains(text)) {
        let left = end.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(e) => panic!("no log line with `{text}` ({e}); the lines: {seen:#?}"),
        }
    }
}

fn kill(pid: u32, signal: &str) {
    package_executor_testkit::pty::signal(pid, signal);
}

/// Waits for `child` at most [`ENDS_WITHIN`]; kills it and panics when it does not end.
fn finish(mut child: Child, lines: &Receiver<String>, seen: &mut Vec<String>) -> (i32, String) {
    let end = Instant::now() + ENDS_WITHIN;
    loop {
        while let Ok(line) = lines.try_recv() {
            seen.push(line);
        }
        if let Some(status) = child.try_wait().unwrap() {
            let mut stdout = String::new();
            std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut stdout).unwrap();
            // The rest of standard error, now that the writer is gone.
            seen.extend(lines.iter());
            return (status.code().expect("an exit code, not a signal"), stdout);
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("the run did not end within {ENDS_WITHIN:?}; its log: {seen:#?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A run off a terminal (a pod), stopped by SIGTERM: JSON logs, the JSON summary.
async fn sigterm_off_a_terminal(sqlite: bool) {
    let (url, _dir) = imported(sqlite).await;
    let mut hold = Hold::take(&url).await;
    let (child, lines) = off_a_terminal(&url, &run_args(&["--json"]));
    let mut seen = Vec::new();
    wait_for_line(&lines, &mut seen, "attempt started");
    hold.until_waited_for().await;
    let signalled = Instant::now();
    kill(child.id(), "TERM");
    let (code, stdout) = finish(child, &lines, &mut seen);
    println!("SIGTERM to exit: {:?}", signalled.elapsed());
    assert_eq!(code, 3, "{stdout}\n{seen:#?}");
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(summary["exitCode"], 3, "{summary}");
    assert_eq!(summary["published"], 0, "{summary}");
    // The attempts in flight were abandoned at the end of the grace period.
    assert!(
        sqlite
            || seen
                .iter()
                .any(|l| l.contains("did not finish within the grace period")),
        "{seen:#?}"
    );
    assert!(
        seen.iter()
            .any(|l| l.starts_with('{') && l.contains("SIGTERM") && l.contains("stopping")),
        "{seen:#?}"
    );
    hold.release().await;
    assert_nothing_written_then_converges(&url).await;
}

/// A second signal ends the run at once, long before its grace period (here 10 minutes).
async fn a_second_signal_ends_it_at_once() {
    let (url, _dir) = imported(false).await;
    let mut hold = Hold::take(&url).await;
    let (child, lines) = off_a_terminal(
        &url,
        &["run", "--shutdown-grace", "10m", "--lock-timeout", "10m"],
    );
    let mut seen = Vec::new();
    wait_for_line(&lines, &mut seen, "attempt started");
    hold.until_waited_for().await;
    kill(child.id(), "TERM");
    wait_for_line(&lines, &mut seen, "stopping");
    let signalled = Instant::now();
    kill(child.id(), "INT");
    let (code, _) = finish(child, &lines, &mut seen);
    println!("second signal to exit: {:?}", signalled.elapsed());
    assert_eq!(code, 3, "{seen:#?}");
    assert!(
        seen.iter()
            .any(|l| l.contains("SIGINT: ending the run now")),
        "{seen:#?}"
    );
    hold.release().await;
    assert_nothing_written_then_converges(&url).await;
}

#[test]
fn ctrl_c_on_a_terminal_ends_a_sqlite_run_that_meets_a_locked_file() {
    pg::block_on(ctrl_c_on_a_terminal(true));
}

#[test]
fn sigterm_off_a_terminal_ends_a_sqlite_run_that_meets_a_locked_file() {
    pg::block_on(sigterm_off_a_terminal(true));
}

/// A stop that comes while the run is still connecting (here to a server that accepts the
/// connection and never answers) ends it at once, before it takes any work: exit 3 and its
/// summary. Signals are watched from the start: in a container the executor is PID 1, for
/// which the kernel has no default action on SIGTERM, and a stop lost there let a pod told to
/// end go on to build (found on the end-to-end tier, `tests/cluster/chart.rs`).
#[test]
fn sigterm_while_the_run_connects_ends_it_before_any_work() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let url = format!("postgres://pe_executor:unused@127.0.0.1:{port}/db");
    let (child, lines) = off_a_terminal(&url, &["run", "--json", "--connect-timeout", "5m"]);
    // The run is connecting once its connection is here; it is never answered.
    let (_held, _) = silent.accept().unwrap();
    kill(child.id(), "TERM");
    let mut seen = Vec::new();
    let (code, stdout) = finish(child, &lines, &mut seen);
    assert_eq!(code, 3, "{stdout}\n{seen:#?}");
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(summary["exitCode"], 3, "{summary}");
    assert_eq!(summary["projectsScanned"], 0, "{summary}");
    assert!(
        seen.iter()
            .any(|l| l.contains("stopped before the run took any work")),
        "{seen:#?}"
    );
}

/// The `pg` tier's half: runs that hang. (A second signal needs a run that outlives the first:
/// on SQLite, none does.)
mod on_postgres {
    use super::*;

    #[test]
    fn ctrl_c_on_a_terminal_ends_a_hung_run_within_its_grace() {
        pg::block_on(ctrl_c_on_a_terminal(false));
    }

    #[test]
    fn sigterm_off_a_terminal_ends_a_hung_run_within_its_grace() {
        pg::block_on(sigterm_off_a_terminal(false));
    }

    #[test]
    fn a_second_signal_ends_a_hung_run_at_once() {
        pg::block_on(a_second_signal_ends_it_at_once());
    }
}
