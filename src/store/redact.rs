//! Secrets out of connection strings, before a URL reaches any message, log field, Event,
//! summary or termination message. This is the one place that knows the forms a secret takes:
//! the password of the user part (of every host's user part in a multi-host URL), and the
//! `password` and `sslpassword` parameters of the query (libpq's and sqlx's spelling, with the
//! key percent-encoded or not, in any case). A `key=value` connection string gets the same
//! parameter masking.
//!
//! It errs on the side of hiding: the user part runs to the last `@`, so a password with an
//! unencoded `/`, `?` or `#` (which makes the URL invalid anyway) is hidden too; an `@` in the
//! query of a URL with a port or a password then hides the host and path as well.

/// What replaces a secret.
const MASK: &str = "***";

/// Query and `key=value` parameters whose values are secrets.
const SECRET_KEYS: [&str; 2] = ["password", "sslpassword"];

/// `url` with every secret replaced by `***`.
pub fn redact(url: &str) -> String {
    let mut secrets = Vec::new();
    match url.find("://").map(|i| i + 3) {
        Some(start) => {
            let rest = &url[start..];
            // The user part ends at the last '@' (a host never holds one). A well-formed URL
            // has none after its authority, but a password with an unencoded '/', '?' or '#'
            // does, and so may a query value: masking up to the last '@' hides the password in
            // every case, and at worst a host and path with it.
            if let Some(at) = rest.rfind('@')
                && let Some(colon) = rest[..at].find(':')
            {
                secrets.push(start + colon + 1..start + at);
            }
            // The query, from the first '?' wherever it stands: a '?' inside a password only
            // adds text that is masked anyway.
            if let Some(q) = rest.find('?') {
                secret_values(url, start + q + 1, &['&', '#'], &mut secrets);
            }
        }
        None => secret_values(url, 0, &[' ', '\t', '\n'], &mut secrets),
    }
    mask(url, secrets)
}

/// The ranges of secret values among the `key=value` pairs of `text[from..]` separated by any
/// of `separators`.
fn secret_values(
    text: &str,
    from: usize,
    separators: &[char],
    out: &mut Vec<std::ops::Range<usize>>,
) {
    let mut at = from;
    for pair in text[from..].split(separators) {
        if let Some((key, _)) = pair.split_once('=')
            && is_secret_key(key)
        {
            out.push(at + key.len() + 1..at + pair.len());
        }
        // Separators are one byte each.
        at += pair.len() + 1;
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
        out.push_str(&text[done..r.start]);
        out.push_str(MASK);
        done = r.end;
    }
    out.push_str(&text[done..]);
    out
}

/// Whether a parameter key names a secret, read as the URL parser reads it (percent-decoded,
/// `+` as a space) and in any case.
fn is_secret_key(key: &str) -> bool {
    let decoded: String = url::form_urlencoded::parse(key.as_bytes())
        .map(|(k, v)| {
            if v.is_empty() {
                k
            } else {
                format!("{k}={v}").into()
            }
        })
        .collect();
    let decoded = decoded.trim().to_ascii_lowercase();
    SECRET_KEYS.contains(&decoded.as_str())
}

#[cfg(test)]
mod tests {
    use super::redact;

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
            ] {
                let got = redact(&url);
                proptest::prop_assert!(!got.contains("Zq"), "{} -> {}", url, got);
            }
        }
    }
}
