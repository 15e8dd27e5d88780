//! `run`, `publish` and `demo`: the coordinator on the command line.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::progress::{LogProgress, Progress, progress_wanted};

use crate::cli::{Cli, RunArgs, resolve_shard};
use crate::coordinator::{Coordinator, LogObserver, RunReport, RunSettings, Stop};
use crate::exit::Exit;
use crate::model::Digest;
use crate::report::{PublishResult, RunSummary, Shard};
use crate::sources;
use crate::store::Dialect;

use super::outputs::Protected;
use super::{connect, connect_migrated};

fn settings(args: &RunArgs, shard: Shard) -> RunSettings {
    RunSettings {
        page_size: args.page_size,
        concurrency: args.concurrency as usize,
        batch_size: args.batch_size as usize,
        max_attempts: args.max_attempts,
        final_probes: args.final_probes,
        memory_budget: args.memory_budget,
        shard,
        deadline: args.deadline,
        fail_on_rejected: args.fail_on_rejected,
        full_scan: args.full_scan,
        ..RunSettings::default()
    }
}

async fn run_coordinator(
    cli: &Cli,
    settings: RunSettings,
    store: crate::store::Store,
    stop: Stop,
) -> RunReport {
    let abandoned = stop.clone();
    tracing::info!(
        shard_index = settings.shard.index,
        shard_count = settings.shard.count,
        concurrency = settings.concurrency,
        full_scan = settings.full_scan,
        "run started"
    );
    let report = if progress_wanted(cli) {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        let shown = super::terminal::show(&bar);
        let progress = Progress {
            bar: bar.clone(),
            counts: Mutex::new(RunSummary::new(settings.shard)),
        };
        let report = Coordinator::new(store.clone(), settings, stop, &progress)
            .run()
            .await;
        drop(shown);
        bar.finish_and_clear();
        report
    } else {
        let observer = std::sync::Arc::new(LogProgress::default());
        let ticker = LogProgress::tick(observer.clone());
        let report = Coordinator::new(store.clone(), settings, stop, &*observer)
            .run()
            .await;
        ticker.abort();
        report
    };
    // An abandoned run leaves its connections to the exit (their transactions roll back when
    // they close): a close waits for answers from a database that may have stopped answering.
    if !abandoned.is_abandoned() {
        store.close().await;
    }
    report
}

fn summary_path(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    let default = Path::new(TERMINATION_LOG);
    let writable = std::fs::OpenOptions::new()
        .append(true)
        .open(default)
        .is_ok();
    writable.then(|| default.to_path_buf())
}

/// Writes the summary file: the termination log in place (the kubelet's file, which must not
/// be replaced), any other path as the metrics file is written, so a symlink planted at it is
/// replaced, never followed, and the file is 0644 whatever the umask.
fn write_summary(path: &Path, line: &str) -> std::io::Result<()> {
    if path == Path::new(TERMINATION_LOG) {
        let meta = std::fs::symlink_metadata(path)?;
        if meta.file_type().is_symlink() {
            return Err(std::io::Error::other(
                "the termination log is a symlink; not following it",
            ));
        }
        return crate::metrics::file::write_in_place(path, line);
    }
    crate::metrics::file::write_atomically(path, line)
}

/// Kubernetes' default `terminationMessagePath`.
const TERMINATION_LOG: &str = "/dev/termination-log";

fn print_human(summary: &RunSummary) -> Result<(), super::StdoutError> {
    outln!(
        "run finished in {} ms (shard {}/{}): {} projects, {} published, {} replayed, {} already current, {} claimed elsewhere",
        summary.elapsed_ms,
        summary.shard.index,
        summary.shard.count,
        summary.projects_scanned,
        summary.published,
        summary.replayed,
        summary.already_current,
        summary.claimed_elsewhere
    );
    if !summary.rejected.is_empty() {
        outln!(
            "  rejected: {} (see `package-executor explain PROJECT`)",
            summary.rejected
        );
    }
    if !summary.unresolved.is_empty() {
        outln!(
            "  unresolved: {} (the next run retries them)",
            summary.unresolved
        );
    }
    if summary.vanished > 0 {
        outln!(
            "  vanished: {} (deleted while the run built them; nothing was stored for them)",
            summary.vanished
        );
    }
    if !summary.integrity.is_empty() {
        outln!(
            "  INTEGRITY: {} (run `package-executor verify`)",
            summary.integrity
        );
    }
    outln!("  exit code {}", summary.exit_code);
    Ok(())
}

/// The pool a run's store opens: each worker keeps a connection and the pages need one more,
/// and on PostgreSQL the workers of the other lanes bring pools of their own.
fn run_pool_size(dialect: Dialect, concurrency: usize) -> u32 {
    crate::coordinator::pool_size(dialect, concurrency)
}

