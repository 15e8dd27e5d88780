//! The binary's commands end to end.

mod batches;
mod cli;
mod hostile_user;
mod metrics;
mod mid_run;
mod newer_schema;
mod not_ours;
mod run;
mod signals;
mod terminal;
mod trigger;
mod verify;

/// Every test in these starts PostgreSQL: the `pg` tier runs what lies in an `on_postgres` module,
/// the `fast` tier the rest.
mod on_postgres {
    mod hostile_user;
    mod secrets;
}
