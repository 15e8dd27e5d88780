//! The storage contract on both dialects, the query plans, the roles and trust boundaries,
//! TLS and high availability.

mod contract;
mod ha;
mod plans;
mod roles;
mod tls;
mod trust;
