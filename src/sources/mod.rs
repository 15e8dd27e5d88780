//! The control-plane side, so the product can be used without another system: the fixture
//! importer (contract section 11), activation and removal (contract section 7). The fixture's
//! format and its rows are the pure core's (`fixture`, `import_rows`); every statement is the
//! store's (`store::control`, `store::import`); this module is the import's pipeline.

mod import;

pub use crate::store::control::{activate, remove};
pub use import::{
    ImportReport, check_reader, import_bytes, import_file, import_reader, open_fixture,
};
pub use package_executor_core::fixture::{
    FIXTURE_SCHEMA, Fixture, FixtureGeneration, FixturePackage, FixtureProject, generation_digest,
    parse_fixture, read_fixture,
};
