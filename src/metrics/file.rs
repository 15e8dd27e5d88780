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

/// How long a write in place waits for a FIFO's reader to take the text.
const IN_PLACE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Writes `text` into `path` as it stands (a device, a FIFO, the termination log, which is
/// truncated first; `O_TRUNC` means nothing to a device or a FIFO), never waiting for ever: a FIFO is opened without blocking, so one that no process reads is an
/// error at once (`ENXIO`) instead of a run that hangs after its work is done, and a reader
/// that stops reading gets 5 s (`IN_PLACE_WAIT`) before the write is given up.
pub fn write_in_place(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => std::io::Error::other(
                "it is a FIFO that no process has open for reading; start its reader first, or \
                 give a regular file",
            ),
            _ => e,
        })?;
    let deadline = std::time::Instant::now() + IN_PLACE_WAIT;
    let mut rest = text.as_bytes();
    while !rest.is_empty() {
        match file.write(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if std::time::Instant::now() >= deadline {
                    return Err(std::io::Error::other(format!(
                        "its reader took no more within {IN_PLACE_WAIT:?}; {} bytes were not written",
                        rest.len()
                    )));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether `path` is written in place: a device or a FIFO (`/dev/null`, a pipe) cannot be
/// replaced and holds no file to keep whole, and the system's own links to one (`/dev/stdout`,
/// `/proc/self/fd/1`, which nobody plants) lead to where the text is meant to go. Any other
/// symlink is replaced, never followed.
fn in_place(path: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    let special =
        |m: &std::fs::Metadata| !m.is_file() && !m.is_dir() && !m.file_type().is_symlink();
    if meta.file_type().is_symlink() {
        let systems = path.starts_with("/dev/") || path.starts_with("/proc/");
        return systems && std::fs::metadata(path).is_ok_and(|m| special(&m));
    }
    special(&meta)
}

/// Writes `text` to `path` atomically (unpredictable same-directory temporary file, fsync,
/// rename). A path that is a device or a FIFO (`/dev/stdout`, `/dev/null`, a pipe) is written
/// in place ([`write_in_place`]): it cannot be replaced and holds no file to keep whole.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    if in_place(path) {
        return write_in_place(path, text);
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
    use std::os::unix::fs::FileTypeExt as _;

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

    /// A FIFO nobody reads is an error at once, not a write that waits for ever; one with a
    /// reader gets the text whole.
    #[test]
    fn a_fifo_without_a_reader_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("m.fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = write_atomically(&fifo, "metric 3\n").unwrap_err();
        assert!(
            e.to_string().contains("no process has open for reading"),
            "{e}"
        );
        // With a reader (opened without blocking, before the write), the text arrives.
        use std::io::Read as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        write_atomically(&fifo, "metric 3\n").unwrap();
        let mut got = String::new();
        reader.read_to_string(&mut got).unwrap();
        assert_eq!(got, "metric 3\n");
        assert!(
            std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_fifo()
        );
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
