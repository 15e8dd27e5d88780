//! The `package-executor` binary: parse, set up logging, run, map errors to exit codes.

use std::io::IsTerminal;

use clap::Parser as _;
use package_executor::cli::{Cli, LogFormat};
use package_executor::commands;
use package_executor::exit::Exit;

fn init_logging(format: LogFormat) {
    let json = match format {
        LogFormat::Json => true,
        LogFormat::Text => false,
        LogFormat::Auto => !std::io::stderr().is_terminal(),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("PACKAGE_EXECUTOR_LOG")
        // sqlx's URL parser logs an unknown parameter with its value; a value may be a secret.
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("info,sqlx=warn,sqlx_postgres::options=error")
        });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(commands::LogWriter);
    if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init();
    } else {
        // Colours only on a terminal (and not under NO_COLOR): text logs redirected to a
        // file or a pipe stay plain.
        let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        builder.with_target(false).with_ansi(colour).init();
    }
}

// The system allocator, on purpose: mimalloc saves executor CPU on a cold run (whose wall
// time is the database's) but keeps freed slice buffers committed, which the memory bound
// cannot afford. Most of what it saved, glibc's own per-thread cache gives back when it may
// hold more blocks: the container image sets `GLIBC_TUNABLES=glibc.malloc.tcache_count=128`
// (Dockerfile). The figures: docs/benchmarks.md.

/// The size from which glibc maps a block of its own and unmaps it when freed.
const MMAP_THRESHOLD: i32 = 1 << 20;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD`], unless the environment sets one.
///
/// glibc starts at 128 KiB but raises the threshold to the size of each mapped block freed (up
/// to 32 MiB), so after the first 8 MiB snapshot document is freed, the next ones come from the
/// arenas of the threads that build them and stay there when freed, fragmented: runs of
/// near-limit snapshots went over the memory bound the flags state (docs/benchmarks.md, "The
/// worst mix for memory"). Blocks this large are
/// revision bytes, slices and snapshot documents, a few per project at most: mapping each costs
/// nothing a run can see. Setting it also stops glibc from raising its trim threshold the same
/// way, so the main arena gives freed memory back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn fix_mmap_threshold() {
    let set_outside = std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
        || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("mmap_threshold"));
    if !set_outside {
        // SAFETY: `mallopt` only changes the allocator's parameters, under its own lock; it is
        // called first thing in `main`, before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn fix_mmap_threshold() {}

/// The command line, or the process ends as clap would end it (help and version on stdout,
/// exit 0; usage errors on stderr, exit 2), with two differences: what clap prints is redacted
/// first, since a usage error quotes the argument it refused and that may be a database URL
/// given without its flag (`package-executor postgres://u:PW@db/app run`), and a failed write
/// never panics.
fn parse() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use std::io::Write as _;
            let text = package_executor::store::redact_text(&e.render().to_string());
            let code = e.exit_code();
            if e.use_stderr() {
                let mut err = std::io::stderr().lock();
                let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
            } else {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
            }
            std::process::exit(code);
        }
    }
}

fn main() {
    fix_mmap_threshold();
    // A panic anywhere ends the process with exit code 1, after saying where (a write that
    // fails here is ignored: a second panic inside the hook would abort, exit 134).
    std::panic::set_hook(Box::new(|info| {
        commands::write_stderr(format_args!(
            "package-executor panicked: {info}; this is a bug, please report it"
        ));
        std::process::exit(Exit::Error.code());
    }));
    let cli = parse();
    init_logging(cli.log_format);
    // One async thread: the work is round trips to the database, and a single thread does them
    // with fewer wakeups than a work-stealing pool (the run's lanes add threads where it pays;
    // see coordinator::lanes). Parsing a large revision goes to the blocking pool.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            commands::write_stderr(format_args!("error: cannot start the async runtime: {e}"));
            std::process::exit(Exit::Error.code());
        }
    };
    let code = match runtime.block_on(commands::execute(cli)) {
        Ok(code) => code,
        Err(e) => {
            commands::write_stderr(format_args!(
                "error: {}",
                package_executor::store::redact_text(&format!("{e:#}"))
            ));
            commands::exit_for(&e)
        }
    };
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    std::process::exit(code.code());
}
