//! The command line (contract section 10): clap definitions, every flag also readable from the
//! environment as `PACKAGE_EXECUTOR_<FLAG>`, then validation into resolved settings.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::defaults;
use crate::model::Digest;

/// Builds canonical tool definition snapshots for projects whose active packages changed.
#[derive(Debug, Parser)]
#[command(name = "package-executor", version, about, long_about = None)]
pub struct Cli {
    /// Database URL: postgres://… (cluster) or sqlite://FILE (edge, local).
    /// Defaults to sqlite://package-executor.db outside Kubernetes. PostgreSQL URLs take
    /// libpq's sslmode, sslrootcert, sslcert and sslkey (or PGSSLMODE, PGSSLROOTCERT,
    /// PGSSLCERT, PGSSLKEY); use sslmode=verify-full in production.
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Log format on stderr: text on a terminal and JSON otherwise when `auto`.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "auto",
        env = "PACKAGE_EXECUTOR_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    /// PostgreSQL statement_timeout for this executor's sessions.
    #[arg(long, global = true, default_value = defaults::STATEMENT_TIMEOUT.text, value_parser = |s: &str| within(s, bounds::STATEMENT_TIMEOUT), env = "PACKAGE_EXECUTOR_STATEMENT_TIMEOUT")]
    pub statement_timeout: Duration,
    /// PostgreSQL lock_timeout for this executor's sessions.
    #[arg(long, global = true, default_value = defaults::LOCK_TIMEOUT.text, value_parser = |s: &str| within(s, bounds::LOCK_TIMEOUT), env = "PACKAGE_EXECUTOR_LOCK_TIMEOUT")]
    pub lock_timeout: Duration,
    /// PostgreSQL idle_in_transaction_session_timeout for this executor's sessions.
    #[arg(long, global = true, default_value = defaults::IDLE_IN_TRANSACTION_TIMEOUT.text, value_parser = |s: &str| within(s, bounds::IDLE_IN_TRANSACTION_TIMEOUT), env = "PACKAGE_EXECUTOR_IDLE_IN_TRANSACTION_TIMEOUT")]
    pub idle_in_transaction_timeout: Duration,
    /// How long past --statement-timeout to wait for any answer from PostgreSQL before giving
    /// the connection up as gone (a silent network cut, a node lost without a TCP reset). A
    /// live server answers or cancels every statement by the statement timeout; this covers
    /// the network. Lower it to notice a silently lost primary sooner.
    #[arg(long, global = true, default_value = defaults::ANSWER_MARGIN.text, value_parser = |s: &str| within(s, bounds::ANSWER_MARGIN), env = "PACKAGE_EXECUTOR_ANSWER_MARGIN")]
    pub answer_margin: Duration,
    /// How long to keep trying to reach the database before giving up (exit 8).
    #[arg(long, global = true, default_value = defaults::CONNECT_TIMEOUT.text, value_parser = |s: &str| within(s, bounds::CONNECT_TIMEOUT), env = "PACKAGE_EXECUTOR_CONNECT_TIMEOUT")]
    pub connect_timeout: Duration,
    /// How long the projects in flight get to finish after SIGTERM, SIGINT or --deadline
    /// before they are abandoned (left pending, their transactions rolled back) and the run
    /// prints its summary; keep it below the pod's termination grace period. A second signal
    /// ends the run at once.
    #[arg(long, global = true, default_value = defaults::SHUTDOWN_GRACE.text, value_parser = |s: &str| within(s, bounds::SHUTDOWN_GRACE), env = "PACKAGE_EXECUTOR_SHUTDOWN_GRACE")]
    pub shutdown_grace: Duration,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Text on a terminal, JSON otherwise.
    Auto,
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the migrations for the URL's dialect (PostgreSQL: schema, grants).
    Migrate {
        /// Create missing ql3_* roles (needs CREATEROLE).
        #[arg(long, env = "PACKAGE_EXECUTOR_CREATE_ROLES")]
        create_roles: bool,
        /// Change nothing: exit 0 when this build can run on the database's schema (its
        /// version is this build's), 8 when it is older (not migrated) or newer (migrated by a
        /// newer release). Any login may ask; the chart runs it before a rollback.
        #[arg(long, conflicts_with = "create_roles", env = "PACKAGE_EXECUTOR_CHECK")]
        check: bool,
    },
    /// Build and publish a snapshot for every pending project of this shard.
    Run(RunArgs),
    /// Build and publish one project now.
    Publish {
        /// The project id.
        project: String,
        /// Print the result as one JSON line.
        #[arg(long, env = "PACKAGE_EXECUTOR_JSON")]
        json: bool,
        /// Attempts before giving up.
        #[arg(long, default_value_t = defaults::MAX_ATTEMPTS, env = "PACKAGE_EXECUTOR_MAX_ATTEMPTS")]
        max_attempts: u32,
        /// Revision bytes in flight (B, KiB, MiB, GiB).
        #[arg(long, default_value = defaults::MEMORY_BUDGET.text, value_parser = parse_bytes, env = "PACKAGE_EXECUTOR_MEMORY_BUDGET")]
        memory_budget: u64,
    },
    /// Print the current snapshot of a project (exit 4 when there is none).
    Current {
        /// The project id.
        project: String,
        /// Print `{"snapshotDigest","committedAt","snapshot"}` as one JSON line.
        #[arg(long, env = "PACKAGE_EXECUTOR_JSON")]
        json: bool,
        /// The snapshot digest of the copy you hold: when it is still current, say so and
        /// leave the document out (the database never reads it).
        #[arg(long, value_name = "DIGEST", value_parser = parse_digest, env = "PACKAGE_EXECUTOR_KNOWN_DIGEST")]
        known_digest: Option<Digest>,
    },
    /// Why a project is or is not current.
    Explain {
        /// The project id.
        project: String,
    },
    /// Recompute every stored snapshot's digests and compare its source rows with its document.
    Verify {
        /// Only this project.
        #[arg(long, env = "PACKAGE_EXECUTOR_PROJECT")]
        project: Option<String>,
        /// Print `{"schema","checked","problems"}` as one JSON line.
        #[arg(long, env = "PACKAGE_EXECUTOR_JSON")]
        json: bool,
    },
    /// Control-plane tools: load fixtures, activate generations, remove packages.
    #[command(subcommand)]
    Sources(SourcesCommand),
    /// Migrate, import the bundled example, run, and show what happened.
    Demo,
    /// Print the RFC 8785 form of a JSON document (stdin without FILE), or its digest.
    Canonicalize {
        /// The JSON file; stdin when absent.
        file: Option<PathBuf>,
        /// Print `sha256:…` of the canonical bytes instead.
        #[arg(long, env = "PACKAGE_EXECUTOR_DIGEST")]
        digest: bool,
    },
    /// Canonical tool identities.
    #[command(subcommand)]
    Identity(IdentityCommand),
    /// Create the recovery Job in Kubernetes (attach if it exists), optionally wait for it.
    Trigger(TriggerArgs),
}

