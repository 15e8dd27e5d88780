//! What the fault tests (the storm, the Patroni scenarios) share: a seedable generator, so a
//! failing schedule can be replayed, and the consumer's staleness check.

use std::collections::BTreeSet;
use std::time::Duration;

use sqlx::{Connection, PgConnection, Row};

/// SplitMix64: a small, seedable generator, so a failing schedule can be replayed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from))
    }
}

/// A replica's pass under faults: short timeouts, so that a pass caught by a fault ends soon
/// and the next one begins (a Job's retry, compressed).
pub const PASS: [&str; 12] = [
    "run",
    "--json",
    "--concurrency",
    "2",
    "--max-attempts",
    "2",
    "--final-probes",
    "0",
    "--statement-timeout",
    "3s",
    "--deadline",
    "20s",
];

/// Replica `k`'s `--batch-size`: every other replica builds one project a transaction and the
/// rest take the default batch, so every fault meets both sizes and replicas of different
/// sizes must converge on the same digests.
pub fn batch_size(k: usize) -> String {
    if k % 2 == 1 {
        "1".to_owned()
    } else {
        package_executor::defaults::BATCH_SIZE.to_string()
    }
}

/// The seed from `var` (a replay), else one from the clock.
pub fn seed(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

/// Connects and runs [`consumer_check_on`]; `None` when the server cannot be reached.
pub async fn consumer_check(url: &str, project: &str, seed: u64) -> Option<bool> {
    let mut conn = PgConnection::connect(url).await.ok()?;
    consumer_check_on(&mut conn, project, seed).await
}

/// In one database snapshot: the current snapshot the consumer gets, and the live active heads.
/// A returned snapshot whose vector differs from the live heads is stale, and fails the test
/// (naming the seed). `Some(true)`: a current snapshot; `Some(false)`: none (not current);
/// `None`: the database did not answer.
pub async fn consumer_check_on(conn: &mut PgConnection, project: &str, seed: u64) -> Option<bool> {
    sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *conn)
        .await
        .ok()?;
    let current = sqlx::query(
        "SELECT convert_from(canonical_json, 'UTF8') FROM ql3.current_tool_snapshot($1)",
    )
    .bind(project)
    .fetch_optional(&mut *conn)
    .await
    .ok()?;
    let live = sqlx::query(
        "SELECT i.package_name, i.installation_id, g.generation, g.generation_digest, g.lock_digest, g.revision_digest
         FROM ql3.package_installations i
         JOIN ql3.package_generations g ON g.installation_id = i.installation_id AND g.generation = i.active_generation
         WHERE i.project_id = $1 AND g.status = 'active'",
    )
    .bind(project)
    .fetch_all(&mut *conn)
    .await
    .ok()?;
    let _ = sqlx::query("COMMIT").execute(&mut *conn).await;
    let Some(row) = current else {
        return Some(false);
    };
    let doc: serde_json::Value = serde_json::from_str(&row.get::<String, _>(0)).unwrap();
    let served: BTreeSet<String> = doc["activeVector"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{} {} {} {} {} {}",
                p["packageName"].as_str().unwrap(),
                p["installationId"].as_str().unwrap(),
                p["generation"],
                p["generationDigest"].as_str().unwrap(),
                p["lockDigest"].as_str().unwrap(),
                p["revisionDigest"].as_str().unwrap()
            )
        })
        .collect();
    let heads: BTreeSet<String> = live
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {} {} {}",
                r.get::<String, _>(0),
                r.get::<String, _>(1),
                r.get::<i64, _>(2),
                r.get::<String, _>(3),
                r.get::<String, _>(4),
                r.get::<String, _>(5)
            )
        })
        .collect();
    assert_eq!(
        served, heads,
        "seed {seed}: the consumer got a stale snapshot of {project}"
    );
    Some(true)
}

/// Runs a command (`ip`, `nft`, …) that must succeed; its stderr is the failure's message.
pub fn sh(args: &[&str]) {
    let out = std::process::Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// SIGKILL to a process; one that already exited is fine ("No such process" is not news).
pub fn kill(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status();
}
