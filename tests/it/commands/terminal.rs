//! Every command a person types, on a real pseudo-terminal (crates/testkit/src/pty.rs), each
//! with a timeout: it finishes, exits as documented, and the screen shows its result; the
//! progress bar is drawn only on a terminal, and JSON logs are written only off one.
//!
//! The commands once hung here, and only here: a log line written while the progress bar was
//! cleared for another waited for the bar's lock for ever (src/commands/terminal.rs).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use package_executor_testkit::executable;
use package_executor_testkit::pty::{Finished, OnPty};

/// Longer than any of these commands takes on a busy two-core machine; a hang ends here.
const HANG: Duration = Duration::from_secs(60);

/// The spinner's first frame: drawn only while a bar is shown.
const SPINNER: &str = "⠁";

/// Runs the binary with `args` on a terminal in `dir` (its default database is the SQLite
/// file there), and waits for it.
fn on_terminal(dir: &Path, args: &[&str]) -> Finished {
    OnPty::spawn(&executable(), args, &[], dir).finish(HANG)
}

/// A directory whose default database holds the example fixture, imported and not yet run.
fn imported() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo-fixture.json");
    for args in [
        vec!["migrate"],
        vec!["sources", "import", fixture.to_str().unwrap()],
    ] {
        let out = Command::new(executable())
            .args(&args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    dir
}

/// What a terminal shows of logs: text lines, never a JSON one (whose first member is the
/// time; a `--json` result is a JSON line too, but no log line).
fn assert_text_logs(done: &Finished) {
    assert!(
        !done.screen.lines().any(|l| l.starts_with("{\"timestamp\"")),
        "a JSON log line on a terminal:\n{}",
        done.screen
    );
}

/// The bar was drawn while the command ran, and cleared before its result was printed.
fn assert_bar_drawn_and_cleared(done: &Finished) {
    assert!(
        done.raw_text().contains(SPINNER),
        "no progress bar on a terminal: {:?}",
        done.raw_text()
    );
    assert!(
        !done.screen.contains(SPINNER),
        "the bar was left on the screen:\n{}",
        done.screen
    );
}

#[test]
fn demo_on_a_terminal_finishes_and_shows_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let done = on_terminal(dir.path(), &["demo"]);
    assert_eq!(done.code(), 0, "{}", done.screen);
    for shown in [
        "1. migrated the SQLite database",
        "2. imported the example fixture: 4 projects",
        "demo-1           published",
        "demo-rejected    rejected         forbidden-field",
        "project demo-1: current snapshot sha256:",
        "Try: package-executor explain demo-rejected",
    ] {
        assert!(
            done.screen.contains(shown),
            "`{shown}` not shown:\n{}",
            done.screen
        );
    }
    // The rejection's log line, in text, above the table.
    assert!(
        done.screen.contains("WARN project not published"),
        "{}",
        done.screen
    );
    assert_text_logs(&done);
    assert_bar_drawn_and_cleared(&done);
}

#[test]
fn run_with_work_and_a_rejection_on_a_terminal_finishes_and_prints_its_summary() {
    let dir = imported();
    let done = on_terminal(dir.path(), &["run"]);
    assert_eq!(done.code(), 0, "{}", done.screen);
    assert!(
        done.screen.contains("4 projects, 3 published"),
        "{}",
        done.screen
    );
    assert!(
        done.screen.contains("rejected: forbidden-field 1"),
        "{}",
        done.screen
    );
    assert!(done.screen.contains("exit code 0"), "{}", done.screen);
    assert_text_logs(&done);
    assert_bar_drawn_and_cleared(&done);

    // With --fail-on-rejected the same work exits 6 (the rejection is recorded, so the project
    // is built again only with --full-scan).
    let done = on_terminal(dir.path(), &["run", "--full-scan", "--fail-on-rejected"]);
    assert_eq!(done.code(), 6, "{}", done.screen);
    assert!(done.screen.contains("exit code 6"), "{}", done.screen);
}

#[test]
fn the_read_and_write_commands_on_a_terminal_finish_and_show_their_results() {
    let dir = imported();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo-fixture.json");
    let fixture = fixture.to_str().unwrap();
    // (arguments, exit code, what the screen shows)
    let cases: &[(&[&str], i32, &str)] = &[
        (&["--help"], 0, "Usage: package-executor"),
        (&["migrate"], 0, "schema is up to date (SQLite)"),
        (
            &["sources", "import", fixture],
            0,
            "imported 4 projects from",
        ),
        (
            &["sources", "import", fixture, "--dry-run"],
            0,
            "nothing was written",
        ),
        (&["current", "demo-1"], 4, "demo-1"),
        (&["publish", "demo-1"], 0, "demo-1: published sha256:"),
        (
            &["publish", "demo-rejected"],
            6,
            "demo-rejected: rejected forbidden-field",
        ),
        (
            &["current", "demo-1"],
            0,
            "project demo-1: current snapshot sha256:",
        ),
        (&["current", "demo-1", "--json"], 0, "\"snapshotDigest\""),
        (&["explain", "demo-rejected"], 0, "forbidden-field"),
        (&["explain", "demo-1"], 0, "demo-1"),
        (&["verify"], 0, "verified"),
        (
            &[
                "sources",
                "activate",
                "--installation",
                "demo-1-github",
                "--generation",
                "3",
            ],
            0,
            "activated generation 3 of demo-1-github",
        ),
        // demo-2 and demo-empty, never built, and demo-1 after its activation.
        (&["run"], 0, "3 projects, 3 published"),
    ];
    for (args, code, shown) in cases {
        let done = on_terminal(dir.path(), args);
        assert_eq!(done.code(), *code, "{args:?}:\n{}", done.screen);
        assert!(
            done.screen.contains(shown),
            "{args:?}: `{shown}` not shown:\n{}",
            done.screen
        );
        assert_text_logs(&done);
    }
}

#[test]
fn off_a_terminal_there_is_no_bar_and_the_logs_are_json() {
    let dir = imported();
    let out = Command::new(executable())
        .arg("run")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains(SPINNER), "a bar off a terminal: {stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "escape codes off a terminal: {stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(!lines.is_empty());
    for line in lines {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(event.get("level").is_some(), "{line}");
    }
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("4 projects, 3 published")
    );
}
