//! A database URL, read once: the dialect it names is decided here, and the passwords it (and
//! the environment libpq reads) gives this process are remembered for masking before anything
//! can quote them. The shell resolves one from the flags and passes it down; the store connects
//! by it.

use crate::{Dialect, StoreError};

/// A URL the store can connect by: `postgres://…`, `postgresql://…` or `sqlite:…`.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    text: String,
    dialect: Dialect,
}

impl DatabaseUrl {
    /// Reads `text`: refused, with what to write instead, when it names neither dialect.
    pub fn parse(text: impl Into<String>) -> Result<Self, StoreError> {
        let text = text.into();
        // Before anything can fail and quote it.
        crate::secrets::remember(&text);
        let dialect = Dialect::of_url(&text).ok_or_else(|| {
            StoreError::Config(
                "unsupported database URL: use postgres://… or sqlite://… (a libpq keyword \
                 string such as `host=… dbname=…` is not read; write it as a URL)"
                    .to_owned(),
            )
        })?;
        Ok(Self { text, dialect })
    }

    /// The dialect the URL names.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The URL's text, secrets and all: for the driver, never for a message (see
    /// [`Self::describe`]).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// What may be said of it: its dialect, host, port and database, never a secret.
    pub fn describe(&self) -> String {
        crate::describe(&self.text)
    }
}

impl std::str::FromStr for DatabaseUrl {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self, StoreError> {
        Self::parse(text)
    }
}

/// Never the text: a `Debug` of options or an error must not carry a password.
impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::DatabaseUrl;
    use crate::{Dialect, StoreError};

    #[test]
    fn decides_the_dialect_once_and_never_shows_the_password() {
        let url = DatabaseUrl::parse("postgres://u:s3cret-pw@db:5432/app").unwrap();
        assert_eq!(url.dialect(), Dialect::Postgres);
        assert_eq!(url.as_str(), "postgres://u:s3cret-pw@db:5432/app");
        let shown = format!("{url:?}");
        assert!(
            !shown.contains("s3cret-pw") && shown.contains("db:5432"),
            "{shown}"
        );
        let lite: DatabaseUrl = "sqlite://x.db".parse().unwrap();
        assert_eq!(lite.dialect(), Dialect::Sqlite);
        for bad in ["host=db dbname=app", "mysql://db/app", ""] {
            assert!(
                matches!(DatabaseUrl::parse(bad), Err(StoreError::Config(_))),
                "{bad}"
            );
        }
    }
}
