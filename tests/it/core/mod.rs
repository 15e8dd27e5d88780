//! The pure core: canonical JSON, revisions, the planner; property tests and the fuzz corpus;
//! hostile revisions and the heaviest source rows through a whole run.

mod fuzz_corpus;
mod heavy_sources;
mod hostile;
mod jcs_vectors;
mod planner;
mod properties;
