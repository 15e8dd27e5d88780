//! Storage and run benchmarks against a throwaway PostgreSQL server and SQLite files.
//!
//! `cargo bench --bench executor -- storage|run|scale|rss|import|batches|shards|held|all` prints the figures; nothing here is an
//! assertion. It starts its own PostgreSQL (`package_executor_testkit::pg`) and uses the release binary.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use package_executor_testkit::db::{connect, script, script_at};
use package_executor_testkit::pg;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use package_executor::canonical;
use package_executor::model::Digest;
use package_executor::store::{Dialect, Store};
use serde_json::json;
use sqlx::AssertSqlSafe;

/// The release binary; `PE_BENCH_BIN` measures another build instead (a before/after pair).
fn binary() -> PathBuf {
    if let Ok(other) = std::env::var("PE_BENCH_BIN") {
        return PathBuf::from(other);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new("cargo")
        .args([
            "build",
            "--release",
            "--locked",
            "--bin",
            "package-executor",
        ])
        .current_dir(&root)
        .status()
        .unwrap();
    assert!(status.success());
    root.join("target/release/package-executor")
}

fn hex_literal(d: Dialect, bytes: &[u8]) -> String {
    match d {
        Dialect::Postgres => format!("'\\x{}'::bytea", hex::encode(bytes)),
        Dialect::Sqlite => format!("X'{}'", hex::encode(bytes)),
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Loads `projects` projects of `packages` packages with `tools` tools each; revisions of
/// 0.5–2 KiB. Batched multi-row inserts, so loading is not what is measured.
async fn load(
    store: &Store,
    first: usize,
    projects: usize,
    packages: usize,
    tools: usize,
    head_gen: i64,
) {
    let d = store.dialect();
    let lock = Digest::of(b"");
    let batch = 250;
    for start in (first..first + projects).step_by(batch) {
        let end = (start + batch).min(first + projects);
        let (mut p, mut i, mut r, mut g) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for n in start..end {
            let project = format!("b{n:06}");
            p.push(format!("({})", quote(&project)));
            for k in 0..packages {
                let name = format!("pkg{k}.bench");
                let inst = format!("{project}-{k}");
                let pad = 300 + (n * 7 + k * 131) % 1400;
                let tools: Vec<_> = (0..tools).map(|t| json!({"name": format!("tool_{t}"), "version": "1.0.0",
                    "description": "Benchmark tool.", "inputSchema": {"type": "object", "properties": {"q": {"type": "string", "maxLength": 64}}}})).collect();
                let rev = canonical::to_vec(&json!({"schema": "qinglong/materialized-revision@v1",
                    "package": {"name": name, "version": "1.0.0"}, "tools": tools,
                    "files": {"project": project, "pad": "x".repeat(pad)}}));
                let rd = Digest::of(&rev);
                let gd = package_executor::sources::generation_digest(
                    &inst,
                    head_gen,
                    lock.as_str(),
                    rd.as_str(),
                    &[],
                );
                i.push(format!(
                    "({}, {}, {}, {head_gen})",
                    quote(&inst),
                    quote(&project),
                    quote(&name)
                ));
                r.push(format!(
                    "({}, {}, {})",
                    quote(rd.as_str()),
                    hex_literal(d, &rev),
                    rev.len()
                ));
                g.push(format!(
                    "({}, {head_gen}, 'active', {}, {}, {}, '[]')",
                    quote(&inst),
                    quote(gd.as_str()),
                    quote(lock.as_str()),
                    quote(rd.as_str())
                ));
            }
        }
        let deferred = if d == Dialect::Postgres {
            "SET CONSTRAINTS ALL DEFERRED;"
        } else {
            ""
        };
        script(store, &format!(
            "BEGIN; {deferred}
             INSERT INTO ql3.projects (project_id) VALUES {};
             INSERT INTO ql3.materialized_revisions (revision_digest, content, byte_length) VALUES {} ON CONFLICT DO NOTHING;
             INSERT INTO ql3.package_installations (installation_id, project_id, package_name, active_generation) VALUES {};
             INSERT INTO ql3.package_generations (installation_id, generation, status, generation_digest, lock_digest, revision_digest, approved_permissions) VALUES {};
             COMMIT;",
            p.join(","), r.join(","), i.join(","), g.join(",")
        )).await;
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Busy and total jiffies of the whole machine (first line of /proc/stat).
fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// The number in the environment variable `name`, or `default` when it is unset or not one.
fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The comma-separated numbers in the environment variable `name`, or those of `default`.
fn env_numbers(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect()
}

/// `KEY=VALUE` pairs separated by whitespace.
fn env_pairs(spec: &str) -> Vec<(String, String)> {
    spec.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The environment of every executor process the bench starts (not of the bench or the
/// database server): `PE_BENCH_EXEC_ENV="GLIBC_TUNABLES=glibc.malloc.tcache_count=128"` measures
/// the binary as the container image runs it (see the Dockerfile).
fn exec_env() -> Vec<(String, String)> {
    std::env::var("PE_BENCH_EXEC_ENV").map_or_else(|_| Vec::new(), |s| env_pairs(&s))
}

/// The bench server's postmaster: its pid (first line of `postmaster.pid`).
fn postmaster() -> Option<String> {
    let text = std::fs::read_to_string(pg::cluster().data_dir().join("postmaster.pid")).ok()?;
    text.lines().next().map(str::to_owned)
}

/// User and system CPU seconds of the children of `pid` that have exited and been reaped:
/// `cutime` and `cstime`, fields 16 and 17 of `/proc/PID/stat`, in USER_HZ (100 on Linux).
fn reaped_children_cpu(pid: &str) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<f64> = rest
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // `rest` begins at field 3, the state, which does not parse: field N is fields[N - 4].
    Some((fields.get(12)? / 100.0, fields.get(13)? / 100.0))
}

/// CPU seconds, user and system, that the server's ended backends have used: the postmaster's
/// reaped children ([`reaped_children_cpu`]), which count a backend once it has exited. Read
/// before and after a run, once the run's backends are gone ([`ServerCpu`]), it is the server's
/// CPU for that run, autovacuum's workers included. Steadier than wall time for an A/B of
/// server-side work: the ratio to the executor's own CPU in the same run does not move with the
/// machine's speed.
fn server_cpu() -> Option<f64> {
    reaped_children_cpu(&postmaster()?).map(|(user, system)| user + system)
}

/// The postmaster's children now (its backends and background workers), by pid.
fn server_children() -> Vec<String> {
    postmaster()
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok())
        .map_or_else(Vec::new, |c| {
            c.split_whitespace().map(str::to_owned).collect()
        })
}

/// Waits, up to 5 s, until every child the postmaster has now was already there `before`: a
/// client's backends exit after it disconnects, and their CPU counts only once they are reaped.
/// (A count would not do: a connection of the bench's that closes meanwhile makes room for one
/// of the run's.)
fn server_settled(before: &[String]) {
    let until = Instant::now() + Duration::from_secs(5);
    while server_children().iter().any(|c| !before.contains(c)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The server's CPU across a piece of work: [`server_cpu`] and the postmaster's children at the
/// start, the difference once the work's own backends are gone.
struct ServerCpu {
    children: Vec<String>,
    before: Option<f64>,
}

impl ServerCpu {
    fn start() -> Self {
        Self {
            children: server_children(),
            before: server_cpu(),
        }
    }

    /// CPU seconds the server used since [`ServerCpu::start`], when `/proc` tells.
    fn used(self) -> Option<f64> {
        server_settled(&self.children);
        self.before.zip(server_cpu()).map(|(b, a)| a - b)
    }
}

fn run_cli(bin: &PathBuf, url: &str, args: &[&str]) -> (Duration, serde_json::Value) {
    let (elapsed, v, _) = run_cli_cpu(bin, url, args);
    (elapsed, v)
}

/// A cold run for the floor pairs: [`run_cli_cpu`] from a checkpoint, its server CPU taken to
/// the checkpoint after it, so that each side pays for writing back its own pages and neither
/// for what the one before it (or the copies made before both) left dirty.
async fn cold_run(
    bin: &PathBuf,
    url: &str,
    args: &[&str],
) -> (Duration, serde_json::Value, Option<f64>) {
    let postgres = url.starts_with("postgres");
    if postgres {
        script_at(url, "CHECKPOINT").await;
    }
    let server = ServerCpu::start();
    let (took, v, _) = run_cli_cpu(bin, url, args);
    if postgres {
        script_at(url, "CHECKPOINT").await;
    }
    let cpu = server.used();
    if let Some(cpu) = cpu {
        println!("    cold run: server cpu {cpu:.2}s to the checkpoint after it");
    }
    (took, v, cpu)
}

/// [`run_cli`], and the server's CPU seconds across the run (when `/proc` tells).
fn run_cli_cpu(
    bin: &PathBuf,
    url: &str,
    args: &[&str],
) -> (Duration, serde_json::Value, Option<f64>) {
    let server = ServerCpu::start();
    let before = machine_jiffies();
    // The bench's own reaped children: the executor's CPU once `output` has waited for it.
    let mine = reaped_children_cpu("self");
    let t = Instant::now();
    let out = Command::new(bin)
        .args(args)
        .env("DATABASE_URL", url)
        .env("PACKAGE_EXECUTOR_LOG", "error")
        .envs(exec_env())
        .output()
        .unwrap();
    let elapsed = t.elapsed();
    let after = machine_jiffies();
    let server = server.used();
    if let Some(((user, system), (user0, system0))) = reaped_children_cpu("self").zip(mine) {
        let (user, system) = (user - user0, system - system0);
        let busy = (after.0 - before.0) as f64 / (after.1 - before.1).max(1) as f64;
        let server = server.map_or(String::new(), |s| {
            format!(
                "; server cpu {s:.2}s, {:.2}x the executor's",
                s / (user + system).max(0.01)
            )
        });
        println!(
            "    executor cpu: user {user:.2}s, system {system:.2}s (wall {:.2}s); \
             machine busy {:.0}% of all cores{server}",
            elapsed.as_secs_f64(),
            busy * 100.0
        );
    }
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (elapsed, v, server)
}

/// Floor/cold-run pairs for the `run` section (`BENCH_PAIRS`, at least 1).
/// The dialects `BENCH_DIALECTS` names (`postgres`, `sqlite`; both when unset), for the
/// sections that run on both.
fn dialects() -> Vec<&'static str> {
    let named = std::env::var("BENCH_DIALECTS").unwrap_or_else(|_| "postgres,sqlite".into());
    ["postgres", "sqlite"]
        .into_iter()
        .filter(|d| named.split(',').any(|n| n.trim() == *d))
        .collect()
}

fn bench_pairs() -> usize {
    env_number("BENCH_PAIRS", 1).max(1)
}

/// The in-server floor: the script named by `PE_FLOOR_SQL` when set (the yardstick kept
/// outside the repository), else the built-in loop below; its wall time on `url`.
async fn floor(url: &str) -> (Duration, String, Option<f64>) {
    script_at(url, "CHECKPOINT").await;
    let server = ServerCpu::start();
    let (took, which) = floor_run(url).await;
    script_at(url, "CHECKPOINT").await;
    let cpu = server.used();
    if let Some(cpu) = cpu {
        println!(
            "    floor: server cpu {cpu:.2}s (wall {:.2}s)",
            took.as_secs_f64()
        );
    }
    (took, which, cpu)
}

async fn floor_run(url: &str) -> (Duration, String) {
    match std::env::var("PE_FLOOR_SQL") {
        Ok(path) => {
            let text = std::fs::read_to_string(&path).unwrap();
            let store = connect(url).await;
            let t = Instant::now();
            script(&store, &text).await;
            let took = t.elapsed();
            store.close().await;
            (took, path)
        }
        Err(_) => {
            let store = connect(url).await;
            script(&store, FLOOR).await;
            let pool = &store.pg_pool().unwrap();
            let t = Instant::now();
            sqlx::query("SELECT public.bench_floor()")
                .execute(pool)
                .await
                .unwrap();
            let took = t.elapsed();
            store.close().await;
            (took, "the built-in PL/pgSQL loop".into())
        }
    }
}

/// The cold run against the in-server floor on a copy of the same database, and the same cold
/// run after a database-wide `VACUUM ANALYZE` taken while the snapshot tables were empty (with
/// autovacuum off on them, so nothing re-analyzes them during the run).
async fn bench_run(bin: &PathBuf, dir: &std::path::Path) {
    let n = env_number("BENCH_PROJECTS", 20_000);
    let concurrency = std::env::var("BENCH_CONCURRENCY").unwrap_or_else(|_| "4".into());
    for dialect in dialects() {
        let url = if dialect == "postgres" {
            pg::clone_db(pg::TEMPLATE, "bench_run").await
        } else {
            pg::migrated_sqlite(&dir.join("run.db")).await
        };
        let store = connect(&url).await;
        let t = Instant::now();
        load(&store, 0, n, 8, 4, 1).await;
        println!(
            "[run/{dialect}] loaded {n} projects x 8 packages x 4 tools in {:.1}s",
            t.elapsed().as_secs_f64()
        );
        store.close().await;
        let copies = if dialect == "postgres" {
            Some((
                pg::clone_db("bench_run", "bench_floor").await,
                pg::clone_db("bench_run", "bench_analyzed").await,
            ))
        } else {
            None
        };
        // `BENCH_PAIRS=N`: N-1 more floor/cold-run pairs, each on fresh copies of the same load
        // and run back to back, so that the ratio is read from pairs measured minutes apart
        // rather than from one pair on a machine whose speed drifts by a third within the hour.
        let mut pairs = Vec::new();
        if dialect == "postgres" {
            for i in 1..bench_pairs() {
                pairs.push((
                    pg::clone_db("bench_run", &format!("bench_floor_{i}")).await,
                    pg::clone_db("bench_run", &format!("bench_cold_{i}")).await,
                ));
            }
        }
        // `PE_BENCH_BIN2`: another build's cold run on a copy of the same database, measured
        // right after this one (a before/after pair from one load).
        let other = match std::env::var("PE_BENCH_BIN2") {
            Ok(b) if dialect == "postgres" => Some((
                PathBuf::from(b),
                pg::clone_db("bench_run", "bench_other").await,
            )),
            _ => None,
        };
        let (cold, v, cold_cpu) =
            cold_run(bin, &url, &["run", "--json", "--concurrency", &concurrency]).await;
        let rate = n as f64 / cold.as_secs_f64();
        println!(
            "[run/{dialect}] cold run: {:.2}s, {rate:.0} projects/s, published {}",
            cold.as_secs_f64(),
            v["published"]
        );
        if let Some((b, u)) = &other {
            let (t, v) = run_cli(b, u, &["run", "--json", "--concurrency", &concurrency]);
            println!(
                "[run/{dialect}] cold run of {}: {:.2}s, published {}",
                b.display(),
                t.as_secs_f64(),
                v["published"]
            );
        }
        if dialect == "postgres"
            && std::env::var("PE_PG_CONF").is_ok_and(|c| c.contains("pg_stat_statements"))
        {
            statement_report(&url).await;
        }
        if dialect == "postgres"
            && std::env::var("PE_PG_CONF").is_ok_and(|c| c.contains("track_functions"))
        {
            function_report(&url, n).await;
        }
        let (warm, v) = run_cli(bin, &url, &["run", "--json"]);
        println!(
            "[run/{dialect}] second run, nothing pending: {:.3}s (published {})",
            warm.as_secs_f64(),
            v["published"]
        );
        let (took, v) = run_cli(bin, &url, &["verify", "--json"]);
        println!(
            "[run/{dialect}] verify: {:.2}s, {:.0} snapshots/s ({} checked, {} problems)",
            took.as_secs_f64(),
            v["checked"].as_f64().unwrap_or(0.0) / took.as_secs_f64(),
            v["checked"],
            v["problems"].as_array().map_or(0, Vec::len)
        );
        let Some((floor_url, analyzed_url)) = copies else {
            continue;
        };
        let (took, which, floor_cpu) = floor(&floor_url).await;
        let floor_rate = n as f64 / took.as_secs_f64();
        // The server's CPU per published snapshot against the floor's per project.
        let cpu_ratio = |cold: Option<f64>, floor: Option<f64>| cold.zip(floor).map(|(c, f)| c / f);
        let show = |r: Option<f64>| r.map_or("?".to_string(), |r| format!("{r:.2}x"));
        println!(
            "[run/postgres] floor ({which}) on a copy: {:.2}s, {floor_rate:.0} projects/s; executor/floor throughput = {:.2}x, server cpu = {}",
            took.as_secs_f64(),
            rate / floor_rate,
            show(cpu_ratio(cold_cpu, floor_cpu))
        );
        let mut ratios = vec![rate / floor_rate];
        let mut cpus: Vec<f64> = cpu_ratio(cold_cpu, floor_cpu).into_iter().collect();
        let mut colds = vec![cold.as_secs_f64()];
        for (i, (floor_url, cold_url)) in pairs.iter().enumerate() {
            let (took, _, floor_cpu) = floor(floor_url).await;
            let (cold, v, cold_cpu) = cold_run(
                bin,
                cold_url,
                &["run", "--json", "--concurrency", &concurrency],
            )
            .await;
            let ratio = took.as_secs_f64() / cold.as_secs_f64();
            let cpu = cpu_ratio(cold_cpu, floor_cpu);
            println!(
                "[run/postgres] pair {}: floor {:.2}s, cold run {:.2}s (published {}); throughput {ratio:.2}x, server cpu {}",
                i + 2,
                took.as_secs_f64(),
                cold.as_secs_f64(),
                v["published"],
                show(cpu)
            );
            ratios.push(ratio);
            cpus.extend(cpu);
            colds.push(cold.as_secs_f64());
        }
        if ratios.len() > 1 {
            let (lowest, middle, highest) = spread(&mut ratios);
            println!(
                "[run/postgres] executor/floor throughput over {} pairs: median {middle:.2}x (lowest {lowest:.2}x, highest {highest:.2}x)",
                ratios.len(),
            );
        }
        if cpus.len() > 1 {
            let (lowest, middle, highest) = spread(&mut cpus);
            println!(
                "[run/postgres] executor/floor server cpu over {} pairs: median {middle:.2}x (lowest {lowest:.2}x, highest {highest:.2}x)",
                cpus.len(),
            );
        }
        script_at(
            &analyzed_url,
            "ALTER TABLE ql3.tool_definition_snapshots SET (autovacuum_enabled = false);
             ALTER TABLE ql3.tool_definition_snapshot_sources SET (autovacuum_enabled = false);
             ALTER TABLE ql3.tool_definition_snapshot_rejections SET (autovacuum_enabled = false);
             ALTER TABLE ql3.pending_projects SET (autovacuum_enabled = false);",
        )
        .await;
        // Alone: VACUUM cannot run inside the implicit transaction of a multi-statement query.
        script_at(&analyzed_url, "VACUUM ANALYZE").await;
        let (after, v) = run_cli(
            bin,
            &analyzed_url,
            &["run", "--json", "--concurrency", &concurrency],
        );
        // Against the median of the steady cold runs (one unless `BENCH_PAIRS`).
        let (_, steady, _) = spread(&mut colds);
        println!(
            "[run/postgres] cold run after VACUUM ANALYZE of the empty snapshot tables (autovacuum off on them): {:.2}s, published {}; {:.2}x the steady cold run ({steady:.2}s, median of {})",
            after.as_secs_f64(),
            v["published"],
            after.as_secs_f64() / steady,
            colds.len()
        );
    }
}

/// The lowest, median and highest of `values` (not empty); an even count's median is the mean
/// of the two middle values.
fn spread(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n.is_multiple_of(2) {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    } else {
        values[n / 2]
    };
    (values[0], median, values[n - 1])
}

/// Changes `count` of the projects `b000000..`, spread evenly over `of`: each gets a new
/// revision, generation 2, active.
async fn change_projects(store: &Store, count: usize, of: usize) -> Vec<String> {
    let d = store.dialect();
    let lock = Digest::of(b"");
    let mut changed = Vec::new();
    let mut sql = String::from("BEGIN;");
    for k in 0..count {
        let project = format!("b{:06}", k * (of / count));
        let inst = format!("{project}-0");
        let name = "pkg0.bench";
        let rev = canonical::to_vec(&json!({"schema": "qinglong/materialized-revision@v1",
            "package": {"name": name, "version": "2.0.0"},
            "tools": [{"name": "changed", "version": "2.0.0", "inputSchema": {"type": "object"}}],
            "files": {"project": project}}));
        let rd = Digest::of(&rev);
        let gd =
            package_executor::sources::generation_digest(&inst, 2, lock.as_str(), rd.as_str(), &[]);
        sql.push_str(&format!(
            "INSERT INTO ql3.materialized_revisions (revision_digest, content, byte_length) VALUES ({}, {}, {});
             INSERT INTO ql3.package_generations (installation_id, generation, status, generation_digest, lock_digest, revision_digest, approved_permissions) VALUES ({}, 2, 'active', {}, {}, {}, '[]');
             UPDATE ql3.package_generations SET status = 'superseded' WHERE installation_id = {} AND generation = 1;
             UPDATE ql3.package_installations SET active_generation = 2 WHERE installation_id = {};",
            quote(rd.as_str()), hex_literal(d, &rev), rev.len(),
            quote(&inst), quote(gd.as_str()), quote(lock.as_str()), quote(rd.as_str()),
            quote(&inst), quote(&inst)
        ));
        changed.push(project);
    }
    sql.push_str("COMMIT;");
    script(store, &sql).await;
    changed
}

/// What a run costs when little changed: the no-op run at 20,000 and 100,000 one-package
/// projects, and the run after 100 of the 100,000 changed (it must publish exactly those).
async fn bench_scale(bin: &PathBuf, dir: &std::path::Path) {
    let sizes = [20_000, 100_000];
    for dialect in ["postgres", "sqlite"] {
        let url = if dialect == "postgres" {
            pg::clone_db(pg::TEMPLATE, "bench_scale").await
        } else {
            pg::migrated_sqlite(&dir.join("scale.db")).await
        };
        let mut loaded = 0;
        for total in sizes {
            let store = connect(&url).await;
            load(&store, loaded, total - loaded, 1, 2, 1).await;
            store.close().await;
            loaded = total;
            let (cold, v) = run_cli(bin, &url, &["run", "--json"]);
            println!(
                "[scale/{dialect}] {total} projects: cold run {:.2}s, published {}",
                cold.as_secs_f64(),
                v["published"]
            );
            let mut noop = Vec::new();
            for _ in 0..3 {
                let (t, v) = run_cli(bin, &url, &["run", "--json"]);
                assert_eq!(v["published"], 0);
                noop.push(t);
            }
            println!(
                "[scale/{dialect}] {total} projects: no-op run {:.3}s (median of 3; {:?})",
                median(noop.clone()).as_secs_f64(),
                noop.iter()
                    .map(|d| format!("{:.3}", d.as_secs_f64()))
                    .collect::<Vec<_>>()
            );
        }
        let store = connect(&url).await;
        let changed = change_projects(&store, 100, 100_000).await;
        store.close().await;
        let (t, v) = run_cli(bin, &url, &["run", "--json"]);
        println!(
            "[scale/{dialect}] 100 of 100000 projects changed: run {:.3}s, published {} (expected {}), scanned {}",
            t.as_secs_f64(),
            v["published"],
            changed.len(),
            v["projectsScanned"]
        );
        let (full, v) = run_cli(bin, &url, &["run", "--json", "--full-scan"]);
        println!(
            "[scale/{dialect}] --full-scan over 100000 projects, nothing pending: {:.3}s (published {})",
            full.as_secs_f64(),
            v["published"]
        );
    }
}

/// With `PE_PG_CONF="shared_preload_libraries=pg_stat_statements;pg_stat_statements.track_planning=on"`,
/// prints where the server spent the cold run's time, statement by statement.
async fn statement_report(url: &str) {
    let store = connect(url).await;
    let pool = store.pg_pool().unwrap();
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public")
        .execute(&pool)
        .await
        .unwrap();
    let rows: Vec<(i64, f64, f64, String)> = sqlx::query_as(
        "SELECT calls, total_plan_time, total_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 110)
         FROM public.pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
         ORDER BY total_plan_time + total_exec_time DESC LIMIT 15",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    println!("    calls    plan ms    exec ms  statement");
    for (calls, plan, exec, q) in rows {
        println!("    {calls:>6} {plan:>10.1} {exec:>10.1}  {q}");
    }
    store.close().await;
}

/// The server's time in the schema's PL/pgSQL functions during the cold run
/// (`track_functions`): the snapshot checks among them, per snapshot.
async fn function_report(url: &str, snapshots: usize) {
    let store = connect(url).await;
    let pool = store.pg_pool().unwrap();
    let rows: Vec<(String, i64, f64, f64)> = sqlx::query_as(
        "SELECT funcname::text, calls, total_time, self_time FROM pg_stat_user_functions
         WHERE schemaname = 'ql3' ORDER BY total_time DESC",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    println!("    function                          calls   total ms    self ms  ms per snapshot");
    for (name, calls, total, own) in rows {
        println!(
            "    {name:<32} {calls:>6} {total:>10.1} {own:>10.1}  {:.4}",
            total / snapshots as f64
        );
    }
    store.close().await;
}

const FLOOR: &str = r#"
CREATE TABLE public.scratch_snapshots (project_id text, vector_digest bytea, snapshot_digest bytea, doc bytea);
CREATE TABLE public.scratch_sources (project_id text, package_name text, installation_id text, generation bigint,
  generation_digest text, lock_digest text, revision_digest text);
CREATE FUNCTION public.bench_floor() RETURNS integer LANGUAGE plpgsql AS $f$
DECLARE p record; h record; n integer := 0; vec jsonb; defs jsonb; doc text; rev jsonb;
BEGIN
  FOR p IN SELECT project_id FROM ql3.projects ORDER BY project_id LOOP
    vec := '[]'::jsonb; defs := '[]'::jsonb;
    FOR h IN SELECT i.package_name, i.installation_id, i.active_generation, g.generation_digest, g.lock_digest, g.revision_digest
             FROM ql3.package_installations i JOIN ql3.package_generations g
               ON g.installation_id = i.installation_id AND g.generation = i.active_generation
             WHERE i.project_id = p.project_id AND i.active_generation IS NOT NULL ORDER BY i.package_name LOOP
      SELECT convert_from(r.content, 'UTF8')::jsonb INTO rev FROM ql3.materialized_revisions r
        WHERE r.revision_digest = h.revision_digest AND sha256(r.content) IS NOT NULL;
      defs := defs || coalesce(rev->'tools', '[]'::jsonb);
      vec := vec || jsonb_build_array(jsonb_build_object('packageName', h.package_name, 'installationId', h.installation_id,
        'generation', h.active_generation, 'generationDigest', h.generation_digest, 'lockDigest', h.lock_digest,
        'revisionDigest', h.revision_digest));
      INSERT INTO public.scratch_sources VALUES (p.project_id, h.package_name, h.installation_id, h.active_generation,
        h.generation_digest, h.lock_digest, h.revision_digest);
    END LOOP;
    doc := jsonb_build_object('schema', 'qinglong/project-tool-definition-snapshot@v1', 'projectId', p.project_id,
      'activeVector', vec, 'definitions', defs)::text;
    INSERT INTO public.scratch_snapshots VALUES (p.project_id, sha256(convert_to(vec::text, 'UTF8')),
      sha256(convert_to(doc, 'UTF8')), convert_to(doc, 'UTF8'));
    n := n + 1;
  END LOOP;
  RETURN n;
END $f$;
"#;

async fn bench_storage(dir: &std::path::Path) {
    for dialect in ["postgres", "sqlite"] {
        let url = if dialect == "postgres" {
            pg::clone_db(pg::TEMPLATE, "bench_storage").await
        } else {
            pg::migrated_sqlite(&dir.join("storage.db")).await
        };
        let store = connect(&url).await;
        // find_current: one project, 128 packages, 50 historical snapshots.
        load(&store, 900_000, 1, 128, 1, 1).await;
        let obs = package_executor::coordinator::LogObserver;
        let settings = package_executor::coordinator::RunSettings::default();
        let c = package_executor::coordinator::Coordinator::new(
            store.clone(),
            settings,
            package_executor::coordinator::Stop::default(),
            &obs,
        );
        let project = "b900000";
        for generation in 2..=50 {
            // Give package 0 a new generation and activate it, then publish: one more snapshot.
            let mut a = store.begin().await.unwrap();
            let heads = a.observe(project).await.unwrap();
            a.rollback().await.unwrap();
            let h = &heads[0].head;
            let d = Digest::of(format!("gen {generation}").as_bytes());
            script(&store, &format!(
                "INSERT INTO ql3.package_generations VALUES ('{}', {generation}, 'staged', '{d}', '{}', '{}', '[]')",
                h.installation_id, h.lock_digest, h.revision_digest)).await;
            package_executor::sources::activate(&store, &h.installation_id, generation)
                .await
                .unwrap();
            assert_eq!(c.publish(project).await.unwrap().name(), "published");
        }
        let mut a = store.begin().await.unwrap();
        let mut times = Vec::new();
        for _ in 0..200 {
            let t = Instant::now();
            assert!(a.find_current(project).await.unwrap().is_some());
            times.push(t.elapsed());
        }
        a.rollback().await.unwrap();
        println!(
            "[storage/{dialect}] find_current, 128 packages, 50 snapshots: median {:?} (200 calls)",
            median(times)
        );

        // The pending query over 100,000 projects (empty ones, so snapshots can be made in bulk).
        let rows = 100_000;
        let (series, digest) = match store.dialect() {
            Dialect::Postgres => (
                "SELECT 'e' || lpad(n::text, 6, '0') AS id FROM generate_series(1, 100000) AS n",
                "'sha256:' || encode(sha256(convert_to(id, 'UTF8')), 'hex')",
            ),
            Dialect::Sqlite => (
                "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 100000) SELECT 'e' || printf('%06d', n) AS id FROM s",
                "printf('sha256:%064x', abs(random()))",
            ),
        };
        script(
            &store,
            &format!("INSERT INTO ql3.projects (project_id) SELECT id FROM ({series}) AS q"),
        )
        .await;
        let pending_all = time_pending(&store).await;
        if dialect == "postgres" {
            // Whole empty snapshots, as the database checks them (migration 11): the canonical
            // document of a project without packages, with its three digests.
            script(&store, &format!(
                "WITH q AS (
                   SELECT id, 'sha256:' || encode(sha256(convert_to('{{\"packages\":[],\"projectId\":\"' || id
                            || '\",\"schema\":\"qinglong/active-vector@v1\"}}', 'UTF8')), 'hex') AS avd,
                          'sha256:' || encode(sha256(convert_to('{{\"definitions\":[],\"schema\":\"qinglong/tool-definitions@v1\"}}', 'UTF8')), 'hex') AS dd
                   FROM ({series}) AS s),
                 d AS (
                   SELECT id, avd, dd, convert_to('{{\"activeVector\":[],\"activeVectorDigest\":\"' || avd
                            || '\",\"definitionDigest\":\"' || dd || '\",\"definitions\":[],\"projectId\":\"' || id
                            || '\",\"schema\":\"qinglong/project-tool-definition-snapshot@v1\"}}', 'UTF8') AS doc
                   FROM q)
                 INSERT INTO ql3.tool_definition_snapshots (project_id, active_vector_digest, definition_digest, snapshot_digest, package_count, definition_count, canonical_json, source_key)
                 SELECT id, avd, dd, 'sha256:' || encode(sha256(doc), 'hex'), 0, 0, doc, '' FROM d")).await;
        } else {
            script(&store, &format!(
                "INSERT INTO ql3.tool_definition_snapshots (project_id, active_vector_digest, definition_digest, snapshot_digest, package_count, definition_count, canonical_json, source_key) \
                 SELECT id, {digest}, {digest}, printf('sha256:%064x', abs(random())), 0, 0, {}, '' FROM ({series}) AS q",
                hex_literal(store.dialect(), b"{}"))).await;
        }
        if dialect == "postgres" {
            script(&store, "ANALYZE").await;
        }
        let pending_none = time_pending(&store).await;
        if std::env::var_os("BENCH_EXPLAIN").is_some() && dialect == "postgres" {
            use sqlx::Row;
            let text = format!(
                "EXPLAIN ANALYZE {}",
                package_executor::store::PENDING_PAGE_SQL
                    .replace("$1", "''")
                    .replace("$2", "256")
            );
            for r in sqlx::query(AssertSqlSafe(text))
                .fetch_all(&store.pg_pool().unwrap())
                .await
                .unwrap()
            {
                println!("{}", r.get::<String, _>(0));
            }
        }
        println!(
            "[storage/{dialect}] pending page over {rows} projects: first page when all pending {:?}; full scan when none pending {:?} (median of 5)",
            pending_all, pending_none
        );
        store.close().await;
    }
}

/// Median of five first-page queries (what a run asks first; with nothing pending it scans all).
async fn time_pending(store: &Store) -> Duration {
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        store.pending_page("", 256).await.unwrap();
        times.push(t.elapsed());
    }
    median(times)
}

/// The 3 GiB project: 128 packages whose revisions are 24 MiB each, nearly all of it in the
/// ignored `files` member. The same revisions on both dialects.
fn big_revision(k: usize) -> (String, Vec<u8>) {
    let limit = 24 * 1024 * 1024;
    let name = format!("big{k:03}.pkg");
    let head = r#"{"files":""#;
    let tail = format!(
        r#"","package":{{"name":"{name}","version":"1.0.0"}},"schema":"qinglong/materialized-revision@v1","tools":[{{"inputSchema":{{"type":"object"}},"name":"t","version":"1.0.0"}}]}}"#
    );
    let mut bytes = Vec::with_capacity(limit);
    bytes.extend_from_slice(head.as_bytes());
    bytes.resize(limit - tail.len(), b'x');
    bytes.extend_from_slice(tail.as_bytes());
    (name, bytes)
}

/// Stores revision `k` of the 3 GiB project once, with plain statements, on either pool.
macro_rules! insert_big_revision {
    ($pool:expr, $dialect:expr, $k:expr) => {{
        let (_, bytes) = big_revision($k);
        let q = |t: &str| AssertSqlSafe($dialect.render(t).into_owned());
        sqlx::query(q("INSERT INTO ql3.materialized_revisions (revision_digest, content, byte_length) VALUES ($1, $2, $3)"))
            .bind(Digest::of(&bytes).as_str())
            .bind(&bytes)
            .bind(bytes.len() as i64)
            .execute($pool)
            .await
            .unwrap();
    }};
}

/// Installs package `k` in `project`, pointing at the stored revision `k`: several projects
/// share the 3 GiB of revisions, so one load serves several measured runs.
macro_rules! install_big {
    ($pool:expr, $dialect:expr, $project:expr, $k:expr) => {{
        let (name, bytes) = big_revision($k);
        let rd = Digest::of(&bytes);
        let lock = Digest::of(b"");
        let inst = format!("{}-{}", $project, $k);
        let gd =
            package_executor::sources::generation_digest(&inst, 1, lock.as_str(), rd.as_str(), &[]);
        let mut tx = $pool.begin().await.unwrap();
        if $dialect == Dialect::Postgres {
            sqlx::query("SET CONSTRAINTS ALL DEFERRED").execute(&mut *tx).await.unwrap();
        }
        let q = |t: &str| AssertSqlSafe($dialect.render(t).into_owned());
        sqlx::query(q("INSERT INTO ql3.package_installations (installation_id, project_id, package_name, active_generation) VALUES ($1, $2, $3, 1)"))
            .bind(&inst)
            .bind($project)
            .bind(&name)
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query(q("INSERT INTO ql3.package_generations (installation_id, generation, status, generation_digest, lock_digest, revision_digest, approved_permissions) VALUES ($1, 1, 'active', $2, $3, $4, '[]')"))
            .bind(&inst)
            .bind(gd.as_str())
            .bind(lock.as_str())
            .bind(rd.as_str())
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }};
}

/// Peak RSS and wall time of one command, from `/usr/bin/time -v`.
fn measured(
    bin: &PathBuf,
    url: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (String, String, String) {
    let out = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(bin)
        .args(args)
        .env("DATABASE_URL", url)
        .env("PACKAGE_EXECUTOR_LOG", "error")
        .envs(exec_env())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let find = |needle: &str| {
        stderr
            .lines()
            .find(|l| l.contains(needle))
            .map_or("?".to_owned(), |l| l.trim().to_owned())
    };
    let rss = find("Maximum resident set size");
    let wall = find("Elapsed (wall clock)");
    let result = format!(
        "{} -> {}",
        String::from_utf8_lossy(&out.stdout).trim(),
        out.status
    );
    if !out.status.success() {
        println!("    stderr: {}", stderr.trim());
    }
    (result, rss, wall)
}

/// Extra environments to measure `publish` under besides the default, for experiments:
/// `PE_RSS_ENV="A=1 B=2;C=3"` measures three runs (default, A+B, C), each on its own project.
fn rss_variants() -> Vec<Vec<(String, String)>> {
    let mut variants = vec![Vec::new()];
    if let Ok(spec) = std::env::var("PE_RSS_ENV") {
        for v in spec.split(';').filter(|v| !v.trim().is_empty()) {
            variants.push(env_pairs(v));
        }
    }
    variants
}

async fn bench_rss(bin: &PathBuf, dir: &std::path::Path) {
    let variants = rss_variants();
    for dialect in ["postgres", "sqlite"] {
        let url = if dialect == "postgres" {
            pg::clone_db(pg::TEMPLATE, "bench_rss").await
        } else {
            pg::migrated_sqlite(&dir.join("rss.db")).await
        };
        let store = connect(&url).await;
        for k in 0..128 {
            match (store.pg_pool(), store.sqlite_pool()) {
                (Some(p), _) => insert_big_revision!(&p, Dialect::Postgres, k),
                (_, Some(p)) => insert_big_revision!(p, Dialect::Sqlite, k),
                _ => unreachable!(),
            }
        }
        for v in 0..variants.len() {
            let project = format!("big{v}");
            script(
                &store,
                &format!("INSERT INTO ql3.projects (project_id) VALUES ('{project}')"),
            )
            .await;
            for k in 0..128 {
                match (store.pg_pool(), store.sqlite_pool()) {
                    (Some(p), _) => install_big!(p, Dialect::Postgres, project.as_str(), k),
                    (_, Some(p)) => install_big!(p, Dialect::Sqlite, project.as_str(), k),
                    _ => unreachable!(),
                }
            }
        }
        store.close().await;
        for (v, env) in variants.iter().enumerate() {
            let project = format!("big{v}");
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let (result, rss, wall) =
                measured(bin, &url, &["publish", project.as_str(), "--json"], &env);
            println!(
                "[rss/{dialect}] publish of 128 packages x 24 MiB revisions {env:?}: {result}; {rss}; {wall}"
            );
        }
    }
}

/// Writes a fixture of `n` projects × 8 packages × 2 generations, each revision its own
/// (about 1 KiB), project by project; returns its size.
fn write_big_fixture(path: &std::path::Path, n: usize) -> u64 {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    out.write_all(br#"{"schema":"package-executor/fixture@v1","projects":["#)
        .unwrap();
    for p in 0..n {
        let project = format!("f{p:06}");
        let packages: Vec<_> = (0..8)
            .map(|k| {
                let name = format!("pkg{k}.import");
                let generation = |g: u32, status: &str| {
                    json!({"generation": g, "status": status, "approvedPermissions": ["network"],
                        "revision": {"schema": "qinglong/materialized-revision@v1",
                            "package": {"name": name, "version": format!("1.{g}.0")},
                            "tools": [{"name": "lookup", "version": "1.0.0", "description": "Bench tool.",
                                "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}}],
                            "files": {"project": project, "pad": "x".repeat(700 + (p * 7 + k * 131) % 300)}}})
                };
                json!({"packageName": name, "installationId": format!("{project}-{k}"),
                    "generations": [generation(1, "superseded"), generation(2, "active")]})
            })
            .collect();
        if p > 0 {
            out.write_all(b",").unwrap();
        }
        serde_json::to_writer(
            &mut out,
            &json!({"projectId": project, "packages": packages}),
        )
        .unwrap();
    }
    out.write_all(b"]}").unwrap();
    out.flush().unwrap();
    std::fs::metadata(path).unwrap().len()
}

/// Lets the writes of what ran before reach the disk (a PostgreSQL checkpoint, then `sync`),
/// so that a measurement does not pay for them: the PostgreSQL import leaves a gigabyte or so
/// of dirty pages behind, and the SQLite import after it took 27.1 s without this step and
/// 23.2 s with it (one run each).
async fn settle() {
    script_at(&pg::cluster().url("postgres"), "CHECKPOINT").await;
    let synced = Command::new("sync").status().is_ok_and(|s| s.success());
    assert!(synced, "sync failed");
}

/// `sources import` of a large fixture on both dialects: time and peak RSS, first import and
/// the idempotent second one.
async fn bench_import(bin: &PathBuf, dir: &std::path::Path) {
    let n = env_number("BENCH_IMPORT_PROJECTS", 20_000);
    let file = dir.join("import-fixture.json");
    let size = write_big_fixture(&file, n);
    println!(
        "[import] fixture of {n} projects x 8 packages x 2 generations: {:.0} MB",
        size as f64 / 1e6
    );
    for dialect in ["postgres", "sqlite"] {
        let url = if dialect == "postgres" {
            pg::clone_db(pg::TEMPLATE, "bench_import").await
        } else {
            pg::migrated_sqlite(&dir.join("import.db")).await
        };
        for pass in ["first", "again"] {
            settle().await;
            let (result, rss, wall) = measured(
                bin,
                &url,
                &["sources", "import", file.to_str().unwrap()],
                &[],
            );
            println!("[import/{dialect}] {pass}: {result}; {rss}; {wall}");
        }
    }
    let _ = std::fs::remove_file(&file);
}

fn main() {
    // `cargo test --all-targets` runs bench binaries without `--bench`: do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("benchmarks run only under `cargo bench --bench executor`");
        return;
    }
    let which: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let all = which.is_empty() || which.iter().any(|w| w == "all");
    let wants = |w: &str| all || which.iter().any(|x| x == w);
    let dir = tempfile::tempdir().unwrap();
    let bin = binary();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if wants("storage") {
            bench_storage(dir.path()).await;
        }
        if wants("run") {
            bench_run(&bin, dir.path()).await;
        }
        if wants("scale") {
            bench_scale(&bin, dir.path()).await;
        }
        if wants("rss") {
            bench_rss(&bin, dir.path()).await;
        }
        if wants("import") {
            bench_import(&bin, dir.path()).await;
        }
        if wants("batches") {
            bench_batches(&bin, dir.path()).await;
        }
        if wants("shards") {
            bench_shards(&bin).await;
        }
        if wants("held") {
            bench_held(&bin).await;
        }
    });
}

/// `held`: a run over `BENCH_HELD_PROJECTS` projects (default 400, × 2 packages × 2 tools) of
/// which every other one's claim another executor session holds through the run, at each
/// `--batch-size` of `BENCH_BATCH_SIZES` (default 1, 32, 512), each on a fresh copy, with the
/// defaults' backoff and attempts. Prints each run's wall time and its ratio to the first
/// size's: the held projects are retried together, in batches, never one by one (contract
/// section 9.2), so batches should cost no more time than lone attempts.
async fn bench_held(bin: &PathBuf) {
    let n = env_number("BENCH_HELD_PROJECTS", 400);
    let sizes = env_numbers("BENCH_BATCH_SIZES", "1,32,512");
    let base = pg::clone_db(pg::TEMPLATE, "bench_held").await;
    let store = connect(&base).await;
    load(&store, 0, n, 2, 2, 1).await;
    store.close().await;
    let mut first = None;
    for &size in &sizes {
        let url = pg::clone_db("bench_held", &format!("bench_held_{size}")).await;
        let holder = connect(&pg::as_login(&url, "login_executor")).await;
        let mut held = holder.begin().await.unwrap();
        let locked: i64 = match &mut held {
            package_executor::store::Attempt::Pg(tx) => sqlx::query_scalar(
                "SELECT count(*) FROM (SELECT 1 FROM ql3.project_claims \
                 WHERE (right(project_id, 6)::int % 2) = 1 FOR UPDATE) AS k",
            )
            .fetch_one(&mut **tx)
            .await
            .unwrap(),
            _ => unreachable!(),
        };
        let t = Instant::now();
        let out = Command::new(bin)
            .args(["run", "--json", "--batch-size", &size.to_string()])
            .env("DATABASE_URL", pg::as_login(&url, "login_executor"))
            .env("PACKAGE_EXECUTOR_LOG", "error")
            .envs(exec_env())
            .output()
            .unwrap();
        let wall = t.elapsed().as_secs_f64();
        held.rollback().await.unwrap();
        holder.close().await;
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        let ratio = wall / *first.get_or_insert(wall);
        println!(
            "[held] --batch-size {size}: {wall:.2}s ({ratio:.2}x the first), {locked} held, \
             published {}, claimed elsewhere {}",
            v["published"], v["claimedElsewhere"]
        );
    }
}

/// `shards`: the cold run of one load (`BENCH_PROJECTS` × 8 × 4, default 20,000) split over 1,
/// 2 and 4 shards (`BENCH_SHARDS`): separate executor processes, each with `--shard-index` and
/// `--shard-count`, started together against one PostgreSQL server, each on a fresh copy of
/// the load and from a checkpoint. Prints each shard's wall time, the shards' total (first
/// start to last end) and the server's CPU per published snapshot (to the checkpoint after
/// the run), which should stay flat as shards are added: the server, not the executors, is
/// what they share.
async fn bench_shards(bin: &PathBuf) {
    let n = env_number("BENCH_PROJECTS", 20_000);
    let counts = env_numbers("BENCH_SHARDS", "1,2,4");
    let url = pg::clone_db(pg::TEMPLATE, "bench_shards").await;
    let store = connect(&url).await;
    load(&store, 0, n, 8, 4, 1).await;
    store.close().await;
    println!("[shards] loaded {n} projects x 8 packages x 4 tools");
    for count in counts {
        let url = pg::clone_db("bench_shards", &format!("bench_shards_{count}")).await;
        script_at(&url, "CHECKPOINT").await;
        let server = ServerCpu::start();
        let started = Instant::now();
        let children: Vec<_> = (0..count)
            .map(|index| {
                Command::new(bin)
                    .args([
                        "run",
                        "--json",
                        "--shard-index",
                        &index.to_string(),
                        "--shard-count",
                        &count.to_string(),
                    ])
                    .env("DATABASE_URL", &url)
                    .env("PACKAGE_EXECUTOR_LOG", "error")
                    .envs(exec_env())
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut published = 0;
        let mut walls = Vec::new();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let v: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
            published += v["published"].as_u64().unwrap_or(0);
            walls.push(v["elapsedMs"].as_f64().unwrap_or(f64::NAN) / 1000.0);
        }
        let total = started.elapsed().as_secs_f64();
        script_at(&url, "CHECKPOINT").await;
        let cpu = server.used();
        let per = cpu.map_or("?".into(), |c| {
            format!("{:.3} ms", c * 1000.0 / published.max(1) as f64)
        });
        println!(
            "[shards] {count} shard(s): total {total:.2}s (each shard's own: {}), published {published}, \
             {:.0} projects/s, server cpu {} = {per} per snapshot",
            walls
                .iter()
                .map(|w| format!("{w:.1}s"))
                .collect::<Vec<_>>()
                .join(", "),
            published as f64 / total,
            cpu.map_or("?".into(), |c| format!("{c:.2}s")),
        );
    }
}

/// One cold run of the batch-size sweep.
struct BatchPoint {
    dialect: &'static str,
    size: usize,
    wall: f64,
    /// The server's CPU seconds (PostgreSQL; `None` for SQLite, which runs in the executor).
    server_cpu: Option<f64>,
    published: u64,
}

/// `batches`: the cold run at each `--batch-size` of `BENCH_BATCH_SIZES` (default 1, 8, 32,
/// 128, 512), each on a fresh copy of one load (`BENCH_PROJECTS` × 8 packages × 4 tools,
/// default 4,000), on PostgreSQL and SQLite; prints each run and draws the sweep as an SVG
/// (server CPU per snapshot and throughput against batch size) at
/// `target/tmp/bench-batches.svg`, for docs/benchmarks.md.
async fn bench_batches(bin: &PathBuf, dir: &std::path::Path) {
    let n = env_number("BENCH_PROJECTS", 4_000);
    let sizes = env_numbers("BENCH_BATCH_SIZES", "1,8,32,128,512");
    let concurrency = std::env::var("BENCH_CONCURRENCY").unwrap_or_else(|_| "4".into());
    // `PE_BENCH_SQL`: a script run on each PostgreSQL copy, as its owner, before its run (to
    // measure a variant of the schema).
    let variant = std::env::var("PE_BENCH_SQL")
        .ok()
        .map(|path| std::fs::read_to_string(path).unwrap());
    let mut points = Vec::new();
    for dialect in dialects() {
        let base = if dialect == "postgres" {
            pg::clone_db(pg::TEMPLATE, "bench_batches").await
        } else {
            pg::migrated_sqlite(&dir.join("batches.db")).await
        };
        let store = connect(&base).await;
        load(&store, 0, n, 8, 4, 1).await;
        store.close().await;
        // With `PE_FLOOR_SQL`, the in-server floor on a copy of the same load first: the
        // yardstick for the server CPU per snapshot below.
        if dialect == "postgres" && std::env::var_os("PE_FLOOR_SQL").is_some() {
            let url = pg::clone_db("bench_batches", "bench_batch_floor").await;
            let server = ServerCpu::start();
            let (took, _) = floor_run(&url).await;
            if let Some(cpu) = server.used() {
                println!(
                    "[batches/postgres] floor: {:.2}s, server cpu {cpu:.2}s ({:.3} ms a project)",
                    took.as_secs_f64(),
                    cpu * 1000.0 / n as f64
                );
            }
        }
        for &size in &sizes {
            let url = if dialect == "postgres" {
                pg::clone_db("bench_batches", &format!("bench_batch_{size}")).await
            } else {
                let copy = dir.join(format!("batch-{size}.db"));
                std::fs::copy(dir.join("batches.db"), &copy).unwrap();
                let wal = dir.join("batches.db-wal");
                if wal.exists() {
                    std::fs::copy(&wal, dir.join(format!("batch-{size}.db-wal"))).unwrap();
                }
                format!("sqlite://{}", copy.display())
            };
            if let (Some(text), "postgres") = (&variant, dialect) {
                script_at(&url, text).await;
            }
            let server = ServerCpu::start();
            let t = Instant::now();
            let out = Command::new(bin)
                .args([
                    "run",
                    "--json",
                    "--concurrency",
                    &concurrency,
                    "--batch-size",
                    &size.to_string(),
                ])
                .env("DATABASE_URL", &url)
                .env("PACKAGE_EXECUTOR_LOG", "error")
                .envs(exec_env())
                .output()
                .unwrap();
            let wall = t.elapsed().as_secs_f64();
            let server_cpu = if dialect == "postgres" {
                server.used()
            } else {
                None
            };
            let v: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
            let published = v["published"].as_u64().unwrap_or(0);
            let per = server_cpu.map_or(String::new(), |c| {
                format!(
                    ", server cpu {c:.2}s ({:.3} ms a snapshot)",
                    c * 1000.0 / published.max(1) as f64
                )
            });
            println!(
                "[batches/{dialect}] --batch-size {size}: {wall:.2}s, {:.0} projects/s{per}, published {published}",
                published as f64 / wall
            );
            let conf = std::env::var("PE_PG_CONF").unwrap_or_default();
            if dialect == "postgres" && conf.contains("pg_stat_statements") {
                statement_report(&url).await;
            }
            if dialect == "postgres" && conf.contains("track_functions") {
                function_report(&url, published as usize).await;
            }
            points.push(BatchPoint {
                dialect,
                size,
                wall,
                server_cpu,
                published,
            });
        }
    }
    let svg = batch_sweep_svg(&points);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-batches.svg");
    std::fs::write(&path, svg).unwrap();
    println!("[batches] the sweep drawn: {}", path.display());
}

/// Two panels side by side, batch size on a log axis: PostgreSQL's server CPU per snapshot,
/// and throughput on each dialect.
fn batch_sweep_svg(points: &[BatchPoint]) -> String {
    let (w, h, pad) = (360.0, 240.0, 48.0);
    let sizes: Vec<f64> = points.iter().map(|p| (p.size as f64).log2()).collect();
    let (x0, x1) = sizes
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let x_of = |size: usize| {
        let span = (x1 - x0).max(1.0);
        pad + ((size as f64).log2() - x0) / span * (w - 2.0 * pad)
    };
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n",
        2.0 * w
    );
    type Value = Box<dyn Fn(&BatchPoint) -> Option<f64>>;
    let panels: [(&str, Value); 2] = [
        (
            "server CPU per snapshot (ms), PostgreSQL",
            Box::new(|p: &BatchPoint| p.server_cpu.map(|c| c * 1000.0 / p.published.max(1) as f64)),
        ),
        (
            "throughput (projects/s)",
            Box::new(|p: &BatchPoint| Some(p.published as f64 / p.wall)),
        ),
    ];
    for (i, (title, value)) in panels.iter().enumerate() {
        let left = i as f64 * w;
        let top = points
            .iter()
            .filter_map(value)
            .fold(0.0_f64, f64::max)
            .max(f64::MIN_POSITIVE)
            * 1.1;
        let y_of = |v: f64| h - pad - v / top * (h - 2.0 * pad);
        out.push_str(&format!(
            "<text x=\"{}\" y=\"16\">{title}</text>\n<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{}\" y1=\"{pad}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<text x=\"{}\" y=\"{}\">0</text><text x=\"{}\" y=\"{}\">{top:.1}</text>\n",
            left + pad,
            left + pad,
            h - pad,
            left + w - pad,
            h - pad,
            left + pad,
            left + pad,
            h - pad,
            left + 8.0,
            h - pad,
            left + 4.0,
            pad
        ));
        for (dialect, colour) in [("postgres", "#1f77b4"), ("sqlite", "#d62728")] {
            let line: Vec<(f64, f64, usize)> = points
                .iter()
                .filter(|p| p.dialect == dialect)
                .filter_map(|p| value(p).map(|v| (left + x_of(p.size), y_of(v), p.size)))
                .collect();
            if line.is_empty() {
                continue;
            }
            let path: Vec<String> = line
                .iter()
                .map(|(x, y, _)| format!("{x:.1},{y:.1}"))
                .collect();
            out.push_str(&format!(
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>\n",
                path.join(" ")
            ));
            for (x, y, size) in &line {
                out.push_str(&format!(
                    "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{colour}\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{size}</text>\n",
                    h - pad + 14.0
                ));
            }
            if i == 1 {
                let (x, y, _) = line[line.len() - 1];
                out.push_str(&format!(
                    "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{colour}\">{dialect}</text>\n",
                    x - 40.0,
                    y - 6.0
                ));
            }
        }
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{}\">--batch-size (log scale)</text>\n",
            left + w / 2.0 - 50.0,
            h - 8.0
        ));
    }
    out.push_str("</svg>\n");
    out
}
