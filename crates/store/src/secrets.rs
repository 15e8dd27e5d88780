//! The database passwords this process was given, known from what was parsed rather than
//! guessed from text: the password of the database URL's user part and of its `password`
//! parameters (as the URL parser reads them, and as typed), `PGPASSWORD`, and the passwords of
//! the password file libpq and sqlx read (`PGPASSFILE`, else `~/.pgpass`). Each is kept in every
//! spelling an output could carry it in: as typed, percent-encoded, decoded, escaped as a JSON
//! string or as Rust's `Debug` escapes it. [`crate::redact_text`] masks every one of them
//! wherever it stands, before its guesses at URL shapes.
//!
//! And [`describe`], what the program says of a database URL: its dialect, host, port,
//! database and user, built from the parsed URL, never the URL's text.

use std::sync::RwLock;

/// Spellings of secrets, longest first (so a longer one is masked whole before a shorter one
/// inside it).
static KNOWN: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// What a user part encodes: every byte but letters, digits and `-._~`.
const USER_PART: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Shorter secrets are not masked by value: masking every `abc` in every line would hide
/// more than it protects (such a password is masked only where it stands in a URL shape).
const SHORTEST: usize = 4;

/// Remembers every password `url` and the environment give this process.
pub(crate) fn remember(url: &str) {
    let mut found = Vec::new();
    from_url(url, &mut found);
    if let Some(p) = std::env::var_os("PGPASSWORD") {
        found.push(p.to_string_lossy().into_owned());
    }
    from_passfile(&mut found);
    let mut spellings: Vec<String> = found.iter().flat_map(|s| spellings_of(s)).collect();
    let mut known = KNOWN.write().unwrap_or_else(|p| p.into_inner());
    spellings.retain(|s| s.chars().count() >= SHORTEST && !known.contains(s));
    known.extend(spellings);
    known.sort_by_key(|s| std::cmp::Reverse(s.len()));
    known.dedup();
}

/// Calls `f` with each spelling remembered so far, under the lock: no copy per log line.
pub(crate) fn each_known(mut f: impl FnMut(&str)) {
    for s in KNOWN.read().unwrap_or_else(|p| p.into_inner()).iter() {
        f(s);
    }
}

/// The passwords of a URL: the user part's and every `password` parameter's, as parsed and as
/// typed. A URL that does not parse still gives what stands between the user's `:` and the
/// last `@`, since a parser that failed on it may still quote it.
fn from_url(url: &str, out: &mut Vec<String>) {
    if let Ok(parsed) = url::Url::parse(url) {
        if let Some(p) = parsed.password() {
            out.push(p.to_owned());
        }
        for (name, value) in parsed.query_pairs() {
            if crate::conninfo::parameter_name(&name).ends_with("password") {
                out.push(value.into_owned());
            }
        }
    }
    // As typed: after `scheme://user:` (or `scheme:user:`) up to the last `@`.
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    if let Some(at) = rest.rfind('@')
        && let Some(colon) = rest[..at].find(':')
    {
        out.push(rest[colon + 1..at].to_owned());
    }
    // As typed in a query: `password=` up to the next `&` (or the end).
    for piece in url.split(['?', '&']) {
        if let Some((name, value)) = piece.split_once('=')
            && crate::conninfo::parameter_name(name).ends_with("password")
        {
            out.push(value.to_owned());
        }
    }
}

