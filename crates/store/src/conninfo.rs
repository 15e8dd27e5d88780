//! The connection string as libpq reads it: parameter names in every spelling a URL parser
//! accepts, the host list of a multi-host URL and `target_session_attrs`. A leaf: the failover
//! (`primary.rs`), the secrets this process was given (`secrets.rs`) and their masking
//! (`redact.rs`) all read connection strings through it, and it uses none of them.

use crate::StoreError;

/// What a host must be for the executor to use it: libpq's `target_session_attrs`, of which
/// the executor takes the values that can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SessionAttrs {
    /// `any`: whatever answers.
    Any,
    /// `read-write` (the executor's default with several hosts): a server that is not in
    /// recovery and whose `default_transaction_read_only` is off.
    ReadWrite,
    /// `primary`: a server that is not in recovery.
    Primary,
}

impl SessionAttrs {
    /// Parses a value as libpq does: every value libpq knows is taken or refused with the
    /// reason, an unknown one is refused (libpq refuses it too; a typo must not mean "primary").
    pub(crate) fn parse(value: &str) -> Result<Self, StoreError> {
        match value {
            "any" => Ok(Self::Any),
            "read-write" => Ok(Self::ReadWrite),
            "primary" => Ok(Self::Primary),
            "read-only" | "standby" | "prefer-standby" => Err(StoreError::Config(format!(
                "target_session_attrs={value} asks for a read-only server or a standby, but \
                 package-executor writes snapshots and proves currency on the primary; use \
                 read-write (the default), primary, or any"
            ))),
            other => Err(StoreError::Config(format!(
                "unknown target_session_attrs value {other:?}; libpq knows any, read-write, \
                 read-only, primary, standby and prefer-standby, and package-executor takes \
                 any, read-write or primary: correct DATABASE_URL or PGTARGETSESSIONATTRS"
            ))),
        }
    }
}

/// The hosts of a URL, and what each must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hosts {
    /// One URL per host, without `target_session_attrs`.
    pub urls: Vec<String>,
    /// What a host must be, when that is asked (the URL's `target_session_attrs`, else
    /// `PGTARGETSESSIONATTRS`), or [`SessionAttrs::ReadWrite`] when several hosts are named.
    /// `None`: a single host, used as it is.
    pub attrs: Option<SessionAttrs>,
}

/// Splits `postgres://user@h1:p1,h2:p2/db?…` into one URL per host, dropping
/// `target_session_attrs` (handled here; `env` gives `PGTARGETSESSIONATTRS` when the URL does
/// not set it, as libpq reads it).
pub(crate) fn split_hosts(
    url: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Hosts, StoreError> {
    let (scheme, rest) = match url.split_once("://") {
        Some(parts) => parts,
        None => {
            return Ok(Hosts {
                urls: vec![url.to_owned()],
                attrs: None,
            });
        }
    };
    let (path_start, _) = rest
        .char_indices()
        .find(|(_, c)| *c == '/' || *c == '?')
        .unwrap_or((rest.len(), ' '));
    let (authority, tail) = rest.split_at(path_start);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let mut asked = None;
    let mut kept = Vec::new();
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        match kv.split_once('=') {
            Some(("target_session_attrs", v)) => asked = Some(SessionAttrs::parse(v)?),
            // sqlx cannot decrypt a client key, and would log the ignored value in full; in any
            // spelling a URL parser reads as sslpassword (`SSLPASSWORD`, `sslpass%77ord`).
            Some((k, _)) if parameter_name(k) == "sslpassword" => {
                return Err(StoreError::Config(
                    "sslpassword (the passphrase of an encrypted client key) is not supported; \
                     give the executor an unencrypted key (`openssl pkey -in client.key -out \
                     client-plain.key`, kept in a Secret) and remove sslpassword from the URL"
                        .into(),
                ));
            }
            _ => kept.push(kv),
        }
    }
    if asked.is_none()
        && let Some(v) = env("PGTARGETSESSIONATTRS").filter(|v| !v.is_empty())
    {
        asked = Some(SessionAttrs::parse(&v)?);
    }
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    let urls: Vec<String> = hosts
        .split(',')
        .map(|h| format!("{scheme}://{userinfo}{h}{path}{query}"))
        .collect();
    let attrs = asked.or((urls.len() > 1).then_some(SessionAttrs::ReadWrite));
    Ok(Hosts { urls, attrs })
}

