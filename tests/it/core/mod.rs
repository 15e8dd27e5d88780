//! The pure core: canonical JSON, revisions, the planner; property tests and the fuzz corpus;
//! hostile revisions through a whole run.

mod fuzz_corpus;
mod hostile;
mod jcs_vectors;
mod planner;
mod properties;
