//! The storage contract on both dialects, the query plans, the roles and trust boundaries,
//! TLS and high availability.

pub(crate) mod contract;
mod plans;
mod trust;

/// Every test in these starts PostgreSQL: the `pg` tier runs what lies in an `on_postgres` module,
/// the `fast` tier the rest.
mod on_postgres {
    mod ha;
    mod roles;
    mod sslmode;
    mod tls;
}