/// A query parameter's name as a URL parser reads it (percent-decoded, `+` a space), trimmed
/// and in lower case.
pub(crate) fn parameter_name(raw: &str) -> String {
    let decoded: String = url::form_urlencoded::parse(raw.as_bytes())
        .map(|(k, v)| {
            if v.is_empty() {
                k
            } else {
                format!("{k}={v}").into()
            }
        })
        .collect();
    decoded.trim().to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> Hosts {
        split_hosts(url, |_| None).unwrap()
    }

    #[test]
    fn splits_multi_host_urls() {
        let hosts = split(
            "postgres://u:p@a:5432,b:5433/db?target_session_attrs=read-write&sslmode=disable",
        );
        assert_eq!(hosts.attrs, Some(SessionAttrs::ReadWrite));
        assert_eq!(
            hosts.urls,
            vec![
                "postgres://u:p@a:5432/db?sslmode=disable",
                "postgres://u:p@b:5433/db?sslmode=disable"
            ]
        );
        let hosts = split("postgresql://h/db?target_session_attrs=any");
        assert_eq!(hosts.attrs, Some(SessionAttrs::Any));
        assert_eq!(hosts.urls, vec!["postgresql://h/db"]);
        let hosts = split("postgres://a,b");
        assert_eq!(hosts.urls, vec!["postgres://a", "postgres://b"]);
        assert_eq!(hosts.attrs, Some(SessionAttrs::ReadWrite), "the default");
        assert_eq!(
            split("postgres://a/db").attrs,
            None,
            "one host, used as it is"
        );
        assert_eq!(
            split("postgres://a/db?target_session_attrs=primary").attrs,
            Some(SessionAttrs::Primary)
        );
    }

    #[test]
    fn target_session_attrs_is_strict() {
        for url in [
            "postgres://u@a/db?SSLPASSWORD=x",
            "postgres://u@a/db?sslpass%77ord=x",
        ] {
            assert!(
                matches!(split_hosts(url, |_| None), Err(StoreError::Config(_))),
                "{url}"
            );
        }
        let url = "postgres://u@a/db?sslpassword=x";
        assert!(matches!(
            split_hosts(url, |_| None),
            Err(StoreError::Config(_))
        ));
        for bad in [
            "read-wrte",
            "",
            "READ-WRITE",
            "read-only",
            "standby",
            "prefer-standby",
        ] {
            let url = format!("postgres://a,b/db?target_session_attrs={bad}");
            let err = split_hosts(&url, |_| None).unwrap_err();
            assert!(matches!(err, StoreError::Config(_)), "{bad}: {err}");
            assert!(err.to_string().contains("target_session_attrs"), "{err}");
        }
        // The environment, as libpq reads it, when the URL does not say.
        let env = |k: &str| (k == "PGTARGETSESSIONATTRS").then(|| "read-wrte".to_owned());
        assert!(split_hosts("postgres://a/db", env).is_err());
        let env = |k: &str| (k == "PGTARGETSESSIONATTRS").then(|| "any".to_owned());
        assert_eq!(
            split_hosts("postgres://a,b/db", env).unwrap().attrs,
            Some(SessionAttrs::Any)
        );
        let url = "postgres://a/db?target_session_attrs=primary";
        assert_eq!(
            split_hosts(url, env).unwrap().attrs,
            Some(SessionAttrs::Primary),
            "the URL wins"
        );
    }
}
