//! Failover the way production runs it: a Patroni-managed cluster (etcd, two members in
//! synchronous mode, HAProxy on `GET /primary`; see `crates/testkit/src/patroni.rs`) goes through a
//! leader crash, the old leader's rejoin (`pg_rewind`), a planned switchover, a silent cut of
//! the leader's link, and the leader cut off from etcd and its peer while the executors still
//! reach it. Throughout, executor replicas (on each way one at the default batch and one a
//! project a transaction: `chaos::batch_size`) run pass after pass through both ways users reach
//! the leader (a multi-host URL with `target_session_attrs=read-write`, and the proxy standing
//! in for the operator's primary Service), a control plane activates generations, and a
//! consumer on each way asks for current snapshots.
//!
//! What must hold: no consumer ever gets a stale snapshot; every pass exits 0, 3 or 8; every
//! snapshot an executor reported published is on the final leader with the same digests
//! (synchronous mode loses no acknowledged commit); after the last event one run makes every
//! project current and `verify` passes. The report gives, per scenario and way, the consumer
//! checks, the published snapshots and the time from the event to the next successful pass.
//! `PE_PATRONI_SEED=N` replays a schedule (the pauses, the order of the last three scenarios,
//! and the actors' choices); every failure names the seed.
//!
//! Needs root, Debian's `patroni`, `etcd-server`, `haproxy` and `nftables` (the test command
//! installs them); it fails, never skips, without them.

use package_executor_testkit::chaos;
use package_executor_testkit::db;
use package_executor_testkit::fixtures;
use package_executor_testkit::patroni;
use package_executor_testkit::pg;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chaos::Rng;
use db::*;
use package_executor::store::ConnectOptions;
use package_executor_testkit::actors::{Actors, Pids, Tally, assert_converges};
use patroni::Patroni;
use sqlx::{ConnectOptions as _, Connection, PgConnection, Row};
use tokio::io::{AsyncBufReadExt, BufReader};

const PROJECTS: usize = 40;
/// Generations per package: with two packages, 36 vectors per project, so that activations
/// keep making snapshots that were never built (and published) before.
const GENERATIONS: u64 = 6;
const EXECUTOR: &str = "pe_executor";

/// How the executors and consumers reach the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    /// `postgres://…@m0,m1/db?target_session_attrs=read-write`.
    MultiHost,
    /// HAProxy routing by `GET /primary`: the operator's primary Service.
    Proxy,
}

const WAYS: [Way; 2] = [Way::MultiHost, Way::Proxy];

