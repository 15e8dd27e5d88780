//! The command line as a person uses it: outputs, JSON shapes and exit codes.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_package-executor"));
    c.env_remove("DATABASE_URL")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("PACKAGE_EXECUTOR_LOG_FORMAT", "json")
        .env("PACKAGE_EXECUTOR_CONNECT_TIMEOUT", "2s");
    c
}

fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut c = bin();
    c.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn");
    {
        let mut input = child.stdin.take().expect("stdin");
        if let Some(bytes) = stdin {
            input.write_all(bytes).expect("write stdin");
        }
    }
    child.wait_with_output().expect("wait")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

#[test]
fn canonicalize_reads_stdin_and_files() {
    let o = run(
        &["canonicalize"],
        Some(br#"{"b": 4.50, "a": [1E3, "\u00e9"]}"#),
    );
    assert_eq!(code(&o), 0);
    assert_eq!(
        o.stdout,
        "{\"a\":[1000,\"é\"],\"b\":4.5}".as_bytes(),
        "no trailing newline"
    );
    let o = run(&["canonicalize", "--digest"], Some(b"{}"));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\n"
    );
    for bad in [&br#"{"a":1,"a":2}"#[..], br#"["\ud800"]"#, b"{", b"[1E400]"] {
        let o = run(&["canonicalize"], Some(bad));
        assert_eq!(code(&o), 1, "{}", String::from_utf8_lossy(bad));
        assert!(!o.stderr.is_empty());
    }
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/jcs");
    let o = run(
        &[
            "canonicalize",
            dir.join("input/weird.json").to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(
        o.stdout,
        std::fs::read(dir.join("output/weird.json")).unwrap()
    );
    assert_eq!(code(&run(&["canonicalize", "/no/such/file"], None)), 1);
}

#[test]
fn identity_encode_and_decode() {
    let o = run(
        &[
            "identity", "encode", "--source", "mcp", "--origin", "a:b", "--name", "x/y",
        ],
        None,
    );
    assert_eq!(code(&o), 0);
    assert_eq!(String::from_utf8(o.stdout).unwrap(), "mcp:a%3Ab:x%2Fy\n");
    let o = run(&["identity", "decode", "mcp:a%3Ab:x%2Fy"], None);
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "{\"source\":\"mcp\",\"origin\":\"a:b\",\"name\":\"x/y\"}\n"
    );
    let o = run(&["identity", "decode", "a:b"], None);
    assert_eq!(code(&o), 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("three"));
    assert_eq!(
        code(&run(
            &[
                "identity", "encode", "--source", "", "--origin", "o", "--name", "n"
            ],
            None
        )),
        1
    );
    assert_eq!(
        code(&run(&["identity", "bogus"], None)),
        2,
        "usage errors exit 2"
    );
}

#[test]
fn sources_import_reads_standard_input_and_checks_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("import.db").display());
    let fixture = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo-fixture.json"),
    )
    .unwrap();
    let with = |args: &[&str]| {
        let mut full = vec!["--database-url", url.as_str()];
        full.extend_from_slice(args);
        let o = run(&full, Some(&fixture));
        assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    with(&["migrate"]);
    let checked = "checked 4 projects from standard input: an import would insert";
    assert_eq!(
        with(&["sources", "import", "-", "--dry-run"]),
        format!("{checked} 20 rows; nothing was written\n")
    );
    assert_eq!(
        with(&["sources", "import", "-"]),
        "imported 4 projects from standard input (20 rows inserted)\n"
    );
    assert_eq!(
        with(&["sources", "import", "-", "--dry-run"]),
        format!("{checked} 0 rows; nothing was written\n")
    );
}

