//! TLS to PostgreSQL as libpq does it. sqlx already reads `sslmode`, `sslrootcert`, `sslcert`
//! and `sslkey` from the URL and `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY` from
//! the environment; this module closes the gaps where sqlx is more lenient than libpq (an
//! operator's URL must mean what it means to `psql`), and turns a TLS failure into a sentence
//! that says which check failed and what to change.
//!
//! The gaps, both fail-open in sqlx:
//! - an unknown `PGSSLMODE` is ignored (so a typo silently means `prefer`); libpq refuses it;
//! - `sslmode=require` with a root certificate given verifies the chain in libpq (it behaves as
//!   `verify-ca`), but encrypts without verifying in sqlx.

use sqlx::postgres::{PgConnectOptions, PgSslMode};

use super::StoreError;

/// Applies libpq's rules to options that sqlx parsed from `url`, reading the `PGSSL*`
/// variables through `env`.
pub(crate) fn apply_libpq_rules(
    opts: PgConnectOptions,
    url: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<PgConnectOptions, StoreError> {
    let param = |name: &str| query_param(url, name);
    if param("sslmode").is_none()
        && let Some(mode) = env("PGSSLMODE")
        && mode.parse::<PgSslMode>().is_err()
    {
        return Err(StoreError::Config(format!(
            "PGSSLMODE={mode:?} is not an sslmode: use disable, prefer, require, verify-ca or \
             verify-full"
        )));
    }
    if let Some(path) = param("sslcert").or_else(|| env("PGSSLCERT"))
        && let Ok(pem) = std::fs::read_to_string(&path)
        && certificate_version(&pem) == Some(1)
    {
        // rustls cannot use an X.509 v1 certificate for the client either (it fails mid-
        // handshake as "invalid peer certificate"); libpq can. Say so before connecting.
        return Err(StoreError::Config(format!(
            "the client certificate {path} is X.509 v1 (made without extensions, as PostgreSQL's \
             `openssl x509 -req` recipe does), which package-executor's TLS library does not \
             accept; reissue it as v3 by adding extensions, e.g. `openssl x509 -req … -extfile \
             <(printf 'extendedKeyUsage=clientAuth')`"
        )));
    }
    if let Some(path) = param("sslkey").or_else(|| env("PGSSLKEY"))
        && let Ok(pem) = std::fs::read_to_string(&path)
        && is_encrypted_key(&pem)
    {
        // sqlx cannot decrypt a key (and sslpassword is refused): no retry can help.
        return Err(StoreError::Config(format!(
            "the client key {path} is encrypted, and package-executor cannot use a passphrase \
             (sslpassword); give it an unencrypted key (`openssl pkey -in {path} -out \
             client-plain.key`, kept in a Secret) and point sslkey at it"
        )));
    }
    let has_root_cert = param("sslrootcert").is_some() || env("PGSSLROOTCERT").is_some();
    Ok(match opts.get_ssl_mode() {
        PgSslMode::Require if has_root_cert => opts.ssl_mode(PgSslMode::VerifyCa),
        _ => opts,
    })
}

/// Whether a PEM key is encrypted: PKCS #8 `ENCRYPTED PRIVATE KEY`, or a traditional key with
/// OpenSSL's `Proc-Type: 4,ENCRYPTED` header.
fn is_encrypted_key(pem: &str) -> bool {
    pem.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") || pem.contains("Proc-Type: 4,ENCRYPTED")
}

/// The X.509 version (1, 2 or 3) of the first certificate in a PEM text, read from its DER
/// (`Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] EXPLICIT version DEFAULT v1, …`);
/// `None` when there is no certificate or it cannot be read (sqlx then reports it).
fn certificate_version(pem: &str) -> Option<u8> {
    use base64::Engine as _;
    let body = pem
        .split("-----BEGIN CERTIFICATE-----")
        .nth(1)?
        .split("-----END CERTIFICATE-----")
        .next()?;
    let text: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    // Skips a tag and its length; the offset of the contents.
    let header = |at: usize| -> Option<usize> {
        let len = *der.get(at + 1)?;
        Some(if len < 0x80 {
            at + 2
        } else {
            at + 2 + usize::from(len & 0x7f)
        })
    };
    if der.first() != Some(&0x30) {
        return None;
    }
    let tbs = header(0)?;
    if der.get(tbs) != Some(&0x30) {
        return None;
    }
    let first = header(tbs)?;
    match der.get(first)? {
        // [0] EXPLICIT { INTEGER version }: A0 03 02 01 vv.
        0xA0 => der.get(first + 4).map(|v| v + 1),
        // The serial number straight away: the version was left out, so v1.
        0x02 => Some(1),
        _ => None,
    }
}

/// The decoded value of one query parameter of a URL, if present.
fn query_param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// What to do about a connection failure whose text shows a TLS problem, or `None` when it
/// is not one. Matched on text because sqlx carries rustls's error only as a boxed message.
pub(crate) fn hint(message: &str) -> Option<&'static str> {
    let m = message;
    if m.contains("UnsupportedCertVersion") {
        Some(
            "TLS: a certificate in the handshake (the server's, or the client certificate) is \
             X.509 v1, which rustls does not accept (libpq does): PostgreSQL's `openssl x509 \
             -req` recipe makes v1 when it adds no extensions; reissue it as v3, e.g. `openssl \
             x509 -req … -extfile <(printf 'subjectAltName=DNS:db.example')`",
        )
    } else if m.contains("UnknownIssuer") || m.contains("unknown issuer") {
        Some(
            "TLS: the server's certificate is not signed by a CA in sslrootcert \
             (sslmode=verify-ca or verify-full): point sslrootcert (or PGSSLROOTCERT) at the CA \
             bundle that signed the server's certificate",
        )
    } else if m.contains("NotValidForName") || m.contains("not valid for name") {
        Some(
            "TLS: the server's certificate does not name the host in the URL \
             (sslmode=verify-full): connect by a name the certificate lists in its \
             subjectAltName, or reissue the certificate for this name",
        )
    } else if m.contains("server does not support TLS") {
        Some(
            "TLS: the server refused TLS, and sslmode requires it: enable ssl on the server, or \
             lower sslmode only on a network you trust",
        )
    } else if m.contains("no encryption") {
        Some(
            "TLS: the server accepts only encrypted connections from this host (hostssl in \
             pg_hba.conf): set sslmode=verify-full with sslrootcert",
        )
    } else if m.contains("CertificateRequired") || m.contains("certificate required") {
        Some(
            "TLS: the server requires a client certificate: set sslcert and sslkey (or PGSSLCERT \
             and PGSSLKEY)",
        )
    } else if m.contains("BadCertificate") || m.contains("certificate authentication failed") {
        Some(
            "TLS: the server did not accept the client certificate (its CA, or its common name \
             must equal the login's user name): check sslcert, sslkey and the server's ssl_ca_file",
        )
    } else if m.contains("TLS") || m.contains("certificate") || m.contains("pem file") {
        Some("TLS: check sslmode, sslrootcert, sslcert and sslkey")
    } else {
        None
    }
}