/// `settings` with no more workers than the server has connections free for (PostgreSQL;
/// `coordinator::slots`), saying so when it caps them.
async fn within_the_servers_slots(
    store: &crate::store::Store,
    mut settings: RunSettings,
) -> RunSettings {
    match store.connection_slots().await {
        Ok(Some(slots)) => {
            let capped = crate::coordinator::slots::cap(settings.concurrency, &slots);
            if let Some(why) = capped.why {
                tracing::warn!(
                    requested = settings.concurrency,
                    workers = capped.workers,
                    max_connections = slots.max_connections,
                    in_use = slots.in_use,
                    "{why}"
                );
            }
            settings.concurrency = capped.workers;
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(
            error = %e,
            "cannot read the server's connection slots; running --concurrency workers as asked"
        ),
    }
    settings
}

/// `run`.
pub(super) async fn run(cli: &Cli, args: &RunArgs) -> anyhow::Result<Exit> {
    let (index, count) = match resolve_shard(args.shard_index, args.shard_count) {
        Ok(shard) => shard,
        // A usage error (exit 2), as clap's own are: the Job's settings must change.
        Err(e) => {
            errln!(
                "error: {e}; set --shard-index below --shard-count (an Indexed Job sets JOB_COMPLETION_INDEX)"
            );
            return Ok(Exit::Usage);
        }
    };
    let shard = Shard { index, count };
    // The output files never replace the database (or its -wal, -shm and -journal files): a
    // usage error before the run takes work, and checked again when each is written.
    let database = super::database(cli);
    let protected = Protected::of(database.as_ref().ok().map(|db| db.url.as_str()));
    let outputs = [
        ("--summary-file", args.summary_file.as_deref()),
        ("--metrics-file", args.metrics_file.as_deref()),
    ];
    for (flag, path) in outputs {
        if let Some(path) = path
            && let Err(e) = protected.check(flag, path)
        {
            errln!("error: {e}");
            return Ok(Exit::Usage);
        }
    }
    let started = std::time::Instant::now();
    // A URL that cannot be used is the run's error, reported in its summary below.
    let pool = database.as_ref().map_or(0, |db| {
        run_pool_size(db.url.dialect(), args.concurrency as usize)
    });
    let settings = settings(args, shard);
    // Signals are watched from the start, not once connected: in a container the executor is
    // PID 1, which the kernel gives no default action for SIGTERM, so a stop that came while
    // it connected would be lost, and the run would take work after the pod was told to end.
    let stop = Stop::default();
    stop.arm(settings.deadline, cli.shutdown_grace);
    let delivering = stop.clone();
    // Only a signal cuts the connection short: a deadline that passes meanwhile (even
    // `--deadline 0`) lets the run connect, take no work, and say whether anything is pending.
    let connected = tokio::select! {
        connected = async { connect_migrated(&database?, pool).await } => Some(connected),
        () = stop.signalled() => None,
    };
    let summary = match connected {
        None => {
            tracing::warn!(
                "stopped before the run took any work: whatever is pending stays pending for the next run"
            );
            let mut s = RunSummary::new(shard);
            s.elapsed_ms = started.elapsed().as_millis() as u64;
            s.exit_code = Exit::Unresolved;
            s
        }
        Some(Ok(store)) => {
            let settings = within_the_servers_slots(&store, settings).await;
            let report = run_coordinator(cli, settings, store, stop).await;
            report.summary
        }
        Some(Err(e)) => {
            // Still write a truthful summary: nothing was done, the database is unavailable.
            tracing::error!(error = %format!("{e:#}"), "cannot start the run");
            errln!("error: {}", crate::store::redact_text(&format!("{e:#}")));
            let mut s = RunSummary::new(shard);
            s.elapsed_ms = started.elapsed().as_millis() as u64;
            s.exit_code = super::exit_for(&e);
            s
        }
    };
    let mut summary = summary;
    // The result on standard output first: a failure to deliver it is an error (exit 1 where
    // the run itself succeeded; a run's own failure code stands), and the summary file and the
    // metrics written after it say so.
    let printed = if args.json {
        super::write_stdout(format_args!("{}", summary.to_json()))
    } else {
        print_human(&summary)
    };
    if let Err(e) = &printed {
        tracing::error!(error = %e, "the run's result could not be written to standard output");
        errln!("error: {e}");
        if summary.exit_code == Exit::Ok {
            summary.exit_code = Exit::Error;
        }
    }
    // The work is over and its code decided: a signal from here on ends only the delivery.
    delivering.finish(summary.exit_code);
    // Then the termination message: it must be written even if the pod is stopped while the
    // metrics are still being pushed.
    let line = summary.to_json();
    if let Some(path) = summary_path(args.summary_file.as_deref()) {
        let written = protected
            .check("--summary-file", &path)
            .map_err(std::io::Error::other)
            .and_then(|()| write_summary(&path, &line));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the summary file");
        }
    }
    let metrics_file = match &args.metrics_file {
        Some(path) => match protected.check("--metrics-file", path) {
            Ok(()) => Some(path.clone()),
            Err(e) => {
                tracing::warn!(error = %e, "the metrics file is not written");
                None
            }
        },
        None => None,
    };
    let sinks = crate::metrics::Sinks {
        push_url: args.metrics_push_url.clone(),
        job: args.metrics_job.clone(),
        instance: args.metrics_instance.clone(),
        kind: if args.full_scan { "sweep" } else { "recovery" },
        file: metrics_file,
    };
    // Metrics never change the outcome: a failed push or write is a warning, here and below.
    let metric_warnings = sinks.deliver(&summary).await;
    for w in &metric_warnings {
        tracing::warn!(warning = %w, "metrics not delivered; the run's exit code is unchanged");
    }
    if !args.json && printed.is_ok() {
        for w in &metric_warnings {
            // Already logged; a failure to print it changes nothing.
            let _ = super::write_stdout(format_args!(
                "  warning: {} (the exit code is the run's own)",
                crate::store::redact_text(w)
            ));
        }
    }
    tracing::info!(summary = %line, exit_code = summary.exit_code.code(), "run summary");
    if crate::cli::in_kubernetes()
        && let (Some(job), Some(ns)) = (&args.job_name, &args.pod_namespace)
    {
        crate::k8s::events::record_on_job(ns, job, summary.exit_code != Exit::Ok, &line).await;
    }
    Ok(summary.exit_code)
}

