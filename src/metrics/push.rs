//! Pushing the metrics text to a Prometheus Pushgateway:
//! `POST <url>/metrics/job/<job>/instance/<instance>/kind/<kind>/shard/<i>` (contract section
//! 10). The grouping key identifies the writer (the release and namespace through `instance`,
//! the recovery Jobs or the sweep through `kind`, the shard), so no two writers share a group.
//! POST replaces only the metric families it sends, so `last_success_timestamp_seconds` from an
//! earlier successful run survives a failed run (which does not send it). Each try is bounded
//! (10 s) and there is one retry, so a Pushgateway that is down or slow costs a run at most
//! about 21 s.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// How long one try may take, connect to response.
pub const TRY_TIMEOUT: Duration = Duration::from_secs(10);
/// Tries in all (one retry).
pub const TRIES: u32 = 2;

/// Where one run's metrics go. Its `Debug` names only [`Target::shown`].
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    /// The full URL to POST to, the base URL's query included; never printed, since a proxy in
    /// front of the Pushgateway may take a secret there.
    url: String,
    /// What messages name: scheme, host, port and path, without the user part or the query.
    pub shown: String,
    /// `Authorization: Basic …` from the user part the URL was given with, if any.
    authorization: Option<Credentials>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("shown", &self.shown)
            .field("authorization", &self.authorization)
            .finish_non_exhaustive()
    }
}

/// An `Authorization` header value; never printed.
#[derive(Clone, PartialEq, Eq)]
struct Credentials(String);

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Basic ***")
    }
}

/// A Pushgateway URL that cannot be pushed to; says why without quoting the URL, which may hold
/// a password in a shape no parser recognised.
#[derive(Debug, thiserror::Error)]
pub enum BadUrl {
    /// Not an absolute URL (`user:password@host:9091` has no scheme).
    #[error(
        "the Pushgateway URL does not parse as an absolute URL ({0}); give it as \
         http://host:9091 or https://host"
    )]
    Unparsable(url::ParseError),
    /// Another scheme than http or https.
    #[error("the Pushgateway URL's scheme is {0:?}; give it as http://host:9091 or https://host")]
    Scheme(String),
}

impl Target {
    /// `<base>/metrics/job/<job>/instance/<instance>/kind/<kind>/shard/<index>`, each value in
    /// its own path segment, after the base URL's own path and before its query (a proxy's
    /// query stays one). A user part in `base` (`http://user:password@host`) is sent as basic
    /// authentication and never printed.
    pub fn new(
        base: &str,
        job: &str,
        instance: &str,
        kind: &str,
        shard_index: u64,
    ) -> Result<Self, BadUrl> {
        use base64::Engine as _;
        let mut url = url::Url::parse(base).map_err(BadUrl::Unparsable)?;
        if !matches!(url.scheme(), "http" | "https") {
            let scheme: String = url.scheme().chars().take(16).collect();
            return Err(BadUrl::Scheme(scheme));
        }
        let authorization = if url.username().is_empty() && url.password().is_none() {
            None
        } else {
            let decode = |s: &str| {
                url::form_urlencoded::parse(s.replace('+', "%2B").as_bytes())
                    .map(|(k, _)| k.into_owned())
                    .collect::<String>()
            };
            let user = decode(url.username());
            let password = url.password().map(decode).unwrap_or_default();
            let _ = url.set_username("");
            let _ = url.set_password(None);
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            Some(Credentials(format!("Basic {token}")))
        };
        url.set_fragment(None);
        let mut path = format!("{}/metrics", url.path().trim_end_matches('/'));
        for (label, value) in [
            ("job", job),
            ("instance", instance),
            ("kind", kind),
            ("shard", &shard_index.to_string()),
        ] {
            path.push('/');
            path.push_str(&segment(label, value));
        }
        url.set_path(&path);
        let mut shown = url.clone();
        shown.set_query(None);
        Ok(Self {
            url: url.into(),
            shown: shown.into(),
            authorization,
        })
    }
}

