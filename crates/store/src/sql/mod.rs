//! Query texts, written once with `ql3.`-qualified names: a [`Statement`] where both dialects
//! run it (rendered for each at compile time, see `dialect.rs`), a plain text where one alone
//! does (`_PG`, and SQLite's own spellings). One file per family; every text is re-exported
//! here, so a caller names `sql::OPEN_PG` wherever it lives.

use crate::dialect::Statement;
use crate::statement;

// The files that define macros come first: a macro is visible only after its definition.
#[macro_use]
mod heads;
#[macro_use]
mod proof;
#[macro_use]
pub(crate) mod named;
mod attempt;
mod control;
mod pending;
mod revisions;
mod snapshots;

pub use attempt::*;
pub use control::*;
pub use heads::*;
pub use pending::*;
pub use proof::*;
pub use revisions::*;
pub use snapshots::*;