/// `publish PROJECT`.
pub(super) async fn publish(
    cli: &Cli,
    project: &str,
    json: bool,
    max_attempts: u32,
    memory_budget: u64,
) -> anyhow::Result<Exit> {
    let store = connect_migrated(&super::database(cli)?, 2).await?;
    let settings = RunSettings {
        max_attempts,
        memory_budget,
        ..RunSettings::default()
    };
    let stop = Stop::default();
    stop.arm(None, cli.shutdown_grace);
    let observer = LogObserver;
    let coordinator = Coordinator::new(store.clone(), settings, stop.clone(), &observer);
    let outcome = coordinator.publish(project).await?;
    // As in a run: an abandoned attempt's connection is left to the exit.
    if !stop.is_abandoned() {
        store.close().await;
    }
    if json {
        outln!(
            "{}",
            serde_json::to_string(&PublishResult::new(project, &outcome))?
        );
    } else {
        match outcome.snapshot_digest() {
            Some(d) => outln!("{}: {} {d}", crate::quote::shown(project), outcome.name()),
            None => outln!(
                "{}: {} {}: {}",
                crate::quote::shown(project),
                outcome.name(),
                outcome.reason().unwrap_or(""),
                outcome.detail().unwrap_or("")
            ),
        }
    }
    // As a run decides it: the database stopped answering (or a newer release migrated it)
    // while the attempts went on, which no retry of this command heals.
    let code = if coordinator.halted().is_some() {
        // No retry heals it: the grants or the database file must change.
        Exit::Error
    } else if coordinator.database_down() {
        Exit::Database
    } else {
        outcome.publish_exit()
    };
    Ok(code)
}

/// The example fixture bundled into the binary.
pub(super) const DEMO_FIXTURE: &[u8] = include_bytes!("../../examples/demo-fixture.json");

/// `demo`.
pub(super) async fn demo(cli: &Cli) -> anyhow::Result<Exit> {
    let settings = RunSettings::default();
    let db = super::database(cli)?;
    let store = connect(&db, run_pool_size(db.url.dialect(), settings.concurrency)).await?;
    let migrated = store.migrate(false, None).await?;
    outln!(
        "1. migrated the {} database ({} migrations applied now)",
        store.dialect(),
        migrated.applied.len()
    );
    let imported = sources::import_reader(&store, DEMO_FIXTURE).await?;
    outln!(
        "2. imported the example fixture: {} projects ({} new rows)",
        imported.projects,
        imported.inserted
    );
    let stop = Stop::default();
    stop.arm(settings.deadline, cli.shutdown_grace);
    let report = run_coordinator(cli, settings, store, stop).await;
    outln!("3. ran the executor in {} ms:\n", report.summary.elapsed_ms);
    outln!(
        "   {:<16} {:<16} {:<20} SNAPSHOT",
        "PROJECT",
        "OUTCOME",
        "REASON"
    );
    for (project, o) in &report.outcomes {
        outln!(
            "   {:<16} {:<16} {:<20} {}",
            project,
            o.name(),
            o.reason().unwrap_or("-"),
            o.snapshot_digest().map(Digest::short).unwrap_or("-")
        );
    }
    for (project, o) in &report.outcomes {
        if let Some(detail) = o.detail() {
            outln!("\n   {project}: {detail}");
        }
    }
    outln!("\n4. the current snapshot of demo-1 (`package-executor current demo-1`):\n");
    super::inspect::current(cli, "demo-1", false, None).await?;
    outln!(
        "\nTry: package-executor explain demo-rejected | package-executor current demo-1 --json"
    );
    Ok(Exit::Ok)
}
