//! The metrics text for node_exporter's textfile collector, written so that no reader ever sees
//! a partial file: a temporary file in the same directory, flushed, then renamed over the target.

use std::io::Write;
use std::path::Path;

/// Writes `text` to `path` atomically (same-directory temporary file, fsync, rename).
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the metrics file path names no file"))?;
    // The collector reads only `*.prom`; a name it skips keeps a half-written file unseen.
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
