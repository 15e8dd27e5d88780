//! The metrics text for node_exporter's textfile collector, written so that no reader ever sees
//! a partial file: a temporary file in the same directory, flushed, then renamed over the target.
//!
//! The collector's directory is often shared and writable by others, so the temporary file has
//! a name nobody can predict and is created exclusively (`O_EXCL`: a symlink planted at its path
//! makes the creation fail and is retried under another name, it is never followed), and the
//! rename replaces whatever stands at the target, a symlink included, rather than writing
//! through it.

use std::io::Write;
use std::path::Path;

/// What the collector needs: readable by its user, writable by ours alone.
#[cfg(unix)]
const MODE: u32 = 0o644;

/// Writes `text` to `path` atomically (unpredictable same-directory temporary file, fsync,
/// rename). A path that is a device or a FIFO (`/dev/stdout`, `/dev/null`, a pipe) is written
/// in place: it cannot be replaced and holds no file to keep whole.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && !meta.is_file()
        && !meta.is_dir()
        && !meta.file_type().is_symlink()
    {
        return std::fs::OpenOptions::new()
            .write(true)
            .open(path)?
            .write_all(text.as_bytes());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the path names no file"))?;
    // The collector reads only `*.prom`; a name it skips keeps a half-written file unseen.
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.to_string_lossy()))
        .suffix(".tmp")
        .tempfile_in(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(MODE))?;
    }
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    // On failure the temporary file is removed when `tmp` (or the error holding it) drops.
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::write_atomically;

    #[test]
    #[cfg(unix)]
    fn a_symlink_at_the_target_is_replaced_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "precious").unwrap();
        let target = dir.path().join("package_executor.prom");
        std::os::unix::fs::symlink(&elsewhere, &target).unwrap();
        write_atomically(&target, "metric 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "precious");
        let meta = std::fs::symlink_metadata(&target).unwrap();
        assert!(meta.file_type().is_file(), "the link itself was replaced");
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "metric 1\n");
        // Nothing else is left in the directory.
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["elsewhere", "package_executor.prom"]);
    }

    #[test]
    #[cfg(unix)]
    fn symlinks_at_every_predictable_temporary_path_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "precious").unwrap();
        let target = dir.path().join("m.prom");
        // The names an older build used, and ones like them: none is written through.
        for n in [
            format!(".m.prom.{}.tmp", std::process::id()),
            ".m.prom.tmp".to_owned(),
            "m.prom.tmp".to_owned(),
        ] {
            std::os::unix::fs::symlink(&elsewhere, dir.path().join(n)).unwrap();
        }
        write_atomically(&target, "metric 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "metric 2\n");
    }
}
