//! Every default of the executor's settings, once: the command line's flags, `RunSettings` and
//! the store's `ConnectOptions` all read them from here.
//!
//! A default given as text on the command line (a size or a duration) carries that spelling
//! beside its value, so `--help` shows what an operator would type; the command line's tests
//! parse each spelling back to its value.

use std::time::Duration;

/// A default with the spelling `--help` shows.
#[derive(Clone, Copy, Debug)]
pub struct Spelled<T> {
    /// The value.
    pub value: T,
    /// How the command line spells it.
    pub text: &'static str,
}

/// Revision bytes in flight across a run's workers (`--memory-budget`).
pub const MEMORY_BUDGET: Spelled<u64> = Spelled {
    value: 96 << 20,
    text: "96MiB",
};
/// Pending projects per keyset page (`--page-size`).
pub const PAGE_SIZE: u32 = 256;
/// Projects in flight at once (`--concurrency`).
pub const CONCURRENCY: u32 = 4;
/// Projects a worker builds in one transaction (`--batch-size`): docs/benchmarks.md, "Batches",
/// has the measurement it was chosen by.
pub const BATCH_SIZE: u32 = 32;
/// Attempts per project per pass (`--max-attempts`).
pub const MAX_ATTEMPTS: u32 = 4;
/// Fresh passes over what is still pending after the last page (`--final-probes`).
pub const FINAL_PROBES: u32 = 2;
/// PostgreSQL `statement_timeout` (`--statement-timeout`).
pub const STATEMENT_TIMEOUT: Spelled<Duration> = Spelled {
    value: Duration::from_secs(60),
    text: "60s",
};
/// PostgreSQL `lock_timeout` (`--lock-timeout`).
pub const LOCK_TIMEOUT: Spelled<Duration> = Spelled {
    value: Duration::from_secs(10),
    text: "10s",
};
/// PostgreSQL `idle_in_transaction_session_timeout` (`--idle-in-transaction-timeout`).
pub const IDLE_IN_TRANSACTION_TIMEOUT: Spelled<Duration> = Spelled {
    value: Duration::from_secs(120),
    text: "2m",
};
/// How long past the statement timeout to wait for any answer (`--answer-margin`).
pub const ANSWER_MARGIN: Spelled<Duration> = Spelled {
    value: Duration::from_secs(10),
    text: "10s",
};
/// How long to keep trying to reach the database (`--connect-timeout`).
pub const CONNECT_TIMEOUT: Spelled<Duration> = Spelled {
    value: Duration::from_secs(30),
    text: "30s",
};
/// How long the projects in flight get to finish after SIGTERM, SIGINT or `--deadline` before
/// they are abandoned (`--shutdown-grace`); below the chart's pod termination grace period (30 s).
pub const SHUTDOWN_GRACE: Spelled<Duration> = Spelled {
    value: Duration::from_secs(20),
    text: "20s",
};
/// How long `trigger` may take, API retries included (`trigger --timeout`).
pub const TRIGGER_TIMEOUT: Spelled<Duration> = Spelled {
    value: Duration::from_secs(600),
    text: "10m",
};
/// The database when none is configured (refused inside a Kubernetes pod).
pub const DATABASE_URL: &str = "sqlite://package-executor.db";
/// The `job` grouping key of a metrics push (`--metrics-job`).
pub const METRICS_JOB: &str = "package_executor";