impl Way {
    fn label(self) -> &'static str {
        match self {
            Way::MultiHost => "multi-host URL",
            Way::Proxy => "primary Service (HAProxy)",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One executor pass: when, how it ended, and what it reported published.
struct Pass {
    way: Way,
    started: Instant,
    ended: Instant,
    code: Option<i32>,
    published: Vec<(String, String)>,
    /// Whether it met a member that was no longer the leader: a write refused as read-only
    /// (`25006`), or a new connection that found a standby.
    met_a_standby: bool,
    /// Projects it left pending because their last attempt's `COMMIT` was given up
    /// unacknowledged (a leader waiting for a synchronous standby it has lost).
    unacknowledged: usize,
}

#[derive(Default)]
struct Counts {
    activations: Arc<AtomicU64>,
    /// The consumer on each way.
    consumers: [Arc<Tally>; 2],
}

/// One scenario as it happened.
struct Scenario {
    name: &'static str,
    at: Instant,
    /// When a new leader was seen running (failovers and switchovers).
    new_leader: Option<Instant>,
    /// Consumer checks per way when the scenario began.
    checks_before: [u64; 2],
    /// Snapshots reported published before the event, all found on the new leader.
    kept: Option<usize>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "chaos tier, needs root: scripts/test.sh chaos"]
async fn patroni_crash_rejoin_switchover_and_partitions() {
    let seed = chaos::seed("PE_PATRONI_SEED");
    eprintln!("patroni: seed {seed} (replay with PE_PATRONI_SEED={seed})");
    assert!(
        pg::is_root(),
        "the Patroni test needs root (network namespaces, nftables, and Patroni as the postgres \
         OS user); CI runs as root"
    );
    for tool in ["patroni", "patronictl", "etcd", "haproxy", "nft", "setpriv"] {
        assert!(
            std::process::Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .unwrap()
                .status
                .success(),
            "{tool} not found: install Debian's patroni, etcd-server, haproxy and nftables \
             (./scripts/test.sh does)"
        );
    }
    tokio::time::timeout(Duration::from_secs(900), scenarios(seed))
        .await
        .unwrap_or_else(|_| panic!("seed {seed}: the Patroni scenarios did not finish in time"));
}

/// Runs a blocking harness call without holding up the runtime's other tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A connection to whichever member is the primary, as a libpq client with
/// `target_session_attrs=read-write` finds it.
async fn connect_read_write(hosts: &[String]) -> Option<PgConnection> {
    for url in hosts {
        let Ok(opts) = url.parse::<sqlx::postgres::PgConnectOptions>() else {
            continue;
        };
        let Ok(Ok(mut conn)) = tokio::time::timeout(Duration::from_secs(2), opts.connect()).await
        else {
            continue;
        };
        let primary = tokio::time::timeout(
            Duration::from_secs(2),
            sqlx::query("SELECT NOT pg_is_in_recovery()").fetch_one(&mut conn),
        )
        .await;
        if let Ok(Ok(row)) = primary
            && row.get::<bool, _>(0)
        {
            return Some(conn);
        }
    }
    None
}

/// Runs one executor pass and reads what it reported published from its JSON log.
async fn pass(url: &str, way: Way, batch: &str, pids: &Pids) -> Pass {
    let started = Instant::now();
    let mut child = exe(url, "5s")
        .args(chaos::PASS)
        .args(["--batch-size", batch])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().unwrap_or_default();
    pids.add(pid);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut published = Vec::new();
    let mut met_a_standby = false;
    let mut unacknowledged = 0;
    let read = async {
        while let Ok(Some(line)) = lines.next_line().await {
            met_a_standby |= line.contains("25006") || line.contains("the host is now a standby");
            if line.contains("the COMMIT was not acknowledged") {
                unacknowledged += 1;
            }
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if v["message"] == "project done"
                && matches!(v["outcome"].as_str(), Some("published" | "replayed"))
            {
                published.push((
                    v["project_id"].as_str().unwrap().to_owned(),
                    v["snapshot_digest"].as_str().unwrap().to_owned(),
                ));
            }
        }
    };
    // A pass's deadline is 20 s; twice that and more is a hang.
    let finished = tokio::time::timeout(Duration::from_secs(60), async {
        read.await;
        child.wait().await.unwrap()
    })
    .await;
    pids.remove(pid);
    let code = match finished {
        Ok(status) => status.code(),
        Err(_) => Some(-1),
    };
    Pass {
        way,
        started,
        ended: Instant::now(),
        code,
        published,
        met_a_standby,
        unacknowledged,
    }
}

/// The first pass through `way` that began after `since` and exited 0: when it ended. From a
/// new leader's sighting, so that a pass that finished on the old leader before a switchover
/// took effect does not count.
fn next_success(passes: &[Pass], way: Way, since: Instant) -> Option<Instant> {
    passes
        .iter()
        .filter(|p| p.way == way && p.started >= since && p.code == Some(0))
        .map(|p| p.ended)
        .min()
}

async fn scenarios(seed: u64) {
    let bindir = pg::bindir();
    let server = pg::server_version(&bindir);
    let mut cluster = blocking(|| Patroni::start(&bindir));
    let admin_urls: Vec<String> = (0..2)
        .map(|i| cluster.member_url(i, "postgres", "postgres"))
        .collect();
    {
        let mut admin = connect_read_write(&admin_urls).await.expect("a primary");
        sqlx::query("CREATE DATABASE patroni")
            .execute(&mut admin)
            .await
            .unwrap();
        sqlx::query("CREATE ROLE pe_executor LOGIN")
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.unwrap();
        let store = connect(&cluster.multi_host_url("postgres", "patroni")).await;
        store.migrate(true, None).await.unwrap();
        exec(&store, "GRANT ql3_package_executor TO pe_executor")
            .await
            .unwrap();
        import(
            &store,
            &fixtures::many_generations(PROJECTS, 2, GENERATIONS as u32, 2, 200),
        )
        .await;
        store.close().await;
    }
    let urls = [
        cluster.multi_host_url(EXECUTOR, "patroni"),
        cluster.proxy_url(EXECUTOR, "patroni"),
    ];
    let member_urls: Vec<String> = (0..2)
        .map(|i| cluster.member_url(i, "postgres", "patroni"))
        .collect();
    let proxy_admin = cluster.proxy_url("postgres", "patroni");

    let counts = Counts::default();
    let mut actors = Actors::new(seed);
    let passes: Arc<Mutex<Vec<Pass>>> = Arc::new(Mutex::new(Vec::new()));

    // Two executor replicas per way, pass after pass, one of them one project a transaction
    // (`chaos::batch_size`); after a failed pass a short pause, as a Job's backoff would give.
    for way in WAYS {
        for k in 0..2 {
            let (running, passes, pids, url) = (
                actors.running(),
                passes.clone(),
                actors.pids.clone(),
                urls[way.index()].clone(),
            );
            let batch = chaos::batch_size(k);
            actors.spawn(async move {
                while running.get() {
                    let p = pass(&url, way, &batch, &pids).await;
                    let failed = p.code != Some(0);
                    passes.lock().unwrap().push(p);
                    if failed {
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                }
            });
        }
    }
    // The control plane activates generations through the multi-host URL.
    actors.control_plane(
        ConnectOptions {
            statement_timeout: Duration::from_secs(3),
            acquire_timeout: Duration::from_secs(3),
            ..ConnectOptions::new(
                cluster
                    .multi_host_url("postgres", "patroni")
                    .parse()
                    .unwrap(),
            )
        },
        PROJECTS as u64,
        GENERATIONS,
        counts.activations.clone(),
    );
    // A consumer per way, asking for current snapshots and checking each against the live heads.
    for way in WAYS {
        let (member_urls, proxy_admin) = (member_urls.clone(), proxy_admin.clone());
        actors.consumer(
            Duration::from_millis(20),
            PROJECTS as u64,
            seed,
            counts.consumers[way.index()].clone(),
            move || {
                let (member_urls, proxy_admin) = (member_urls.clone(), proxy_admin.clone());
                async move {
                    match way {
                        Way::MultiHost => connect_read_write(&member_urls).await,
                        Way::Proxy => PgConnection::connect(&proxy_admin).await.ok(),
                    }
                }
            },
        );
    }
    let rng = actors.rng.clone();

    // Steady state first: a successful pass through each way.
    let warm = Instant::now();
    wait_success(&passes, warm, seed, "the first pass").await;

    let mut done: Vec<Scenario> = Vec::new();
    let checks = |c: &Counts| c.consumers.each_ref().map(|t| t.checks());
    let pause = |rng: &Mutex<Rng>| rng.lock().unwrap().millis(1000, 4000);

    // 1. The leader crashes; 2. it comes back and rejoins as a replica.
    tokio::time::sleep(pause(&rng)).await;
    let leader = blocking(|| cluster.wait_healthy(Duration::from_secs(60)));
    let at = Instant::now();
    let before = checks(&counts);
    blocking(|| cluster.crash(leader));
    let (scenario, elected) = takeover(
        &cluster,
        leader,
        "the leader crashes (kill -9 of Patroni and the postmaster)",
        (at, before),
        &passes,
        seed,
    )
    .await;
    done.push(scenario);
    tokio::time::sleep(pause(&rng)).await;
    let at = Instant::now();
    let before = checks(&counts);
    blocking(|| cluster.restart(leader));
    blocking(|| cluster.wait_healthy(Duration::from_secs(120)));
    eprintln!(
        "patroni: m{leader} rejoined under m{elected} in {:?}",
        at.elapsed()
    );
    done.push(Scenario {
        name: "the old leader rejoins as a replica (pg_rewind)",
        at,
        new_leader: None,
        checks_before: before,
        kept: None,
    });
    wait_success(&passes, at, seed, done.last().unwrap().name).await;

    // 3-5, in the seed's order: a switchover, a silent link cut, a cut from etcd and the peer.
    let mut order = vec![0u64, 1, 2];
    {
        let mut r = rng.lock().unwrap();
        for i in (1..order.len()).rev() {
            let j = r.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
    }
    for which in order {
        tokio::time::sleep(pause(&rng)).await;
        let leader = blocking(|| cluster.wait_healthy(Duration::from_secs(120)));
        let other = 1 - leader;
        let at = Instant::now();
        let before = checks(&counts);
        let name = match which {
            0 => {
                blocking(|| cluster.switchover(leader, other));
                "a planned switchover (patronictl switchover)"
            }
            1 => {
                blocking(|| cluster.link(leader, false));
                "the leader's link is cut silently"
            }
            _ => {
                blocking(|| cluster.isolate(leader, true));
                "the leader is cut off from etcd and its peer, still reachable by clients"
            }
        };
        let (scenario, _) = takeover(&cluster, leader, name, (at, before), &passes, seed).await;
        done.push(scenario);
        // Heal; the old leader rejoins as the synchronous standby.
        match which {
            1 => blocking(|| cluster.link(leader, true)),
            2 => blocking(|| cluster.isolate(leader, false)),
            _ => {}
        }
        blocking(|| cluster.wait_healthy(Duration::from_secs(120)));
    }
    // A last stretch of steady state after the last event.
    let calm = Instant::now();
    wait_success(&passes, calm, seed, "the calm after the last event").await;

    actors.stop().await;

    // The report, per scenario and way.
    let passes = std::mem::take(&mut *passes.lock().unwrap());
    let end = Instant::now();
    let final_checks = checks(&counts);
    let mut report = format!(
        "seed {seed}: {} passes, {} activations; consumer checks {} via the multi-host URL, {} via the proxy (stale: 0)\n",
        passes.len(),
        counts.activations.load(Ordering::Relaxed),
        final_checks[0],
        final_checks[1],
    );
    for (i, s) in done.iter().enumerate() {
        let until = done.get(i + 1).map_or(end, |n| n.at);
        let after = done.get(i + 1).map_or(final_checks, |n| n.checks_before);
        report.push_str(&format!(
            "  {}{}{}:\n",
            s.name,
            s.new_leader
                .map(|t| format!(
                    " (a new leader seen after {:.1} s",
                    (t - s.at).as_secs_f64()
                ))
                .unwrap_or_default(),
            s.kept
                .map(|n| format!("; all {n} snapshots reported published before it are on it)"))
                .unwrap_or_default()
        ));
        for way in WAYS {
            let window: Vec<&Pass> = passes
                .iter()
                .filter(|p| p.way == way && p.ended >= s.at && p.ended < until)
                .collect();
            let published: usize = window.iter().map(|p| p.published.len()).sum();
            let exits = |code: i32| window.iter().filter(|p| p.code == Some(code)).count();
            let met = window.iter().filter(|p| p.met_a_standby).count();
            let unacknowledged: usize = window.iter().map(|p| p.unacknowledged).sum();
            let longest = window
                .iter()
                .map(|p| p.ended - p.started)
                .max()
                .unwrap_or_default();
            let next = next_success(&passes, way, s.new_leader.unwrap_or(s.at))
                .map(|t| format!("{:.1} s", (t - s.at).as_secs_f64()))
                .unwrap_or_else(|| "none".into());
            report.push_str(&format!(
                "    {}: next successful pass {next} after the event, at most {:.1} s without one; \
                 passes exited 0/3/8: {}/{}/{} ({met} met a demoted member), the longest took {:.1} s; \
                 {unacknowledged} projects left pending on an unacknowledged COMMIT; consumer checks {}, stale 0; \
                 published snapshots {published}\n",
                way.label(),
                longest_without_success(&window, s.at).as_secs_f64(),
                exits(0),
                exits(3),
                exits(8),
                longest.as_secs_f64(),
                after[way.index()] - s.checks_before[way.index()],
            ));
        }
    }
    print!("patroni: {report}");
    let _ = std::fs::write(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("patroni-report.txt"),
        format!("Patroni on {server}: {report}"),
    );

    let bad: Vec<String> = passes
        .iter()
        .filter(|p| !matches!(p.code, Some(0 | 3 | 8) | None))
        .map(|p| format!("a pass via the {} exited {:?}", p.way.label(), p.code))
        .collect();
    assert!(bad.is_empty(), "{report}{bad:?}");
    for way in WAYS {
        assert!(
            counts.consumers[way.index()].checks() > 0,
            "{report}: the consumer via the {} never checked",
            way.label()
        );
    }

    // Every snapshot reported published is on the final leader, with the same digests.
    let final_url = cluster.multi_host_url("postgres", "patroni");
    let store = connect(&final_url).await;
    let stored: BTreeSet<(String, String)> =
        sqlx::query("SELECT project_id, snapshot_digest FROM ql3.tool_definition_snapshots")
            .fetch_all(&store.pg_pool().unwrap())
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
    let reported: Vec<&(String, String)> = passes.iter().flat_map(|p| &p.published).collect();
    let missing: Vec<_> = reported.iter().filter(|r| !stored.contains(*r)).collect();
    assert!(
        missing.is_empty(),
        "{report}: {} of {} snapshots reported published are not on the final leader: {missing:?}",
        missing.len(),
        reported.len()
    );
    println!(
        "patroni: all {} snapshots reported published are on the final leader",
        reported.len()
    );
    let _ = std::fs::OpenOptions::new()
        .append(true)
        .open(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("patroni-report.txt"))
        .and_then(|mut f| {
            use std::io::Write;
            writeln!(
                f,
                "  all {} snapshots reported published are on the final leader",
                reported.len()
            )
        });

    // One run converges every project, through each way; verify recomputes every digest.
    assert_converges(&urls, &store, &report).await;
    store.close().await;
    drop(cluster);
}

/// After an event at `at` that takes leadership from `leader`: waits for the new leader,
/// checks that it has every snapshot reported published before the event, and waits for a
/// successful pass through each way; the scenario as it happened, and the new leader.
async fn takeover(
    cluster: &Patroni,
    leader: usize,
    name: &'static str,
    (at, checks_before): (Instant, [u64; 2]),
    passes: &Mutex<Vec<Pass>>,
    seed: u64,
) -> (Scenario, usize) {
    let elected = blocking(|| cluster.wait_leader(Some(leader), Duration::from_secs(90)));
    let seen = Instant::now();
    let url = cluster.member_url(elected, "postgres", "patroni");
    let kept = Some(kept_on(&url, passes, at, seed, name).await);
    wait_success(passes, seen, seed, name).await;
    let scenario = Scenario {
        name,
        at,
        new_leader: Some(seen),
        checks_before,
        kept,
    };
    (scenario, elected)
}

/// Checks that every snapshot reported published by a pass that ended before `at` is on the
/// new leader (`url`); how many there were.
async fn kept_on(
    url: &str,
    passes: &Mutex<Vec<Pass>>,
    at: Instant,
    seed: u64,
    what: &str,
) -> usize {
    let reported: BTreeSet<(String, String)> = passes
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.ended < at)
        .flat_map(|p| p.published.iter().cloned())
        .collect();
    let started = Instant::now();
    let stored = loop {
        let read = async {
            let mut conn = PgConnection::connect(url).await.ok()?;
            let rows = sqlx::query(
                "SELECT project_id, snapshot_digest FROM ql3.tool_definition_snapshots",
            )
            .fetch_all(&mut conn)
            .await
            .ok()?;
            let _ = conn.close().await;
            Some(
                rows.iter()
                    .map(|r| (r.get::<String, _>(0), r.get::<String, _>(1)))
                    .collect::<BTreeSet<_>>(),
            )
        };
        if let Ok(Some(stored)) = tokio::time::timeout(Duration::from_secs(5), read).await {
            break stored;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "seed {seed}: the new leader {url} did not answer after {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let missing: Vec<_> = reported.difference(&stored).collect();
    assert!(
        missing.is_empty(),
        "seed {seed}: after {what}, {} of {} snapshots reported published are not on the new leader: {missing:?}",
        missing.len(),
        reported.len()
    );
    reported.len()
}

/// The longest stretch, from `from` on, between successful passes' ends (the window's passes,
/// which end in order of `ended` once sorted).
fn longest_without_success(window: &[&Pass], from: Instant) -> Duration {
    let mut ends: Vec<Instant> = window
        .iter()
        .filter(|p| p.code == Some(0))
        .map(|p| p.ended)
        .collect();
    ends.sort();
    let mut previous = from;
    let mut longest = Duration::ZERO;
    for end in ends {
        longest = longest.max(end - previous);
        previous = end;
    }
    longest
}

/// Waits, bounded, until a pass through each way that began after `since` has succeeded.
async fn wait_success(passes: &Mutex<Vec<Pass>>, since: Instant, seed: u64, what: &str) {
    let limit = Duration::from_secs(120);
    loop {
        let reached = {
            let p = passes.lock().unwrap();
            WAYS.iter().all(|w| next_success(&p, *w, since).is_some())
        };
        if reached {
            return;
        }
        if since.elapsed() > limit {
            let p = passes.lock().unwrap();
            let recent: Vec<String> = p
                .iter()
                .filter(|p| p.started >= since)
                .map(|p| format!("{}: {:?}", p.way.label(), p.code))
                .collect();
            panic!(
                "seed {seed}: no successful pass through each way within {limit:?} after {what}; passes since: {recent:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