#[test]
fn demo_then_inspect_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("demo.db").display());
    let with = |args: &[&str]| {
        let mut full = vec!["--database-url", url.as_str()];
        full.extend_from_slice(args);
        run(&full, None)
    };
    let o = with(&["current", "demo-1"]);
    assert_eq!(
        code(&o),
        8,
        "not migrated: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = with(&["demo"]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("demo-rejected") && text.contains("forbidden-field"),
        "{text}"
    );

    let o = with(&["current", "demo-1", "--json"]);
    assert_eq!(code(&o), 0);
    let line = String::from_utf8(o.stdout).unwrap();
    assert!(line.ends_with('\n') && line.lines().count() == 1);
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["snapshot"]["projectId"], "demo-1");
    let at = v["committedAt"].as_str().unwrap();
    assert_eq!(at.len(), 24);
    assert!(at.ends_with('Z') && at.as_bytes()[19] == b'.');

    // The conditional door: the copy held is current (no document), another copy (the
    // document), a digest that is not one (a usage error), a project without a current snapshot.
    let held = v["snapshotDigest"].as_str().unwrap().to_owned();
    let o = with(&["current", "demo-1", "--json", "--known-digest", &held]);
    assert_eq!(code(&o), 0);
    let u: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(u["unchanged"], true);
    assert_eq!(u["snapshot"], serde_json::Value::Null);
    assert_eq!(
        (&u["snapshotDigest"], &u["committedAt"]),
        (&v["snapshotDigest"], &v["committedAt"])
    );
    let o = with(&["current", "demo-1", "--known-digest", &held]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains(&format!("snapshot {held} is still current")),
        "{text}"
    );
    let other = format!("sha256:{}", "0".repeat(64));
    let o = with(&["current", "demo-1", "--json", "--known-digest", &other]);
    assert_eq!(code(&o), 0);
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(c["unchanged"], false);
    assert_eq!(c["snapshot"], v["snapshot"]);
    let o = with(&["current", "demo-1", "--known-digest", "sha256:ABC"]);
    assert_eq!(code(&o), 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a snapshot digest"));
    assert_eq!(
        code(&with(&[
            "current",
            "demo-rejected",
            "--known-digest",
            &held
        ])),
        4
    );

    assert_eq!(code(&with(&["current", "demo-rejected"])), 4);
    let o = with(&["publish", "demo-rejected", "--json"]);
    assert_eq!(code(&o), 6);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["outcome"], "rejected");
    assert_eq!(v["reason"], "forbidden-field");
    assert!(v.get("snapshotDigest").is_none());
    let o = with(&["publish", "demo-1", "--json"]);
    assert_eq!(code(&o), 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["outcome"], "already-current");
    assert_eq!(code(&with(&["publish", "no-such-project"])), 1);
    assert_eq!(code(&with(&["explain", "demo-rejected"])), 0);
    let explained = |project: &str| {
        let o = with(&["explain", project]);
        assert_eq!(code(&o), 0);
        String::from_utf8(o.stdout).unwrap()
    };
    let text = explained("demo-1");
    assert!(
        text.contains("pending index  not marked: nothing changed"),
        "{text}"
    );
    let text = explained("demo-rejected");
    assert!(text.contains("rejection stands"), "{text}");
    assert_eq!(code(&with(&["verify"])), 0);

    let summary = dir.path().join("summary.json");
    let o = with(&[
        "run",
        "--json",
        "--summary-file",
        summary.to_str().unwrap(),
        // The demo cleared every mark; a full scan looks at the rejected project again.
        "--full-scan",
        "--fail-on-rejected",
    ]);
    assert_eq!(code(&o), 6, "rejected with --fail-on-rejected");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "package-executor/run-summary@v1");
    assert_eq!(v["exitCode"], 6);
    assert_eq!(v["rejected"]["forbidden-field"], 1);
    assert_eq!(
        std::fs::read_to_string(&summary).unwrap().trim(),
        String::from_utf8(o.stdout).unwrap().trim()
    );
    assert!(std::fs::metadata(&summary).unwrap().len() < 4096);

    let o = with(&[
        "sources",
        "activate",
        "--installation",
        "demo-1-github",
        "--generation",
        "3",
    ]);
    assert_eq!(code(&o), 0);
    assert_eq!(
        code(&with(&["current", "demo-1"])),
        4,
        "never a stale snapshot"
    );
    let text = explained("demo-1");
    assert!(
        text.contains("pending index  marked (version") && text.contains("wait for the next run"),
        "{text}"
    );
    let o = with(&["run", "--json"]);
    assert_eq!(code(&o), 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["published"], 1);
    assert_eq!(code(&with(&["sources", "import", "/no/such/file"])), 1);
}

#[test]
fn database_problems_exit_8() {
    let o = run(
        &[
            "--database-url",
            "postgres://nobody@127.0.0.1:1/none",
            "current",
            "p",
        ],
        None,
    );
    assert_eq!(code(&o), 8, "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(
        &[
            "--database-url",
            "postgres://nobody@127.0.0.1:1/none",
            "run",
            "--json",
        ],
        None,
    );
    assert_eq!(code(&o), 8);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["exitCode"], 8,
        "a truthful summary even when nothing could start"
    );
    // Inside a pod, the local default is refused.
    let mut c = bin();
    let o = c
        .args(["current", "p"])
        .env("KUBERNETES_SERVICE_HOST", "10.0.0.1")
        .output()
        .unwrap();
    assert_eq!(code(&o), 8);
    assert!(String::from_utf8_lossy(&o.stderr).contains("DATABASE_URL"));
    // An unreachable server and a SQLite file that cannot be opened each say what to check;
    // text logs to a pipe carry no colour codes.
    let o = run(
        &[
            "--database-url",
            "postgres://nobody@127.0.0.1:1/none",
            "--log-format",
            "text",
            "current",
            "p",
        ],
        None,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("check DATABASE_URL and that the server is up"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/missing/x.db", dir.path().display());
    let o = run(
        &["--database-url", &url, "--log-format", "text", "run"],
        None,
    );
    assert_eq!(code(&o), 8);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("there is no SQLite file at") && !err.contains("server"),
        "{err}"
    );
    // migrate, which creates the file, says what is missing.
    let o = run(
        &["--database-url", &url, "--log-format", "text", "migrate"],
        None,
    );
    assert_eq!(code(&o), 1);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the file's directory must exist") && !err.contains("server"),
        "{err}"
    );
    assert!(
        !err.contains('\u{1b}'),
        "no ANSI escapes in piped text logs: {err}"
    );
}

