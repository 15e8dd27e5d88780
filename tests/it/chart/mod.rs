//! The Helm chart: its manifests against the schemas and the API server's rules, its alert rules
//! under promtool, and its metrics through a real Prometheus and Pushgateway.

mod alerts;
mod manifests;

/// Every test in these starts PostgreSQL: the `pg` tier runs what lies in an `on_postgres` module,
/// the `fast` tier the rest.
mod on_postgres {
    /// On the system's server alone: what it checks does not change with the major, so the
    /// PostgreSQL 18 run leaves out what lies in a `system_server` module.
    mod system_server {
        mod prometheus;
    }
}