/// `label/value`, or the Pushgateway's `label@base64/<base64url>` form when the value cannot
/// stand in a path segment as it is (it is empty, or holds anything but unreserved characters,
/// a `/` among them).
fn segment(label: &str, value: &str) -> String {
    use base64::Engine as _;
    let plain = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
    if plain {
        format!("{label}/{value}")
    } else if value.is_empty() {
        // The Pushgateway's spelling of an empty value.
        format!("{label}@base64/=")
    } else {
        let encoded = base64::engine::general_purpose::URL_SAFE.encode(value);
        format!("{label}@base64/{encoded}")
    }
}

/// POSTs `text`; `Err` says what went wrong on the last try.
pub async fn push(target: &Target, text: &str) -> Result<(), String> {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .map_err(|e| format!("no TLS roots for the Pushgateway: {e}"))?
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let mut last = String::new();
    for attempt in 1..=TRIES {
        let mut request = hyper::Request::post(&target.url)
            .header(hyper::header::CONTENT_TYPE, super::CONTENT_TYPE);
        if let Some(Credentials(value)) = &target.authorization {
            request = request.header(hyper::header::AUTHORIZATION, value);
        }
        let request = request
            .body(Full::new(Bytes::from(text.to_owned())))
            .map_err(|e| format!("bad Pushgateway URL {}: {e}", target.shown))?;
        let sent = async {
            let response = client.request(request).await.map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            if status.is_success() {
                Ok(())
            } else {
                Err(format!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&body)
                        .chars()
                        .take(200)
                        .collect::<String>()
                ))
            }
        };
        match tokio::time::timeout(TRY_TIMEOUT, sent).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => last = e,
            Err(_) => last = format!("no answer within {TRY_TIMEOUT:?}"),
        }
        if attempt < TRIES {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Err(format!("{} ({TRIES} tries): {last}", target.shown))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_carries_the_whole_grouping_key() {
        assert_eq!(
            Target::new(
                "http://pgw:9091/",
                "package_executor",
                "pe.prod",
                "recovery",
                2
            )
            .unwrap()
            .url,
            "http://pgw:9091/metrics/job/package_executor/instance/pe.prod/kind/recovery/shard/2"
        );
        // A value that cannot stand in a segment, and an empty one, in the base64 form.
        assert_eq!(
            Target::new("http://pgw:9091", "a/b c", "", "sweep", 0)
                .unwrap()
                .url,
            "http://pgw:9091/metrics/job@base64/YS9iIGM=/instance@base64/=/kind/sweep/shard/0"
        );
    }

    #[test]
    fn a_user_part_becomes_basic_authentication_and_is_never_printed() {
        let t = Target::new("https://me:s3cr%40t@pgw:9091/", "j", "i", "recovery", 0).unwrap();
        assert_eq!(
            t.url,
            "https://pgw:9091/metrics/job/j/instance/i/kind/recovery/shard/0"
        );
        // base64("me:s3cr@t")
        assert_eq!(
            t.authorization,
            Some(Credentials("Basic bWU6czNjckB0".into()))
        );
        assert!(!format!("{t:?}").contains("bWU6"), "{t:?}");
        let plain = Target::new("http://pgw:9091", "j", "i", "sweep", 1).unwrap();
        assert_eq!(plain.authorization, None);
    }

    /// The push path goes after the base URL's path and before its query, and no message names
    /// the query (a proxy's token may stand there) or a URL that did not parse.
    #[test]
    fn a_query_stays_after_the_path_and_is_never_shown() {
        let t = Target::new(
            "http://pgw:9091/gw/?password=hunter22&x=1#frag",
            "j",
            "i",
            "recovery",
            0,
        )
        .unwrap();
        assert_eq!(
            t.url,
            "http://pgw:9091/gw/metrics/job/j/instance/i/kind/recovery/shard/0?password=hunter22&x=1"
        );
        assert_eq!(
            t.shown,
            "http://pgw:9091/gw/metrics/job/j/instance/i/kind/recovery/shard/0"
        );
        for bad in [
            "user:hunter22@pgw:9091",
            "pgw:hunter22",
            "hunter22",
            "ftp://u:hunter22@pgw",
            "//u:hunter22@pgw:9091",
        ] {
            let e = Target::new(bad, "j", "i", "recovery", 0).unwrap_err();
            assert!(!e.to_string().contains("hunter22"), "{bad}: {e}");
        }
    }
}