/// The sharp edges of output: a result that cannot be written is an error with exit 1, never a
/// panic, and the summary file says the same; the summary file never follows a symlink and is
/// 0644 whatever the umask; `current --json` prints only a JSON document it checked.
#[test]
fn output_failures_and_the_summary_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("demo.db").display());
    let o = run(&["--database-url", &url, "demo"], None);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));

    // `run --json > /dev/full`.
    let summary = dir.path().join("summary.json");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = bin()
        .args(["--database-url", &url, "run", "--json", "--summary-file"])
        .arg(&summary)
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 1, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output"),
        "{stderr}"
    );
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(
        written["exitCode"], 1,
        "the summary file agrees with the exit code"
    );
    for args in [&["current", "demo-1", "--json"][..], &["explain", "demo-1"]] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = bin()
            .args(["--database-url", &url])
            .args(args)
            .stdout(full)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(code(&o), 1, "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }

    // A symlink at the summary path is replaced, not followed; the file is 0644.
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep me").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let o = bin()
        .args(["--database-url", &url, "run", "--summary-file"])
        .arg(&link)
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.is_file(), "the link was replaced by the summary");
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);
    assert!(
        std::fs::read_to_string(&link)
            .unwrap()
            .contains("\"exitCode\":0")
    );

    // A stored document that is not one JSON object (a row written around the executor) is
    // not printed: exit 5, saying what to do.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use sqlx::Connection as _;
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        for q in [
            "DROP TRIGGER tool_definition_snapshots_no_update",
            "UPDATE tool_definition_snapshots SET canonical_json = CAST('{\"a\":1}{\"b\":2}' AS BLOB) \
             WHERE project_id = 'demo-1'",
        ] {
            sqlx::query(q).execute(&mut conn).await.unwrap();
        }
    });
    let o = run(
        &["--database-url", &url, "current", "demo-1", "--json"],
        None,
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 5, "{stderr}");
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(stderr.contains("verify"), "{stderr}");
}

/// Every duration flag has a documented minimum and maximum, and a value outside them is a
/// usage error (exit 2) that says the range: none reaches PostgreSQL as 0 ms, which switches its
/// timeout off (`0s` and `1ns` once did), and none overflows a sum the executor makes (`u64::MAX`
/// seconds once panicked).
#[test]
fn durations_outside_their_bounds_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("t.db").display());
    let cases: &[(&[&str], &str)] = &[
        (
            &["--statement-timeout", "0s", "current", "x"],
            "1ms to 1day",
        ),
        (
            &["--statement-timeout", "999us", "current", "x"],
            "1ms to 1day",
        ),
        (&["--lock-timeout", "1ns", "current", "x"], "1ms to 1day"),
        (
            &["--idle-in-transaction-timeout", "0s", "current", "x"],
            "1ms to 1day",
        ),
        (
            &["--statement-timeout", "25h", "current", "x"],
            "1ms to 1day",
        ),
        (
            &["--connect-timeout", "18446744073709551615s", "current", "x"],
            "100ms to 1h",
        ),
        (
            &["--answer-margin", "18446744073709551615s", "current", "x"],
            "0s to 1h",
        ),
        (&["--shutdown-grace", "2h", "run"], "0s to 1h"),
        (&["run", "--deadline", "8days"], "0s to 7days"),
        (
            &["trigger", "--publication-id", "p", "--timeout", "0s"],
            "1s to 1day",
        ),
    ];
    for (args, range) in cases {
        let o = bin().env("DATABASE_URL", &db).args(*args).output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(code(&o), 2, "{args:?}: {stderr}");
        assert!(stderr.contains(range), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // The edges themselves are accepted, from the flag or the environment.
    for (flag, env, value) in [
        (
            "--statement-timeout",
            "PACKAGE_EXECUTOR_STATEMENT_TIMEOUT",
            "1ms",
        ),
        ("--lock-timeout", "PACKAGE_EXECUTOR_LOCK_TIMEOUT", "24h"),
        ("--answer-margin", "PACKAGE_EXECUTOR_ANSWER_MARGIN", "0s"),
    ] {
        let o = bin()
            .env("DATABASE_URL", &db)
            .args([flag, value, "migrate"])
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "{flag} {value}: {o:?}");
        let o = bin()
            .env("DATABASE_URL", &db)
            .env(env, value)
            .args(["migrate"])
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "{env}={value}: {o:?}");
    }
}