/// `trigger` flags. A template is required (`--from-cronjob` or `--job-template`): the chart
/// is the one definition of the recovery Job, and there are no built-in defaults.
#[derive(Debug, Args)]
#[command(group(
    clap::ArgGroup::new("template")
        .required(true)
        .multiple(false)
        .args(["from_cronjob", "job_template"])
))]
pub struct TriggerArgs {
    /// The publication that makes recovery necessary (names the Job).
    #[arg(long, env = "PACKAGE_EXECUTOR_PUBLICATION_ID")]
    pub publication_id: String,
    /// Namespace (default: the kubeconfig's or the pod's).
    #[arg(long, env = "PACKAGE_EXECUTOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// The suspended CronJob whose `jobTemplate` the Job is made from, as `kubectl create job
    /// --from=cronjob/NAME` does (the chart installs `<release>-package-executor-recovery`).
    #[arg(
        long,
        env = "PACKAGE_EXECUTOR_FROM_CRONJOB",
        conflicts_with_all = ["job_template", "dry_run"]
    )]
    pub from_cronjob: Option<String>,
    /// A batch/v1 Job, or a CronJob (its `jobTemplate`), in YAML, whose spec is used as given.
    #[arg(long, env = "PACKAGE_EXECUTOR_JOB_TEMPLATE")]
    pub job_template: Option<PathBuf>,
    /// Delete and re-create an existing Job that has failed.
    #[arg(long, env = "PACKAGE_EXECUTOR_REPLACE_FAILED")]
    pub replace_failed: bool,
    /// Watch until the Job completes (0) or fails (7).
    #[arg(long, env = "PACKAGE_EXECUTOR_WAIT")]
    pub wait: bool,
    /// Bounds the whole command, API retries included (exit 124).
    #[arg(long, default_value = defaults::TRIGGER_TIMEOUT.text, value_parser = |s: &str| within(s, bounds::TRIGGER_TIMEOUT), env = "PACKAGE_EXECUTOR_TIMEOUT")]
    pub timeout: Duration,
    /// Print the Job as YAML and contact nothing.
    #[arg(long, env = "PACKAGE_EXECUTOR_DRY_RUN")]
    pub dry_run: bool,
}

