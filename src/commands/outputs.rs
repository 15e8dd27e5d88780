//! The files a run writes besides its database (`--summary-file`, `--metrics-file`), kept off
//! the database: a path that names the SQLite file the run uses, or one of the files SQLite
//! keeps beside it (`-wal`, `-shm`, `-journal`), through any spelling, directory link, symlink or
//! hard link, is refused before the run takes work (a usage error, exit 2), and checked again
//! just before it is written. An output written there would replace the database with a few
//! hundred bytes of JSON (contract, section 10).

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::store::{COMPANION_SUFFIXES, sqlite_file_of};

/// An output path that would overwrite the database.
#[derive(Debug, thiserror::Error)]
#[error(
    "{flag} {} would overwrite {what} ({}); give a path outside the database's files",
    .path.display(), .target.display()
)]
pub(crate) struct OntoDatabase {
    flag: &'static str,
    path: PathBuf,
    what: &'static str,
    target: PathBuf,
}

/// The database's files, as every name that reaches them resolves.
#[derive(Debug, Default)]
pub(crate) struct Protected {
    /// Each file with what it is: the database itself, or a companion.
    files: Vec<(PathBuf, &'static str)>,
}

/// `dir/name` with `dir` resolved (every link and `..` in it), the final name kept as it is:
/// the path a rename onto `path` replaces.
fn resolved_parent(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(dir).ok()?.join(name))
}

/// Every name under which `path` may stand: its parent resolved, and the file itself resolved
/// when it exists (a symlink's target).
fn spellings(path: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = resolved_parent(path).into_iter().collect();
    if let Ok(p) = std::fs::canonicalize(path)
        && !out.contains(&p)
    {
        out.push(p);
    }
    out
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

impl Protected {
    /// The files of the database `url` names; none for PostgreSQL.
    pub(crate) fn of(url: Option<&str>) -> Self {
        let Some(db) = url.and_then(sqlite_file_of) else {
            return Self::default();
        };
        let mut files = Vec::new();
        for base in spellings(&db) {
            files.push((base.clone(), "the run's SQLite database"));
            for suffix in COMPANION_SUFFIXES {
                files.push((
                    with_suffix(&base, suffix),
                    "a file SQLite keeps beside the run's database",
                ));
            }
        }
        Self { files }
    }

    /// Refuses `path` for `flag` when it reaches one of the database's files: by name (after
    /// links) or, for one that exists, by being the same file (a hard link).
    pub(crate) fn check(&self, flag: &'static str, path: &Path) -> Result<(), OntoDatabase> {
        let refuse = |what, target: &Path| OntoDatabase {
            flag,
            path: path.to_path_buf(),
            what,
            target: target.to_path_buf(),
        };
        let names = spellings(path);
        let inode = std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
        for (file, what) in &self.files {
            if names.contains(file) {
                return Err(refuse(what, file));
            }
            if let Some(id) = inode
                && std::fs::metadata(file).is_ok_and(|m| (m.dev(), m.ino()) == id)
            {
                return Err(refuse(what, file));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_of_the_database_and_its_companions_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("pe.db");
        std::fs::write(&db, "db").unwrap();
        std::fs::write(dir.path().join("pe.db-wal"), "wal").unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::os::unix::fs::symlink(dir.path(), dir.path().join("again")).unwrap();
        std::os::unix::fs::symlink(&db, dir.path().join("link.db")).unwrap();
        std::fs::hard_link(&db, dir.path().join("hard.db")).unwrap();
        let url = format!("sqlite://{}", db.display());
        let protected = Protected::of(Some(&url));
        for bad in [
            db.clone(),
            dir.path().join("pe.db-wal"),
            dir.path().join("pe.db-shm"),
            dir.path().join("pe.db-journal"),
            sub.join("../pe.db"),
            dir.path().join("again/pe.db"),
            dir.path().join("again/pe.db-shm"),
            dir.path().join("link.db"),
            dir.path().join("hard.db"),
        ] {
            let e = protected.check("--summary-file", &bad).unwrap_err();
            assert!(e.to_string().contains("--summary-file"), "{e}");
        }
        for fine in [
            dir.path().join("summary.json"),
            dir.path().join("pe.db.json"),
            sub.join("pe.db"),
        ] {
            protected.check("--metrics-file", &fine).unwrap();
        }
        // PostgreSQL has no file here to keep.
        Protected::of(Some("postgres://u@db/app"))
            .check("--summary-file", &db)
            .unwrap();
    }

    /// The database named through a link in its URL is protected under its real name too.
    #[test]
    fn a_database_reached_through_a_link_is_protected_by_both_names() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("pe.db"), "db").unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("alias")).unwrap();
        let url = format!("sqlite://{}/alias/pe.db", dir.path().display());
        let protected = Protected::of(Some(&url));
        protected
            .check("--metrics-file", &real.join("pe.db-wal"))
            .unwrap_err();
        protected
            .check("--metrics-file", &dir.path().join("alias/pe.db"))
            .unwrap_err();
    }
}
