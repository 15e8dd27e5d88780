//! The metrics and the alert rules end to end, with the real stack from Debian: the executor
//! pushes to `prometheus-pushgateway`, Prometheus scrapes it (`honor_labels: true`) every second
//! and evaluates the rules the chart renders every second. Two releases (two databases) and a
//! sweep push side by side: the alert that should fire fires for its writer alone, and clears
//! when that writer's next run succeeds. The alerts' states before and after each run are
//! printed. Needs `prometheus` and `prometheus-pushgateway` (scripts/test.sh installs them).

use package_executor_testkit::db;
use package_executor_testkit::helm;
use package_executor_testkit::pg;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use package_executor::planner;
use serde_json::Value;

/// A plain HTTP GET on loopback; the body, when the server answers at all.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned())
}

/// Waits (at most a minute) until `ok` holds for the answer at `path`; the last answer.
fn until(port: u16, path: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        if let Some(v) = get(port, path).and_then(|b| serde_json::from_str::<Value>(&b).ok())
            && ok(&v)
        {
            return v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: not within a minute; last answer: {:?}",
            get(port, path)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn query(promql: &str) -> String {
    let q: String = url::form_urlencoded::byte_serialize(promql.as_bytes()).collect();
    format!("/api/v1/query?query={q}")
}

/// The firing alerts, as `name{instance,kind}` strings.
fn firing(alerts: &Value) -> Vec<String> {
    let mut out: Vec<String> = alerts["data"]["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["state"] == "firing")
        .map(|a| {
            let l = &a["labels"];
            format!(
                "{}{{{},{}}}",
                l["alertname"].as_str().unwrap_or(""),
                l["instance"].as_str().unwrap_or(""),
                l["kind"].as_str().unwrap_or("")
            )
        })
        .collect();
    out.sort();
    out
}

/// One run of the scenario: what, its database, its instance, its extra flags, the exit code
/// it must give, and the alerts that must be firing after it.
type Step<'a> = (&'a str, &'a str, &'a str, &'a [&'a str], i32, Vec<String>);

/// A server process that is killed when the test ends.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(bin: &str, args: &[String]) -> Server {
    Server(
        std::process::Command::new(bin)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{bin}: {e}; scripts/test.sh installs Debian's prometheus and prometheus-pushgateway")
            }),
    )
}

/// The chart's alert rules as a Prometheus rule file.
fn rules(dir: &Path) {
    let (file, _) = helm::alert_rules();
    std::fs::write(
        dir.join("rules.yml"),
        serde_norway::to_string(&file).unwrap(),
    )
    .unwrap();
}

