//! Secrets out of text, before it reaches any message, log line, Event, summary or
//! termination message. This is the one place that knows the forms a secret takes, and it reads
//! any text, not only a URL that parses:
//!
//! - the password of a user part, `user:PASSWORD@host`, wherever it stands in a token (a run of
//!   text without white space or `"`): after `scheme://`, `scheme:/`, `scheme:`, `scheme//`
//!   or nothing, of every host of a multi-host URL (it runs to the token's last `@`);
//! - the value of every parameter whose name, percent-decoded and in any case, is `password`
//!   or ends in it (`sslpassword`, `PGPASSWORD`, `sslpass%77ord`), or is `passwd` or `pwd`:
//!   `name=VALUE` in a query, `name = VALUE` with spaces, and libpq's quoted
//!   `name='VALUE with spaces and \' escapes'`.
//!
//! - the value of every connection parameter sqlx logs as unrecognized (`ignoring
//!   unrecognized connect parameter key=PassWord value=…`, as text or JSON): whatever its
//!   name, a parameter nobody reads may still be someone's secret.
//!
//! Before those guesses, every password the process was given, as parsed (`secrets.rs`), is
//! masked wherever it stands: a guess at URL shapes in text always has another form (a password
//! with a space is not in one token).
//!
//! It errs on the side of hiding: an `@` later in the token (in a query value) hides the host
//! and path as well, and a value runs to white space, `&`, `#` or a JSON string's end.
//!
//! [`redact`] is applied to every URL the code prints, and [`redact_text`] to every log line
//! the binary writes and to the last error it prints, below any log filter: a filter a user
//! sets (`PACKAGE_EXECUTOR_LOG`) can choose which lines are written, never unmask one.

/// What replaces a secret.
const MASK: &str = "***";

/// `url` (or any text holding one) with every secret replaced by `***`.
pub fn redact(url: &str) -> String {
    redact_text(url)
}

/// `text` with every secret it holds, in any of the forms above, replaced by `***`.
pub fn redact_text(text: &str) -> String {
    let mut secrets = Vec::new();
    known_values(text, &mut secrets);
    user_parts(text, &mut secrets);
    parameters(text, &mut secrets);
    unrecognized_values(text, &mut secrets);
    if secrets.is_empty() {
        return text.to_owned();
    }
    mask(text, secrets)
}

/// Every occurrence of a password this process was given (`secrets.rs`), in each spelling.
fn known_values(text: &str, out: &mut Vec<std::ops::Range<usize>>) {
    crate::secrets::each_known(|secret| {
        out.extend(text.match_indices(secret).map(|(at, s)| at..at + s.len()));
    });
}

/// The passwords of the user parts of every token holding an `@`.
fn user_parts(text: &str, out: &mut Vec<std::ops::Range<usize>>) {
    let bytes = text.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        let end = bytes[start..]
            .iter()
            .position(|b| b.is_ascii_whitespace() || *b == b'"')
            .map_or(bytes.len(), |n| start + n);
        let token = &text[start..end];
        // The Pushgateway's path writes a label value as `name@base64/VALUE`: that `@` is in a
        // path, never a user part's end, and masking up to it hid the gateway's port and path.
        let user_part_end = token
            .match_indices('@')
            .map(|(at, _)| at)
            .rfind(|at| !token[at + 1..].starts_with("base64"));
        if let Some(at) = user_part_end {
            let before = &token[..at];
            let mut from = 0;
            // `scheme:` (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`).
            if let Some(colon) = before.find(':')
                && colon > 0
                && before[..colon].starts_with(|c: char| c.is_ascii_alphabetic())
                && before[..colon]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
            {
                from = colon + 1;
            }
            from += before[from..].bytes().take_while(|b| *b == b'/').count();
            if let Some(colon) = before[from..].find(':') {
                out.push(start + from + colon + 1..start + at);
            } else if let Some(slashes) = before[from..].find("//") {
                // `scheme//user:PASSWORD@host`: the scheme lost its colon.
                let user = from + slashes + 2;
                if let Some(colon) = before[user..].find(':') {
                    out.push(start + user + colon + 1..start + at);
                }
            }
        }
        start = end + 1;
    }
}

/// Whether a parameter name, as written, names a secret.
fn is_secret_name(raw: &str) -> bool {
    let name = crate::conninfo::parameter_name(raw);
    name.ends_with("password") || name == "passwd" || name == "pwd"
}

