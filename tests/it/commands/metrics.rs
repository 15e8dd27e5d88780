//! Metrics at the end of a run, against a stand-in Pushgateway (a small HTTP server in this
//! test): the method, path, content type, and every family and value against the run summary
//! of the same run, for runs that exit 0, 6 and 3; a Pushgateway that is down or silent
//! leaves the exit code unchanged and the run bounded; the textfile is written atomically.
//! The text is parsed with `prometheus-parse`, a strict parser of the text format.

use package_executor_testkit::db;
use package_executor_testkit::fixtures;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use package_executor_testkit::db::DEMO_PATH as DEMO;

/// What the stand-in Pushgateway received.
#[derive(Debug)]
struct Pushed {
    method: String,
    path: String,
    content_type: String,
    body: String,
}

/// How the stand-in answers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Gateway {
    Answers,
    Silent,
}

/// Starts the stand-in; returns its base URL and the requests it receives.
async fn gateway(mode: Gateway) -> (String, mpsc::UnboundedReceiver<Pushed>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                let head_end = loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                let mut lines = head.lines();
                let mut first = lines.next().unwrap().split(' ');
                let (method, path) = (first.next().unwrap(), first.next().unwrap());
                let header = |name: &str| {
                    head.lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                        })
                        .unwrap_or_default()
                };
                let length: usize = header("content-length").parse().unwrap_or(0);
                while buf.len() < head_end + length {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let _ = tx.send(Pushed {
                    method: method.to_owned(),
                    path: path.to_owned(),
                    content_type: header("content-type"),
                    body: String::from_utf8_lossy(&buf[head_end..]).into_owned(),
                });
                if mode == Gateway::Answers {
                    let _ = sock
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                } else {
                    // Silent: hold the connection open and say nothing.
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
            });
        }
    });
    (base, rx)
}

/// A migrated SQLite file with `fixture` imported.
async fn database(dir: &Path, fixture: &Path) -> String {
    let url = format!("sqlite://{}", dir.join("m.db").display());
    for args in [
        vec!["migrate"],
        vec!["sources", "import", fixture.to_str().unwrap()],
    ] {
        let o = exe(&url, &args).await;
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    url
}

async fn exe(url: &str, args: &[&str]) -> Output {
    let mut cmd = db::exe(url, "5s");
    cmd.args(args);
    tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("the command ends")
        .unwrap()
}

/// Every sample, keyed by metric name and its labels (sorted), parsed strictly as the text
/// exposition format our writer uses: each family has HELP text and a `gauge` TYPE before its
/// samples, label values are quoted with `\\`, `\"` and `\n` escapes, values are numbers.
fn samples(text: &str) -> BTreeMap<String, f64> {
    let mut typed = BTreeMap::new();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if let Some(help) = line.strip_prefix("# HELP ") {
            let (name, doc) = help.split_once(' ').expect("HELP name text");
            assert!(!doc.trim().is_empty(), "{name} has HELP text");
            continue;
        }
        if let Some(ty) = line.strip_prefix("# TYPE ") {
            let (name, kind) = ty.split_once(' ').expect("TYPE name kind");
            assert_eq!(kind, "gauge", "{name}: not a gauge");
            typed.insert(name.to_owned(), ());
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample: series value");
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("a number: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, labels_of(rest.strip_suffix('}').expect("}"))),
            None => (series, Vec::new()),
        };
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "metric name {name:?}"
        );
        assert!(typed.contains_key(name), "{name}: sample before its TYPE");
        let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        labels.sort();
        out.insert(format!("{name}{{{}}}", labels.join(",")), value);
    }
    out
}

/// `k="v",…` with the exposition format's escapes undone.
fn labels_of(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        assert_eq!(chars.next(), Some('"'), "label {key} is quoted");
        let mut value = String::new();
        loop {
            match chars.next().expect("a closing quote") {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c @ ('\\' | '"')) => value.push(c),
                    other => panic!("bad escape {other:?} in {text}"),
                },
                c => value.push(c),
            }
        }
        match chars.next() {
            None | Some(',') => {}
            other => panic!("unexpected {other:?} after label {key}"),
        }
        out.push((key, value));
    }
    out
}

/// The samples a summary must produce (timestamps checked separately).
fn expected(summary: &Value) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let n = |v: &Value| v.as_f64().unwrap();
    for (outcome, key) in [
        ("published", "published"),
        ("replayed", "replayed"),
        ("already-current", "alreadyCurrent"),
        ("claimed-elsewhere", "claimedElsewhere"),
        ("vanished", "vanished"),
    ] {
        // Every outcome, zeros included.
        out.insert(
            format!("package_executor_last_run_projects{{outcome={outcome}}}"),
            n(&summary[key]),
        );
    }
    for (outcome, key) in [
        ("rejected", "rejected"),
        ("unresolved", "unresolved"),
        ("integrity-violation", "integrity"),
    ] {
        let reasons = summary[key].as_object().unwrap();
        for (reason, count) in reasons {
            out.insert(
                format!("package_executor_last_run_projects{{outcome={outcome},reason={reason}}}"),
                n(count),
            );
        }
        if reasons.is_empty() {
            out.insert(
                format!("package_executor_last_run_projects{{outcome={outcome}}}"),
                0.0,
            );
        }
    }
    out.insert(
        "package_executor_last_run_scanned_projects{}".into(),
        n(&summary["projectsScanned"]),
    );
    out.insert(
        "package_executor_last_run_duration_seconds{}".into(),
        n(&summary["elapsedMs"]) / 1000.0,
    );
    out.insert(
        "package_executor_last_run_exit_code{}".into(),
        n(&summary["exitCode"]),
    );
    out
}