/// Whether a TLS failure is the configuration's, which no retry with the same settings heals:
/// a certificate that is not trusted, not for this host, of an unsupported version, or
/// refused, or TLS that one side requires and the other refuses. The run then exits 1 at once
/// instead of 8 (which Kubernetes retries until the backoff limit). Anything else that
/// mentions TLS (a reset mid-handshake, say) stays retryable.
pub(crate) fn is_configuration(message: &str) -> bool {
    [
        "UnsupportedCertVersion",
        "UnknownIssuer",
        "unknown issuer",
        "NotValidForName",
        "not valid for name",
        "server does not support TLS",
        "no encryption",
        "CertificateRequired",
        "certificate required",
        "BadCertificate",
        "certificate authentication failed",
    ]
    .iter()
    .any(|marker| message.contains(marker))
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn apply(url: &str, env: &[(&str, &str)]) -> Result<PgSslMode, StoreError> {
        let lookup = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        };
        let opts =
            PgConnectOptions::from_str(url).map_err(|e| StoreError::Config(e.to_string()))?;
        apply_libpq_rules(opts, url, lookup).map(|o| o.get_ssl_mode())
    }

    #[test]
    fn require_with_a_root_certificate_verifies_the_chain() {
        let mode = apply("postgres://h/db?sslmode=require&sslrootcert=%2Fca.pem", &[]);
        assert!(matches!(mode, Ok(PgSslMode::VerifyCa)));
        let mode = apply(
            "postgres://h/db?sslmode=require",
            &[("PGSSLROOTCERT", "/ca.pem")],
        );
        assert!(matches!(mode, Ok(PgSslMode::VerifyCa)));
        let mode = apply("postgres://h/db?sslmode=require", &[]);
        assert!(matches!(mode, Ok(PgSslMode::Require)));
        let mode = apply(
            "postgres://h/db?sslmode=verify-full&sslrootcert=/ca.pem",
            &[],
        );
        assert!(matches!(mode, Ok(PgSslMode::VerifyFull)));
    }

    #[test]
    fn an_unknown_pgsslmode_is_refused_not_ignored() {
        let err = apply("postgres://h/db", &[("PGSSLMODE", "verify_full")]);
        assert!(matches!(err, Err(StoreError::Config(m)) if m.contains("verify_full")));
        // The URL's own parameter wins over the variable, as in libpq.
        let mode = apply("postgres://h/db?sslmode=disable", &[("PGSSLMODE", "bogus")]);
        assert!(matches!(mode, Ok(PgSslMode::Disable)));
    }

    #[test]
    fn query_parameters_are_decoded() {
        assert_eq!(
            query_param(
                "postgres://h/db?a=1&sslrootcert=%2Fetc%2Fca.pem",
                "sslrootcert"
            ),
            Some("/etc/ca.pem".to_owned())
        );
        assert_eq!(query_param("postgres://h/db", "sslmode"), None);
    }

    #[test]
    fn every_tls_failure_says_which_check_failed() {
        for (text, needle) in [
            (
                "invalid peer certificate: UnknownIssuer",
                "not signed by a CA",
            ),
            (
                "invalid peer certificate: certificate not valid for name \"127.0.0.2\"",
                "does not name the host",
            ),
            ("server does not support TLS", "refused TLS"),
            (
                "no pg_hba.conf entry for host \"127.0.0.1\", user \"x\", database \"y\", no encryption",
                "hostssl",
            ),
        ] {
            assert!(hint(text).is_some_and(|h| h.contains(needle)), "{text}");
        }
        assert_eq!(hint("connection refused"), None);
    }

    #[test]
    fn an_encrypted_client_key_is_a_configuration_mistake_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("client.key");
        std::fs::write(
            &key,
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .unwrap();
        let url = format!("postgres://u@h/db?sslkey={}", key.display());
        let opts: PgConnectOptions = url.parse().unwrap();
        let err = apply_libpq_rules(opts, &url, |_| None).unwrap_err();
        assert!(matches!(err, StoreError::Config(_)), "{err:?}");
        assert!(err.to_string().contains("openssl pkey"), "{err}");
    }

    #[test]
    fn certificate_versions_are_read_from_the_der() {
        // rcgen makes v3 certificates.
        let params = rcgen::CertificateParams::new(vec!["x".to_owned()]).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let v3 = params.self_signed(&key).unwrap().pem();
        assert_eq!(certificate_version(&v3), Some(3));
        assert_eq!(certificate_version("no certificate here"), None);
        // The same certificate with its [0] version field taken out reads as v1.
        use base64::Engine as _;
        let body: String = v3.lines().filter(|l| !l.starts_with("-----")).collect();
        let mut der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        let tbs = if der[1] < 0x80 {
            2
        } else {
            2 + usize::from(der[1] & 0x7f)
        };
        let first = if der[tbs + 1] < 0x80 {
            tbs + 2
        } else {
            tbs + 2 + usize::from(der[tbs + 1] & 0x7f)
        };
        assert_eq!(der[first], 0xA0);
        der.drain(first..first + 5);
        let pem = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            base64::engine::general_purpose::STANDARD.encode(&der)
        );
        assert_eq!(certificate_version(&pem), Some(1));
    }

    #[test]
    fn a_v1_certificate_says_how_to_reissue_it_and_is_configuration() {
        let m = "invalid peer certificate: UnsupportedCertVersion";
        assert!(hint(m).is_some_and(|h| h.contains("X.509 v1") && h.contains("-extfile")));
        assert!(is_configuration(m));
        for transient in [
            "connection refused",
            "connection reset by peer",
            "TLS handshake eof",
        ] {
            assert!(!is_configuration(transient), "{transient}");
        }
        assert!(is_configuration("invalid peer certificate: UnknownIssuer"));
    }
}
