//! The Helm chart: its manifests against the schemas and the API server's rules, its alert rules
//! under promtool, and its metrics through a real Prometheus and Pushgateway.

mod alerts;
mod manifests;

/// Every test in these starts PostgreSQL: the `pg` tier runs what lies in an `on_postgres` module,
/// the `fast` tier the rest.
mod on_postgres {
    mod prometheus;
}