/// The values of every `name=value` (spaces around `=` allowed, libpq quoting understood)
/// whose name is a secret's.
fn parameters(text: &str, out: &mut Vec<std::ops::Range<usize>>) {
    let bytes = text.as_bytes();
    let is_name =
        |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'_' | b'.' | b'+' | b'-');
    let mut i = 0;
    while i < bytes.len() {
        if !is_name(bytes[i]) {
            i += 1;
            continue;
        }
        let name_start = i;
        while i < bytes.len() && is_name(bytes[i]) {
            i += 1;
        }
        let name = &text[name_start..i];
        let mut j = i;
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        if j >= bytes.len() || bytes[j] != b'=' || !is_secret_name(name) {
            continue;
        }
        j += 1;
        while j < bytes.len() && bytes[j] == b' ' {
            j += 1;
        }
        let value_start = j;
        if j < bytes.len() && bytes[j] == b'\'' {
            // libpq: a quoted value, with `\'` and `\\` escapes, to its closing quote.
            j += 1;
            while j < bytes.len() && bytes[j] != b'\'' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            j = (j + 1).min(bytes.len());
        } else {
            // A value ends at white space, `&`, `#`, or a JSON string's end (`"` or `\"`).
            let ends = |j: usize| {
                bytes[j].is_ascii_whitespace()
                    || matches!(bytes[j], b'&' | b'#' | b'"')
                    || (bytes[j] == b'\\' && bytes.get(j + 1) == Some(&b'"'))
            };
            while j < bytes.len() && !ends(j) {
                j += 1;
            }
        }
        out.push(value_start..j);
        i = j;
    }
}

/// sqlx's warning about a parameter it does not know carries the parameter's value.
const UNRECOGNIZED: &str = "ignoring unrecognized connect parameter";

/// The key and value fields of sqlx's unrecognized-parameter warning: a JSON line's
/// `"key":"…"` and `"value":"…"` strings, or a text line's `key=…` up to ` value=` and
/// `value=…` to the line's end (the value is the event's last field, written unquoted, spaces
/// included). The key too: a password given raw in a query is cut at its `&`, and what follows
/// it reaches sqlx as the name of a parameter.
fn unrecognized_values(text: &str, out: &mut Vec<std::ops::Range<usize>>) {
    if !text.contains(UNRECOGNIZED) {
        return;
    }
    let bytes = text.as_bytes();
    let json_string = |field: &str, out: &mut Vec<std::ops::Range<usize>>| {
        let open = format!("\"{field}\":\"");
        if let Some(at) = text.find(&open) {
            let start = at + open.len();
            let mut j = start;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.push(start..j.min(bytes.len()));
            true
        } else {
            false
        }
    };
    let key = json_string("key", out);
    if json_string("value", out) || key {
        return;
    }
    let value_at = text.find(" value=");
    if let Some(at) = text.find(" key=") {
        let start = at + " key=".len();
        let end = value_at
            .filter(|v| *v >= start)
            .unwrap_or_else(|| text[start..].find('\n').map_or(text.len(), |n| start + n));
        out.push(start..end);
    }
    if let Some(at) = value_at {
        let start = at + " value=".len();
        let end = text[start..].find('\n').map_or(text.len(), |n| start + n);
        out.push(start..end);
    }
}

/// `text` with each range (merged where they overlap or touch) replaced by [`MASK`].
fn mask(text: &str, mut ranges: Vec<std::ops::Range<usize>>) -> String {
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<std::ops::Range<usize>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut done = 0;
    for r in merged {
        // Ranges end at ASCII bytes or at the text's end, so they are character boundaries;
        // were one not, the mask would only grow.
        let start = package_executor_core::quote::floor_char_boundary(text, r.start.max(done));
        out.push_str(&text[done..start]);
        out.push_str(MASK);
        done = ceil_char_boundary(text, r.end);
    }
    out.push_str(&text[done..]);
    out
}

