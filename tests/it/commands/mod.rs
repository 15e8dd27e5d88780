//! The binary's commands end to end.

mod cli;
mod metrics;
mod run;
mod secrets;
mod trigger;
mod verify;
