//! Pushing the metrics text to a Prometheus Pushgateway: `POST <url>/metrics/job/<job>/shard/<i>`.
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

/// Where one run's metrics go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The full URL to POST to.
    pub url: String,
}

impl Target {
    /// `<base>/metrics/job/<job>/shard/<index>`, the grouping key escaped as a path segment.
    pub fn new(base: &str, job: &str, shard_index: u64) -> Self {
        Self {
            url: format!(
                "{}/metrics/job/{}/shard/{shard_index}",
                base.trim_end_matches('/'),
                segment(job)
            ),
        }
    }
}

/// Percent-encodes everything but unreserved characters (RFC 3986), so a job name cannot add
/// path segments.
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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
        let request = hyper::Request::post(&target.url)
            .header(hyper::header::CONTENT_TYPE, super::CONTENT_TYPE)
            .body(Full::new(Bytes::from(text.to_owned())))
            .map_err(|e| format!("bad Pushgateway URL {}: {e}", target.url))?;
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
    Err(format!("{} ({TRIES} tries): {last}", target.url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_carries_job_and_shard() {
        assert_eq!(
            Target::new("http://pgw:9091/", "package_executor", 2).url,
            "http://pgw:9091/metrics/job/package_executor/shard/2"
        );
        assert_eq!(
            Target::new("http://pgw:9091", "a/b c", 0).url,
            "http://pgw:9091/metrics/job/a%2Fb%20c/shard/0"
        );
    }
}
