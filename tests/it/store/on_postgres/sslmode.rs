//! What `sslmode` does against a server without TLS (the suite's shared server runs with
//! `ssl = off`), on every PostgreSQL this suite runs on. The handshakes themselves are
//! `tls.rs`'s.

use package_executor_testkit::db::*;
use package_executor_testkit::pg;

/// `require` and stricter refuse a server that does not offer TLS, `prefer` (the default) falls
/// back to plaintext.
#[tokio::test]
async fn a_server_without_tls_is_refused_unless_sslmode_allows_plaintext() {
    let url = pg::fresh_db().await;
    for mode in ["require", "verify-ca", "verify-full"] {
        let out = ends(
            exe(&format!("{url}?sslmode={mode}"), "5s").args(["sources", "import", DEMO_PATH]),
        )
        .await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{mode}: {err}");
        assert!(err.contains("refused TLS"), "{mode}: {err}");
    }
    let store = connect(&url).await;
    assert_eq!(scalar(&store, "SELECT COUNT(*) FROM ql3.projects").await, 0);
    store.close().await;
    for mode in ["prefer", "disable"] {
        succeeds(
            exe(&format!("{url}?sslmode={mode}"), "5s").args(["sources", "import", DEMO_PATH]),
        )
        .await;
    }
    let store = connect(&url).await;
    assert_eq!(scalar(&store, "SELECT COUNT(*) FROM ql3.projects").await, 4);
    store.close().await;
}
