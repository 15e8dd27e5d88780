//! The end-to-end tier: a real Kubernetes (kind, on a node image `scripts/kind.sh` builds from
//! Kubernetes' own Go modules, or any cluster `KUBECONFIG` names) running what this repository
//! ships.
//!
//! `scripts/test.sh kind` starts the cluster, runs these tests inside its namespaces with
//! `--ignored` (a plain `cargo test` has no cluster) and takes the cluster down. Each test works
//! in a namespace of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chart;
mod network;
mod publishers;
mod renders;
mod rules;
mod smoke;
mod upgrade;