fn ceil_char_boundary(text: &str, at: usize) -> usize {
    let mut i = at.min(text.len());
    while !text.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::{redact, redact_text};

    #[test]
    fn masks_every_form_a_password_takes() {
        let cases = [
            ("postgres://u:s3cret@h/db", "postgres://u:***@h/db"),
            (
                "postgres://u@h/db?password=s3cret",
                "postgres://u@h/db?password=***",
            ),
            (
                "postgres://u@h/db?sslmode=require&sslpassword=s3cret&x=1",
                "postgres://u@h/db?sslmode=require&sslpassword=***&x=1",
            ),
            (
                "postgres://u@h/db?PassWord=s3cret",
                "postgres://u@h/db?PassWord=***",
            ),
            (
                "postgres://u@h/db?pass%77ord=s3cret",
                "postgres://u@h/db?pass%77ord=***",
            ),
            (
                "postgres://u:s3cret@a:5432,b:5433/db?password=s3cret&target_session_attrs=read-write",
                "postgres://u:***@a:5432,b:5433/db?password=***&target_session_attrs=read-write",
            ),
            (
                "postgres://u:s3cret@a,u:s3cret@b/db",
                "postgres://u:***@b/db",
            ),
            ("postgres://h:5432/db?password=s3@cret", "postgres://h:***"),
            (
                "postgres://u@h/db?password=",
                "postgres://u@h/db?password=***",
            ),
            ("postgres://u:s3/cret@h/db", "postgres://u:***@h/db"),
            ("postgres://u:s3?cret@h/db", "postgres://u:***@h/db"),
            ("postgres://u:p@ss@h/db", "postgres://u:***@h/db"),
            // A Pushgateway URL, its user part already stripped: shown whole.
            (
                "pushing to http://127.0.0.1:9091/metrics/job/package_executor/instance@base64/cGUvbnM/kind/recovery/shard/0 failed",
                "pushing to http://127.0.0.1:9091/metrics/job/package_executor/instance@base64/cGUvbnM/kind/recovery/shard/0 failed",
            ),
            (
                "http://u:s3cret@push:9091/metrics/job/j/instance@base64/cGU",
                "http://u:***@push:9091/metrics/job/j/instance@base64/cGU",
            ),
            (
                "host=h password=s3cret user=u",
                "host=h password=*** user=u",
            ),
            ("postgres://h/db", "postgres://h/db"),
            (
                "sqlite://package-executor.db",
                "sqlite://package-executor.db",
            ),
            (
                "postgres://u@h/db?application_name=a@b",
                "postgres://u@h/db?application_name=a@b",
            ),
            // Forms that do not parse as URLs, and libpq keyword strings.
            (
                "postgres//user:s3cret@host/db",
                "postgres//user:***@host/db",
            ),
            ("postgres:/u:s3cret@h/db", "postgres:/u:***@h/db"),
            ("postgres:u:s3cret@h", "postgres:u:***@h"),
            (
                "host=h password = s3cret user=u",
                "host=h password = *** user=u",
            ),
            (
                "host=h password='a s3cret \\' x' user=u",
                "host=h password=*** user=u",
            ),
            (
                "postgres://u@h/db?SSLPASSWORD=s3cret",
                "postgres://u@h/db?SSLPASSWORD=***",
            ),
            (
                "postgres://u@h/db?sslpass%77ord=s3cret&a=1",
                "postgres://u@h/db?sslpass%77ord=***&a=1",
            ),
            ("PGPASSWORD=s3cret psql", "PGPASSWORD=*** psql"),
            (
                r#"{"error":"connecting to postgres://u:s3cret@h/db?password=s3cret\"x"}"#,
                r#"{"error":"connecting to postgres://u:***@h/db?password=***\"x"}"#,
            ),
            ("http://u:s3cret@push:9091", "http://u:***@push:9091"),
            (
                "10:45:34 user a@b.c said: hi",
                "10:45:34 user a@b.c said: hi",
            ),
            // sqlx's warning about a parameter it does not know, as JSON and as text.
            (
                r#"{"level":"WARN","message":"ignoring unrecognized connect parameter","key":"PassWord","value":"s3cret \"x","target":"sqlx_postgres::options::parse"}"#,
                r#"{"level":"WARN","message":"ignoring unrecognized connect parameter","key":"***","value":"***","target":"sqlx_postgres::options::parse"}"#,
            ),
            (
                "2026-12-02T14:42:20Z  WARN ignoring unrecognized connect parameter key=Tok value=s3 cret",
                "2026-12-02T14:42:20Z  WARN ignoring unrecognized connect parameter key=*** value=***",
            ),
        ];
        for (url, want) in cases {
            let got = redact(url);
            assert_eq!(got, want, "{url}");
            assert!(!got.contains("s3"), "{url} -> {got}");
        }
    }

    proptest::proptest! {
        /// Whatever surrounds it, a password in the user part or a `password` parameter never
        /// survives.
        #[test]
        fn no_password_survives(
            password in "[A-Za-z0-9!$%&'()*+,;=:@/?#._~-]{1,20}",
            host in "[a-z]{1,8}(:[0-9]{1,5})?(,[a-z]{1,8}(:[0-9]{1,5})?){0,2}",
            query in "(\\?[a-z_]{1,10}=[a-z0-9]{0,6})?",
        ) {
            let secret = format!("Zq{password}Zq");
            for url in [
                format!("postgres://user:{secret}@{host}/db{query}"),
                format!("postgres://user@{host}/db?password={}{}", secret.replace(['&', '#'], "_"), query.replace('?', "&")),
                format!("postgres://user@{host}/db?sslpassword={}", secret.replace(['&', '#'], "_")),
                format!("host={host} password='{}' user=u", secret.replace('\\', "\\\\").replace('\'', "\\'")),
                format!("postgres:user:{}@{host}/db", secret.replace(['@'], "_")),
            ] {
                let got = redact(&url);
                proptest::prop_assert!(!got.contains("Zq"), "{} -> {}", url, got);
                // Inside a JSON log line, a text log line, and a libpq keyword string too.
                let line = format!(r#"{{"level":"WARN","error":"cannot connect to {}: refused"}}"#, url.replace('"', "\\\""));
                let got = redact_text(&line);
                proptest::prop_assert!(!got.contains("Zq"), "{} -> {}", line, got);
            }
        }
    }
}
