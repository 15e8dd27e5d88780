//! Kubernetes: the recovery Job's spec, the `trigger` command that creates it, and the Event a
//! run records on its own Job. (Named `k8s` so it never shadows the `kube` crate.)

pub mod events;
pub mod job;
pub mod trigger;
