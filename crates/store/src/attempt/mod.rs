//! One attempt: one connection, one READ COMMITTED transaction. Every query the coordinator and
//! the commands make runs through here, so both dialects share one text per query.

use sqlx::{Postgres, Sqlite, Transaction};

use super::{Dialect, StoreError};

mod batch;
mod open;
mod reads;
mod revisions;
mod write;

pub use batch::{Finished, Finishing, Write};
pub use open::{ClaimState, Opening};
pub use reads::Scope;
pub use revisions::RevisionBytes;
pub use write::{Appending, Replay};

/// An open transaction on one connection.
#[derive(Debug)]
pub enum Attempt<'c> {
    /// PostgreSQL.
    Pg(Transaction<'c, Postgres>),
    /// SQLite.
    Lite(Transaction<'c, Sqlite>),
}

/// Runs `$body` with `$c` bound to the connection and `$d` to the dialect, for either arm, so
/// one query text and one row mapping serve both dialects; with a third name, `$db` is also
/// the arm's sqlx database type, so one query builder serves both. Written like a closure
/// (`on_conn!(a, |c, d| { … })`) so that rustfmt formats the body; it is not one: the body is
/// compiled once per arm, against that arm's connection type.
macro_rules! on_conn {
    ($self:ident, |$c:ident, $d:ident| $body:expr) => {
        $crate::attempt::on_conn!($self, |$c, $d, _Db| $body)
    };
    ($self:ident, |$c:ident, $d:ident, $db:ident| $body:expr) => {
        match $self {
            Attempt::Pg(tx) => {
                #[allow(dead_code)]
                type $db = sqlx::Postgres;
                let $c = &mut **tx;
                let $d = $crate::Dialect::Postgres;
                $body
            }
            Attempt::Lite(tx) => {
                #[allow(dead_code)]
                type $db = sqlx::Sqlite;
                let $c = &mut **tx;
                let $d = $crate::Dialect::Sqlite;
                $body
            }
        }
    };
}

pub(crate) use on_conn;

impl Attempt<'_> {
    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        match self {
            Attempt::Pg(_) => Dialect::Postgres,
            Attempt::Lite(_) => Dialect::Sqlite,
        }
    }

    /// Commits.
    pub async fn commit(self) -> Result<(), StoreError> {
        match self {
            Attempt::Pg(tx) => tx.commit().await?,
            Attempt::Lite(tx) => tx.commit().await?,
        }
        Ok(())
    }

    /// Rolls back.
    pub async fn rollback(self) -> Result<(), StoreError> {
        match self {
            Attempt::Pg(tx) => tx.rollback().await?,
            Attempt::Lite(tx) => tx.rollback().await?,
        }
        Ok(())
    }

    /// Runs one statement of fixed text, without parameters or rows (`SAVEPOINT`, `SET`).
    pub async fn execute_text(&mut self, text: &'static str) -> Result<(), StoreError> {
        on_conn!(self, |c, _d| {
            sqlx::query(text).execute(c).await?;
            Ok(())
        })
    }
}
