//! The Helm chart: its manifests against the schemas and the API server's rules, its alert rules
//! under promtool, and its metrics through a real Prometheus and Pushgateway.

mod alerts;
mod manifests;
mod prometheus;