/// `sources …`.
#[derive(Debug, Subcommand)]
pub enum SourcesCommand {
    /// Load a fixture file (all or nothing, idempotent).
    Import {
        /// The fixture file; `-` reads standard input.
        file: PathBuf,
        /// Check the file against the database, every constraint and stored row included,
        /// then roll back: nothing is written.
        #[arg(long, env = "PACKAGE_EXECUTOR_DRY_RUN")]
        dry_run: bool,
    },
    /// Activate a generation in one transaction.
    Activate {
        /// Installation id.
        #[arg(long, env = "PACKAGE_EXECUTOR_INSTALLATION")]
        installation: String,
        /// Generation number.
        #[arg(long, env = "PACKAGE_EXECUTOR_GENERATION")]
        generation: i64,
    },
    /// Remove a package from a project.
    Remove {
        /// Project id.
        #[arg(long, env = "PACKAGE_EXECUTOR_PROJECT")]
        project: String,
        /// Package name.
        #[arg(long, env = "PACKAGE_EXECUTOR_PACKAGE")]
        package: String,
    },
}

/// `identity …`.
#[derive(Debug, Subcommand)]
pub enum IdentityCommand {
    /// Print the canonical string of an identity.
    Encode {
        /// Source (`package`, `builtin`, `mcp`, …).
        #[arg(long, env = "PACKAGE_EXECUTOR_SOURCE")]
        source: String,
        /// Origin (package, server or plugin).
        #[arg(long, env = "PACKAGE_EXECUTOR_ORIGIN")]
        origin: String,
        /// Local tool name.
        #[arg(long, env = "PACKAGE_EXECUTOR_NAME")]
        name: String,
    },
    /// Decode a canonical string into `{"source","origin","name"}`.
    Decode {
        /// The canonical string.
        string: String,
    },
}