/// Runs `run --json` with metrics; checks the push and the file against the printed summary.
async fn run_and_check(url: &str, extra: &[&str], want_exit: i32, dir: &Path) -> Value {
    let (base, mut pushed) = gateway(Gateway::Answers).await;
    let file = dir.join("package_executor.prom");
    let mut args = vec![
        "run",
        "--json",
        "--metrics-push-url",
        &base,
        "--metrics-file",
        file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let out = exe(url, &args).await;
    assert_eq!(
        out.status.code(),
        Some(want_exit),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["exitCode"], want_exit);

    let request = tokio::time::timeout(Duration::from_secs(5), pushed.recv())
        .await
        .expect("a push")
        .unwrap();
    assert_eq!(request.method, "POST");
    // The grouping key names the writer: no instance was given (empty, in the base64 form),
    // and a full scan is the sweep.
    let kind = if extra.contains(&"--full-scan") {
        "sweep"
    } else {
        "recovery"
    };
    assert_eq!(
        request.path,
        format!("/metrics/job/package_executor/instance@base64/=/kind/{kind}/shard/0")
    );
    assert_eq!(
        request.content_type,
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        request.body,
        "the file holds the pushed text"
    );

    let mut got = samples(&request.body);
    let ended = got
        .remove("package_executor_last_run_timestamp_seconds{}")
        .expect("end timestamp");
    assert!(ended >= before.floor(), "{ended} >= {before}");
    let success = got.remove("package_executor_last_success_timestamp_seconds{}");
    if want_exit == 0 {
        assert_eq!(
            success,
            Some(ended),
            "a success is stamped with the end time"
        );
    } else {
        assert_eq!(success, None, "only a run that exits 0 sends last_success");
    }
    assert_eq!(got, expected(&summary), "every family and value");
    summary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_metrics_match_the_summary_for_exit_0_6_and_3() {
    let dir = tempfile::tempdir().unwrap();
    let url = database(dir.path(), Path::new(DEMO)).await;
    // The demo has three good projects and one rejection: exit 0, then 6 when asked to fail.
    let first = run_and_check(&url, &[], 0, dir.path()).await;
    assert_eq!(first["published"], 3);
    // The first run cleared every mark; a full scan proves every project, so the rejected one
    // is looked at (and reported) again.
    let second = run_and_check(&url, &["--full-scan", "--fail-on-rejected"], 6, dir.path()).await;
    assert_eq!(
        second["alreadyCurrent"], 0,
        "current projects are not pending"
    );

    // Exit 3: a deadline that ends the run while projects are left.
    let many = tempfile::tempdir().unwrap();
    let fixture = many.path().join("many.json");
    std::fs::write(&fixture, fixtures::many_projects(400, 2, 2, 0)).unwrap();
    let url = database(many.path(), &fixture).await;
    let third = run_and_check(
        &url,
        &["--deadline", "1ms", "--concurrency", "1"],
        3,
        many.path(),
    )
    .await;
    assert!(third["published"].as_u64().unwrap() < 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_down_or_silent_pushgateway_changes_nothing_but_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let url = database(dir.path(), Path::new(DEMO)).await;
    // Down: nothing listens on the port.
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let out = exe(&url, &["run", "--metrics-push-url", &down]).await;
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("warning: metrics push failed"), "{text}");
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(logs.contains("metrics not delivered"), "{logs}");

    // Silent: it accepts and never answers; each try is bounded, so the run still ends.
    let (silent, mut pushed) = gateway(Gateway::Silent).await;
    let out = exe(
        &url,
        &[
            "run",
            "--json",
            "--full-scan",
            "--fail-on-rejected",
            "--metrics-push-url",
            &silent,
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(6), "the run's own exit code");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["exitCode"], 6);
    let mut tries = 0;
    while pushed.try_recv().is_ok() {
        tries += 1;
    }
    assert_eq!(tries, 2, "one try and one retry");
}

#[test]
fn the_metrics_file_is_replaced_atomically() {
    use package_executor::metrics::file::write_atomically;
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("pe.prom");
    write_atomically(&path, "a 1\n").unwrap();
    write_atomically(&path, "a 2\n").unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "a 2\n");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("pe.prom")],
        "no temporary file left"
    );
    // A directory that does not exist fails and leaves nothing behind.
    assert!(write_atomically(&dir.path().join("no/such/dir/pe.prom"), "x").is_err());
}

/// A reader never sees a partial file while writers replace it.
#[test]
fn readers_never_see_a_partial_metrics_file() {
    use package_executor::metrics::file::write_atomically;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pe.prom");
    let a = "a 1\n".repeat(50_000);
    let b = "b 2\n".repeat(60_000);
    write_atomically(&path, &a).unwrap();
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for i in 0..200 {
                write_atomically(&path, if i % 2 == 0 { &b } else { &a }).unwrap();
            }
        });
        while !writer.is_finished() {
            let seen = std::fs::read_to_string(&path).unwrap();
            assert!(
                seen == a || seen == b,
                "a partial file of {} bytes",
                seen.len()
            );
        }
    });
}
