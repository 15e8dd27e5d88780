//! The binary's commands end to end.

mod cli;
mod metrics;
mod newer_schema;
mod not_ours;
mod run;
mod secrets;
mod signals;
mod terminal;
mod trigger;
mod verify;