/// `run` flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Pending projects per keyset page.
    #[arg(long, default_value_t = defaults::PAGE_SIZE, value_parser = clap::value_parser!(u32).range(1..), env = "PACKAGE_EXECUTOR_PAGE_SIZE")]
    pub page_size: u32,
    /// Projects in flight at once (the pool holds one more connection).
    #[arg(long, default_value_t = defaults::CONCURRENCY, value_parser = clap::value_parser!(u32).range(1..=256), env = "PACKAGE_EXECUTOR_CONCURRENCY")]
    pub concurrency: u32,
    /// Projects a worker builds in one transaction, each keeping its own outcome (1: one
    /// project a transaction).
    #[arg(long, default_value_t = defaults::BATCH_SIZE, value_parser = clap::value_parser!(u32).range(1..=512), env = "PACKAGE_EXECUTOR_BATCH_SIZE")]
    pub batch_size: u32,
    /// Attempts per project per pass, with jittered exponential backoff.
    #[arg(long, default_value_t = defaults::MAX_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..), env = "PACKAGE_EXECUTOR_MAX_ATTEMPTS")]
    pub max_attempts: u32,
    /// Fresh passes over what is still pending after the last page.
    #[arg(long, default_value_t = defaults::FINAL_PROBES, env = "PACKAGE_EXECUTOR_FINAL_PROBES")]
    pub final_probes: u32,
    /// Revision bytes in flight across all workers (B, KiB, MiB, GiB).
    #[arg(long, default_value = defaults::MEMORY_BUDGET.text, value_parser = parse_bytes, env = "PACKAGE_EXECUTOR_MEMORY_BUDGET")]
    pub memory_budget: u64,
    /// This replica's shard (default: JOB_COMPLETION_INDEX, else 0).
    #[arg(long, env = "PACKAGE_EXECUTOR_SHARD_INDEX")]
    pub shard_index: Option<u64>,
    /// Number of shards (default: PACKAGE_EXECUTOR_SHARD_COUNT, else 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), env = "PACKAGE_EXECUTOR_SHARD_COUNT")]
    pub shard_count: Option<u64>,
    /// Stop taking work after this long (e.g. 25m) and write the summary.
    #[arg(long, value_parser = |s: &str| within(s, bounds::DEADLINE), env = "PACKAGE_EXECUTOR_DEADLINE")]
    pub deadline: Option<Duration>,
    /// Print the run summary as one JSON line on stdout.
    #[arg(long, env = "PACKAGE_EXECUTOR_JSON")]
    pub json: bool,
    /// Also write the summary here (default: /dev/termination-log when writable).
    #[arg(long, env = "PACKAGE_EXECUTOR_SUMMARY_FILE")]
    pub summary_file: Option<PathBuf>,
    /// The Job this run belongs to, for the Event recorded on it (the chart sets it from the
    /// downward API).
    #[arg(long, hide = true, env = "PACKAGE_EXECUTOR_JOB_NAME")]
    pub job_name: Option<String>,
    /// The namespace of this run's pod and Job (the chart sets it from the downward API).
    #[arg(long, hide = true, env = "PACKAGE_EXECUTOR_POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// Exit 6 when any project was rejected.
    #[arg(long, env = "PACKAGE_EXECUTOR_FAIL_ON_REJECTED")]
    pub fail_on_rejected: bool,
    /// Prove every project instead of reading the pending index: the periodic backstop that
    /// finds a project whose mark was lost.
    #[arg(long, env = "PACKAGE_EXECUTOR_FULL_SCAN")]
    pub full_scan: bool,
    /// Push the run's metrics to this Prometheus Pushgateway
    /// (POST URL/metrics/job/JOB/instance/INSTANCE/kind/KIND/shard/I). A user part
    /// (http://user:password@host) is sent as basic authentication and never printed.
    #[arg(
        long,
        env = "PACKAGE_EXECUTOR_METRICS_PUSH_URL",
        hide_env_values = true
    )]
    pub metrics_push_url: Option<String>,
    /// The `job` grouping key of the push.
    #[arg(
        long,
        default_value = defaults::METRICS_JOB,
        env = "PACKAGE_EXECUTOR_METRICS_JOB"
    )]
    pub metrics_job: String,
    /// The `instance` grouping key of the push: which release in which namespace (the chart
    /// sets `<release>.<namespace>`), so that two releases never overwrite each other's group.
    #[arg(long, default_value = "", env = "PACKAGE_EXECUTOR_METRICS_INSTANCE")]
    pub metrics_instance: String,
    /// Also write the metrics here, atomically (node_exporter's textfile collector).
    #[arg(long, env = "PACKAGE_EXECUTOR_METRICS_FILE")]
    pub metrics_file: Option<PathBuf>,
}

/// A snapshot digest as the contract spells it (`sha256:` and 64 lowercase hex digits).
pub fn parse_digest(s: &str) -> Result<Digest, String> {
    Digest::parse(s).map_err(|_| {
        format!(
            "`{s}` is not a snapshot digest: expected sha256: and 64 lowercase hex digits, as \
             `current --json` prints in snapshotDigest"
        )
    })
}

/// Parses a humantime duration (`90s`, `10m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (use e.g. 90s, 10m, 1h)"))
}

/// The smallest and largest value of each duration flag (contract section 10). Below a
/// minimum PostgreSQL would read the value as "no timeout" (it is sent in whole milliseconds,
/// and 0 means off) or the flag would mean nothing; above a maximum no wait is meant, and the
/// sums the executor makes (a statement timeout plus the answer margin, a deadline plus its
/// grace) stay far from overflowing.
pub mod bounds {
    use std::time::Duration;

    /// An inclusive range of durations.
    pub type Bounds = (Duration, Duration);

    const MS: Duration = Duration::from_millis(1);
    const HOUR: Duration = Duration::from_secs(3600);
    const DAY: Duration = Duration::from_secs(24 * 3600);

