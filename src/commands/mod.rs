//! The commands of contract section 10, each returning its exit code. `main` only parses, sets up
//! logging and maps errors to exit codes.

/// `println!` that fails the command instead of panicking when standard output cannot be
/// written (a closed pipe, a full disk): the command then exits 1, saying so.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::commands::write_stdout(format_args!($($arg)*))?
    };
}

/// `eprintln!` that never panics: a line to standard error, above the progress bar, whose failed
/// write (a closed pipe, a full disk) is ignored. Standard error carries logs and hints; a stream
/// that went away must never end the work or change its exit code (contract, section 10).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::commands::write_stderr(format_args!($($arg)*))
    };
}

mod import;
mod inspect;
mod meter;
mod outputs;
mod progress;
mod run;
mod terminal;
mod tools;
mod trigger;

pub use terminal::LogWriter;

use anyhow::Context as _;

use crate::cli::{Cli, Command, SourcesCommand};
use crate::exit::Exit;
use crate::sources;
use crate::store::{ConnectOptions, DatabaseUrl, SqliteUse, Store, StoreError};

/// Standard output could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to standard output ({0}); the command's result was not delivered")]
pub struct StdoutError(#[source] std::io::Error);

/// One line to standard output, or why it could not be written.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) -> Result<(), StdoutError> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(StdoutError)
}

/// One line to standard error, whatever became of it: nothing is told of a failed write (there
/// is nowhere left to tell it), and nothing panics, so a closed pipe never aborts a command.
pub fn write_stderr(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    terminal::above_bar(|| {
        let mut err = std::io::stderr().lock();
        let _ = err
            .write_fmt(args)
            .and_then(|()| err.write_all(b"\n"))
            .and_then(|()| err.flush());
    });
}

/// Runs a parsed command line; returns the process exit code.
pub async fn execute(cli: Cli) -> anyhow::Result<Exit> {
    match &cli.command {
        Command::Canonicalize { file, digest } => tools::canonicalize(file.as_deref(), *digest),
        Command::Identity(cmd) => tools::identity(cmd),
        Command::Trigger(args) => trigger::trigger(args).await,
        Command::Migrate { check: true, .. } => {
            let store = connect_migrated(&database(&cli)?, 1).await?;
            let version = store.migrations().last().map_or(0, |m| m.version);
            outln!(
                "the schema is version {version}, this build's ({}): it can run here",
                store.dialect()
            );
            Ok(Exit::Ok)
        }
        Command::Migrate { create_roles, .. } => {
            let store = connect(&database(&cli)?, 2).await?;
            let report = store
                .migrate(*create_roles, None)
                .await
                .context("migrate")?;
            for role in &report.created_roles {
                outln!("created role {role}");
            }
            if report.applied.is_empty() {
                outln!("schema is up to date ({})", store.dialect());
            }
            for m in &report.applied {
                outln!("applied {m}");
            }
            Ok(Exit::Ok)
        }
        Command::Run(args) => run::run(&cli, args).await,
        Command::Demo => run::demo(&cli).await,
        Command::Publish {
            project,
            json,
            max_attempts,
            memory_budget,
        } => run::publish(&cli, project, *json, *max_attempts, *memory_budget).await,
        Command::Current {
            project,
            json,
            known_digest,
        } => inspect::current(&cli, project, *json, known_digest.as_ref()).await,
        Command::Explain { project } => inspect::explain(&cli, project).await,
        Command::Verify { project, json } => inspect::verify(&cli, project.as_deref(), *json).await,
        Command::Sources(cmd) => {
            let store = connect_migrated(&database(&cli)?, 2).await?;
            match cmd {
                SourcesCommand::Import { file, dry_run } => {
                    let report = import::import(&cli, &store, file, *dry_run).await?;
                    let file = match file.to_str() {
                        Some("-") => "standard input".to_owned(),
                        _ => file.display().to_string(),
                    };
                    if *dry_run {
                        outln!(
                            "checked {} projects from {file}: an import would insert {} rows; nothing was written",
                            report.projects,
                            report.inserted
                        );
                    } else {
                        outln!(
                            "imported {} projects from {file} ({} rows inserted)",
                            report.projects,
                            report.inserted
                        );
                    }
                }
                SourcesCommand::Activate {
                    installation,
                    generation,
                } => {
                    sources::activate(&store, installation, *generation).await?;
                    outln!(
                        "activated generation {generation} of {}",
                        crate::quote::shown(installation)
                    );
                }
                SourcesCommand::Remove { project, package } => {
                    sources::remove(&store, project, package).await?;
                    outln!(
                        "removed {} from {}",
                        crate::quote::shown(package),
                        crate::quote::shown(project)
                    );
                }
            }
            Ok(Exit::Ok)
        }
    }
}

/// The database the global flags name, and the sessions they ask for: resolved here, once per
/// command, and passed down (the URL read and its dialect decided once). The local SQLite
/// default is refused inside a Kubernetes pod.
pub fn database(cli: &Cli) -> Result<ConnectOptions, StoreError> {
    let url = match &cli.database_url {
        Some(url) if !url.is_empty() => url.clone(),
        _ if crate::cli::in_kubernetes() => {
            return Err(StoreError::Unavailable(
                "DATABASE_URL is not set inside a Kubernetes pod, and the local SQLite default \
                 is refused there; mount the database Secret as DATABASE_URL"
                    .into(),
            ));
        }
        _ => crate::defaults::DATABASE_URL.to_owned(),
    };
    Ok(ConnectOptions {
        statement_timeout: cli.statement_timeout,
        lock_timeout: cli.lock_timeout,
        idle_in_transaction_timeout: cli.idle_in_transaction_timeout,
        acquire_timeout: cli.connect_timeout,
        answer_margin: cli.answer_margin,
        ..ConnectOptions::new(DatabaseUrl::parse(url)?)
    })
}

/// Connects to `db` (a SQLite file is created or set up if missing).
pub async fn connect(db: &ConnectOptions, max_connections: u32) -> anyhow::Result<Store> {
    connect_for(db, max_connections, SqliteUse::Create).await
}

/// Connects to `db`; a SQLite file is created or set up only with [`SqliteUse::Create`]
/// (`migrate`, `demo`).
async fn connect_for(
    db: &ConnectOptions,
    max_connections: u32,
    sqlite_use: SqliteUse,
) -> anyhow::Result<Store> {
    let opts = ConnectOptions {
        max_connections,
        sqlite_use,
        ..db.clone()
    };
    let store = Store::connect(&opts)
        .await
        .with_context(|| format!("connecting to {}", db.url.describe()))?;
    Ok(store)
}

/// Connects to `db` and checks the schema is migrated (exit 8 otherwise).
pub async fn connect_migrated(db: &ConnectOptions, max_connections: u32) -> anyhow::Result<Store> {
    // A file that is not already ours is refused before it is opened for writing.
    let store = connect_for(db, max_connections, SqliteUse::Existing).await?;
    store.check_migrated().await?;
    Ok(store)
}

/// The exit code for an error that ended a command.
pub fn exit_for(e: &anyhow::Error) -> Exit {
    match e.downcast_ref::<StoreError>() {
        Some(s) if s.is_unavailable() || s.is_transient() => Exit::Database,
        _ => Exit::Error,
    }
}