/// Runs the executor; its exit code.
async fn run(url: &str, gateway: u16, instance: &str, extra: &[&str]) -> i32 {
    let mut cmd = db::exe(url, "5s");
    cmd.args(["run", "--json", "--metrics-push-url"])
        .arg(format!("http://127.0.0.1:{gateway}"))
        .args(["--metrics-instance", instance])
        .args(extra);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("the run ends")
        .unwrap();
    out.status.code().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_fire_and_clear_per_writer_with_the_real_stack() {
    let dir = tempfile::tempdir().unwrap();
    rules(dir.path());
    let (gateway, prometheus) = (
        package_executor_testkit::free_port(),
        package_executor_testkit::free_port(),
    );
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yml]\n\
             scrape_configs:\n  - job_name: pushgateway\n    honor_labels: true\n    \
             static_configs: [{{targets: ['127.0.0.1:{gateway}']}}]\n"
        ),
    )
    .unwrap();
    // Its state in this test's directory: Debian's default persistence file is under
    // /var/lib/prometheus, where every earlier run on the machine left its groups.
    let _gw = start(
        "prometheus-pushgateway",
        &[
            format!("--web.listen-address=127.0.0.1:{gateway}"),
            format!(
                "--persistence.file={}",
                dir.path().join("pushgateway.data").display()
            ),
        ],
    );
    let _prom = start(
        "prometheus",
        &[
            format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            format!("--web.listen-address=127.0.0.1:{prometheus}"),
        ],
    );
    until(
        prometheus,
        "/api/v1/status/buildinfo",
        "Prometheus up",
        |v| v["status"] == "success",
    );
    let alerts = "/api/v1/alerts";

    // Release A and release B, each with its own database; B's holds a forged snapshot for
    // demo-2's vector, so its runs find a replay-mismatch.
    let a = pg::fresh_db().await;
    let b = pg::fresh_db().await;
    for url in [&a, &b] {
        db::import(&db::connect(url).await, db::DEMO).await;
    }
    let admin_b = db::connect(&b).await;
    let mut t = admin_b.begin().await.unwrap();
    let heads: Vec<_> = t
        .observe("demo-2")
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.head)
        .collect();
    t.rollback().await.unwrap();
    let vector = planner::active_vector_digest("demo-2", &heads);
    let forged = "sha256:".to_owned() + &"ab".repeat(32);
    // A row no executor could write (the database's checks refuse it): a replay mismatch for
    // the next build of demo-2 there.
    db::exec_unchecked(&admin_b, &format!(
        "INSERT INTO ql3.tool_definition_snapshots (project_id, active_vector_digest, definition_digest, \
         snapshot_digest, package_count, definition_count, canonical_json, source_key) \
         VALUES ('demo-2', '{vector}', '{forged}', '{forged}', 1, 0, decode('7b7d', 'hex'), '0000000000000000')"
    ))
    .await
    .unwrap();

    // Before any run: the gateway holds no group, Prometheus has scraped it, and the rules
    // have been evaluated since, so "nothing fires" is a finding, not a race with the scrape.
    let groups = until(gateway, "/api/v1/metrics", "Pushgateway up", |v| {
        v["status"] == "success"
    });
    assert_eq!(
        groups["data"],
        serde_json::json!([]),
        "a fresh gateway: {groups}"
    );
    until(
        prometheus,
        &query("up{job=\"pushgateway\"} == 1"),
        "first scrape",
        |v| v["data"]["result"].as_array().is_some_and(|r| r.len() == 1),
    );
    let evaluated = |v: &Value| {
        v["data"]["groups"][0]["lastEvaluation"]
            .as_str()
            .map(str::to_owned)
    };
    let first = evaluated(&until(prometheus, "/api/v1/rules", "rules loaded", |v| {
        evaluated(v).is_some()
    }));
    until(
        prometheus,
        "/api/v1/rules",
        "rules evaluated after the scrape",
        |v| evaluated(v).is_some_and(|t| Some(t) != first),
    );
    let before = firing(&until(prometheus, alerts, "alerts", |_| true));
    assert_eq!(before, Vec::<String>::new(), "nothing fires before any run");
    println!("before any run: firing {before:?}");
    // Each run, then the alerts that must be firing once Prometheus has scraped and evaluated.
    let mismatch_b = "PackageExecutorReplayMismatch{rel-b.ns,recovery}".to_owned();
    let rejected_a = "PackageExecutorRejectedPackages{rel-a.ns,sweep}".to_owned();
    let steps: [Step; 3] = [
        ("A recovery", &a, "rel-a.ns", &[], 0, vec![]),
        (
            "B recovery (forged row)",
            &b,
            "rel-b.ns",
            &[],
            5,
            vec![mismatch_b.clone()],
        ),
        (
            "A sweep --fail-on-rejected",
            &a,
            "rel-a.ns",
            &["--full-scan", "--fail-on-rejected"],
            6,
            vec![rejected_a.clone(), mismatch_b.clone()],
        ),
    ];
    for (what, url, instance, extra, code, want) in steps {
        assert_eq!(run(url, gateway, instance, extra).await, code, "{what}");
        let kind = if extra.contains(&"--full-scan") {
            "sweep"
        } else {
            "recovery"
        };
        // Scraped: the writer's exit code is in Prometheus...
        let scraped = format!(
            "package_executor_last_run_exit_code{{instance=\"{instance}\",kind=\"{kind}\"}} == {code}"
        );
        until(prometheus, &query(&scraped), what, |v| {
            v["data"]["result"].as_array().is_some_and(|r| r.len() == 1)
        });
        // ...and evaluated: exactly the alerts this run leaves firing.
        let now = until(prometheus, alerts, what, |v| firing(v) == want);
        println!("after {what} (exit {code}): firing {:?}", firing(&now));
    }
    // Three writers, three groups: none overwrote another.
    let codes = until(
        prometheus,
        &query("package_executor_last_run_exit_code"),
        "three groups",
        |v| v["data"]["result"].as_array().is_some_and(|r| r.len() == 3),
    );
    let mut seen: Vec<String> = codes["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}/{}={}",
                r["metric"]["instance"].as_str().unwrap(),
                r["metric"]["kind"].as_str().unwrap(),
                r["value"][1].as_str().unwrap()
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            "rel-a.ns/recovery=0",
            "rel-a.ns/sweep=6",
            "rel-b.ns/recovery=5"
        ]
    );

    // A's next sweep succeeds: its alert clears; B's mismatch (still there) keeps firing.
    assert_eq!(run(&a, gateway, "rel-a.ns", &["--full-scan"]).await, 0);
    let now = until(prometheus, alerts, "the rejection alert clears", |v| {
        firing(v) == [mismatch_b.clone()]
    });
    println!("after A sweep (exit 0): firing {:?}", firing(&now));
    // Every outcome is sent on every run, zeros included: A's sweep reports no rejection now.
    let zeros = until(
        prometheus,
        &query(
            "package_executor_last_run_projects{instance=\"rel-a.ns\",kind=\"sweep\",outcome=\"unresolved\"}",
        ),
        "the zero series",
        |v| v["data"]["result"].as_array().is_some_and(|r| r.len() == 1),
    );
    assert_eq!(zeros["data"]["result"][0]["value"][1], "0");

    // Every panel of the chart's dashboard has series to show after these runs.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("charts/package-executor/dashboards/package-executor.json"),
        )
        .unwrap(),
    )
    .unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let answer = until(prometheus, &query(expr), expr, |v| {
                v["data"]["result"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty())
            });
            println!(
                "panel {:?}: {} series",
                panel["title"].as_str().unwrap(),
                answer["data"]["result"].as_array().unwrap().len()
            );
        }
    }
}