    /// `--statement-timeout`.
    pub const STATEMENT_TIMEOUT: Bounds = (MS, DAY);
    /// `--lock-timeout`.
    pub const LOCK_TIMEOUT: Bounds = (MS, DAY);
    /// `--idle-in-transaction-timeout`.
    pub const IDLE_IN_TRANSACTION_TIMEOUT: Bounds = (MS, DAY);
    /// `--answer-margin`.
    pub const ANSWER_MARGIN: Bounds = (Duration::ZERO, HOUR);
    /// `--connect-timeout`.
    pub const CONNECT_TIMEOUT: Bounds = (Duration::from_millis(100), HOUR);
    /// `--shutdown-grace`: 0 abandons what is in flight at once.
    pub const SHUTDOWN_GRACE: Bounds = (Duration::ZERO, HOUR);
    /// `run --deadline`: 0 stops taking work at once.
    pub const DEADLINE: Bounds = (Duration::ZERO, Duration::from_secs(7 * 24 * 3600));
    /// `trigger --timeout`.
    pub const TRIGGER_TIMEOUT: Bounds = (Duration::from_secs(1), DAY);
}

/// Parses a duration within `bounds`: a usage error (exit 2) outside them, saying the range.
pub fn within(s: &str, (min, max): bounds::Bounds) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < min || d > max {
        return Err(format!(
            "{s} is outside {} to {} (inclusive)",
            humantime::format_duration(min),
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

/// Parses a byte size: an integer with an optional `KiB`, `MiB` or `GiB`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, ""),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a byte size (use e.g. 96MiB)"))?;
    let mult = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => return Err(format!("unknown unit {other:?}: use B, KiB, MiB or GiB")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Whether this process runs inside a Kubernetes pod.
pub fn in_kubernetes() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// Resolves the shard from flags, then `JOB_COMPLETION_INDEX`, else 0 of 1.
pub fn resolve_shard(index: Option<u64>, count: Option<u64>) -> Result<(u64, u64), String> {
    let index = match index {
        Some(i) => i,
        None => match std::env::var("JOB_COMPLETION_INDEX") {
            Ok(v) => v
                .parse()
                .map_err(|_| format!("JOB_COMPLETION_INDEX={v:?} is not a number"))?,
            Err(_) => 0,
        },
    };
    let count = count.unwrap_or(1);
    if count == 0 || index >= count {
        return Err(format!(
            "shard index {index} is not below shard count {count}"
        ));
    }
    Ok((index, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flag of every command can come from the environment, as `PACKAGE_EXECUTOR_<FLAG>`
    /// (the database URL as `DATABASE_URL`), so that a Job's env sets any of them.
    #[test]
    fn every_flag_reads_its_environment_variable() {
        use clap::CommandFactory as _;
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if matches!(long, "help" | "version") {
                    continue;
                }
                let want = match long {
                    "database-url" => "DATABASE_URL".to_owned(),
                    _ => format!("PACKAGE_EXECUTOR_{}", long.to_uppercase().replace('-', "_")),
                };
                if arg.get_env().and_then(|e| e.to_str()) != Some(want.as_str()) {
                    missing.push(format!("{path} --{long}: expected env {want}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "package-executor", &mut missing);
        assert!(missing.is_empty(), "{missing:#?}");
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("96MiB"), Ok(96 << 20));
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("2 GiB"), Ok(2 << 30));
        assert!(parse_bytes("1MB").is_err());
        assert!(parse_bytes("x").is_err());
    }

    /// The spelling `--help` shows for each default is the default's value.
    #[test]
    fn default_spellings_parse_to_their_values() {
        assert_eq!(
            parse_bytes(defaults::MEMORY_BUDGET.text),
            Ok(defaults::MEMORY_BUDGET.value)
        );
        for d in [
            defaults::STATEMENT_TIMEOUT,
            defaults::LOCK_TIMEOUT,
            defaults::IDLE_IN_TRANSACTION_TIMEOUT,
            defaults::ANSWER_MARGIN,
            defaults::CONNECT_TIMEOUT,
            defaults::SHUTDOWN_GRACE,
            defaults::TRIGGER_TIMEOUT,
        ] {
            assert_eq!(parse_duration(d.text), Ok(d.value), "{}", d.text);
        }
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
