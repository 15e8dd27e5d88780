//! One project of a batch inside the batch's transaction (contract section 9): each project's
//! steps run after a savepoint of its own, so that what one project does not keep (a drift,
//! a claim held elsewhere, an outcome that writes nothing) is undone without touching the
//! others, and the batch commits once. The savepoint's name is the same for every project:
//! they follow one another, never nest.

use super::*;
use crate::StoreError;

/// The savepoint statements, the same in both dialects.
const SAVEPOINT: &str = "SAVEPOINT pe_project";
const RELEASE: &str = "RELEASE SAVEPOINT pe_project";
const ROLLBACK_TO: &str = "ROLLBACK TO SAVEPOINT pe_project";

impl Attempt<'_> {
    async fn run_plain(&mut self, text: &'static str) -> Result<(), StoreError> {
        on_conn!(self, |c, _d| {
            sqlx::query(text).execute(c).await?;
            Ok(())
        })
    }

    /// Marks where the next project of a batch begins.
    pub async fn begin_project(&mut self) -> Result<(), StoreError> {
        self.run_plain(SAVEPOINT).await
    }

    /// Keeps what the project since [`Attempt::begin_project`] wrote (its claim included),
    /// for the batch's commit.
    pub async fn keep_project(&mut self) -> Result<(), StoreError> {
        self.run_plain(RELEASE).await
    }

    /// Undoes what the project since [`Attempt::begin_project`] did: its writes, and on
    /// PostgreSQL the claim it took (a row lock taken after a savepoint is released when the
    /// transaction rolls back to it).
    pub async fn undo_project(&mut self) -> Result<(), StoreError> {
        self.run_plain(ROLLBACK_TO).await?;
        self.run_plain(RELEASE).await
    }
}