/// The password fields of the password file (`host:port:db:user:password`, `\` escapes).
fn from_passfile(out: &mut Vec<String>) {
    let path = match std::env::var_os("PGPASSFILE") {
        Some(p) => std::path::PathBuf::from(p),
        None => match std::env::var_os("HOME") {
            Some(home) => std::path::Path::new(&home).join(".pgpass"),
            None => return,
        },
    };
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        // The fifth field, after four unescaped colons.
        let mut colons = 0;
        let mut escaped = false;
        for (i, c) in line.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                ':' => {
                    colons += 1;
                    if colons == 4 {
                        let raw = &line[i + 1..];
                        out.push(raw.to_owned());
                        out.push(raw.replace("\\:", ":").replace("\\\\", "\\"));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
}

/// A secret as it may be written out: itself, decoded and encoded as in a URL, as a JSON
/// string's content, as Rust's `Debug` writes it, and each of its lines (a log line cut at a
/// line break carries part of it).
fn spellings_of(secret: &str) -> Vec<String> {
    let decoded = url::form_urlencoded::parse(format!("x={secret}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    // `%XX` decoded with a `+` left a `+`, as in a user part.
    let raw_decoded = percent_encoding::percent_decode_str(secret)
        .decode_utf8_lossy()
        .into_owned();
    let mut out = Vec::new();
    for s in [secret.to_owned(), decoded, raw_decoded] {
        let json = serde_json::to_string(&s).unwrap_or_default();
        let debug = format!("{s:?}");
        let encoded: String = url::form_urlencoded::byte_serialize(s.as_bytes()).collect();
        let path_encoded = percent_encoding::utf8_percent_encode(&s, USER_PART).to_string();
        out.extend(s.lines().map(str::to_owned));
        out.push(json.trim_matches('"').to_owned());
        out.push(debug.trim_matches('"').to_owned());
        out.push(encoded);
        out.push(path_encoded);
        out.push(s);
    }
    out.retain(|s| !s.is_empty());
    out
}

/// What may be said of a database URL: `PostgreSQL at HOST:PORT, database DB, user USER` (each
/// host of a multi-host URL), or `the SQLite file PATH`, built from the parsed URL. A URL that
/// does not parse is described as such, without its text.
pub(crate) fn describe(url: &str) -> String {
    match crate::Dialect::of_url(url) {
        Some(crate::Dialect::Sqlite) => {
            format!("the SQLite file {}", crate::sqlite_file::path_in(url).0)
        }
        Some(crate::Dialect::Postgres) => match crate::conninfo::split_hosts(url, |_| None) {
            Ok(hosts) => {
                let mut parts = Vec::new();
                for u in &hosts.urls {
                    match url::Url::parse(u) {
                        Ok(p) => parts.push(format!(
                            "{}:{}",
                            p.host_str().unwrap_or("localhost"),
                            p.port().unwrap_or(5432)
                        )),
                        Err(_) => parts.push("(a host that does not parse)".to_owned()),
                    }
                }
                let first = hosts.urls.first().and_then(|u| url::Url::parse(u).ok());
                let database = first
                    .as_ref()
                    .map(|p| p.path().trim_start_matches('/').to_owned())
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| "(the user's)".to_owned());
                let user = first
                    .as_ref()
                    .map(|p| p.username().to_owned())
                    .filter(|u| !u.is_empty())
                    .unwrap_or_else(|| "(the OS user's)".to_owned());
                format!(
                    "PostgreSQL at {}, database {database}, user {user}",
                    parts.join(", ")
                )
            }
            Err(_) => "PostgreSQL (DATABASE_URL does not parse as a URL)".to_owned(),
        },
        None => "a database URL that is neither postgres:// nor sqlite:".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_parsed_password_is_known() {
        remember("postgres://u:Kq7m%20Zp4w%22x@h:5433/db?sslmode=disable&password=Wv9r%26Tt1");
        let mut known = Vec::new();
        each_known(|s| known.push(s.to_owned()));
        for s in [
            "Kq7m Zp4w\"x",
            "Kq7m%20Zp4w%22x",
            "Kq7m Zp4w\\\"x",
            "Wv9r&Tt1",
            "Wv9r%26Tt1",
        ] {
            assert!(known.iter().any(|k| k == s), "{s} not known: {known:?}");
        }
    }

    #[test]
    fn a_description_names_no_password() {
        let d = describe("postgres://pe:Secr3t XYZ@127.0.0.1:1/app");
        assert!(!d.contains("Secr3t") && !d.contains("XYZ"), "{d}");
        let d = describe("postgres://pe:Sekr1tpw@db.example:6432/app?sslmode=require");
        assert_eq!(d, "PostgreSQL at db.example:6432, database app, user pe");
        assert_eq!(describe("sqlite://x.db?mode=rwc"), "the SQLite file x.db");
    }
}
