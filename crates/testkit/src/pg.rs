//! A throwaway PostgreSQL cluster started from the system's binaries, shared by the tests of
//! one test binary, with a migrated template database cloned per test.
//!
//! It never skips: when the binaries are missing the tests fail and say what to install. A
//! watchdog process stops the server and removes its files when the test process exits, even
//! after a panic or a kill.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use package_executor::store::{ConnectOptions, Store};

/// A running cluster.
#[derive(Debug)]
pub struct PgCluster {
    pub port: u16,
    pub dir: PathBuf,
    pub bindir: PathBuf,
    pub as_root: bool,
}

static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
static NEXT_DB: AtomicUsize = AtomicUsize::new(0);
pub const TEMPLATE: &str = "ql3_template";

/// Test logins, each a member of exactly one group role.
pub const LOGINS: [(&str, &str); 6] = [
    ("login_owner", "ql3_owner"),
    ("login_control_plane", "ql3_control_plane"),
    ("login_executor", "ql3_package_executor"),
    ("login_consumer", "ql3_tool_consumer"),
    ("login_worker", "ql3_worker"),
    ("login_api", "ql3_api"),
];

/// The server binaries: `PE_PG_BINDIR` when set (how `scripts/test.sh` runs the suite on a
/// second major), else `pg_config --bindir`, else the newest `/usr/lib/postgresql/*/bin`.
pub fn bindir() -> PathBuf {
    if let Ok(dir) = std::env::var("PE_PG_BINDIR") {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join("initdb").exists() && dir.join("pg_ctl").exists(),
            "PE_PG_BINDIR={} has no initdb and pg_ctl: point it at a PostgreSQL bin directory \
             (`./scripts/test.sh` installs PostgreSQL 18 into .tools/)",
            dir.display()
        );
        return std::fs::canonicalize(&dir).unwrap_or(dir);
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    candidates.sort();
    candidates
        .into_iter()
        .rev()
        .find(|d| d.join("initdb").exists())
        .unwrap_or_else(|| {
            panic!(
                "PostgreSQL server binaries (initdb, pg_ctl) not found via `pg_config --bindir` or \
             /usr/lib/postgresql/*/bin. Install them: `apt-get install -y postgresql` \
             (Debian/Ubuntu) and run the tests again. These tests never skip."
            )
        })
}

/// The server's version, as `postgres --version` prints it (`postgres (PostgreSQL) 18.6`).
pub fn server_version(bindir: &Path) -> String {
    let out = Command::new(bindir.join("postgres"))
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}/postgres: {e}", bindir.display()));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// With `PE_PG_MAJOR` set (as `scripts/test.sh` does for each pass), the binaries found must be
/// that major: a pass that claims to test PostgreSQL 18 never quietly runs on 15.
fn assert_major(bindir: &Path) {
    if let Ok(major) = std::env::var("PE_PG_MAJOR") {
        let version = server_version(bindir);
        assert!(
            version.contains(&format!(" {major}.")),
            "PE_PG_MAJOR={major}, but {} is {version:?}",
            bindir.display()
        );
    }
}

/// Whether the tests run as root (the servers then run as the `postgres` OS user).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

impl PgCluster {
    /// Runs a server binary, as the `postgres` OS user when the tests run as root.
    pub fn run(&self, bin: &str, args: &[&str]) -> std::process::Output {
        let path = self.bindir.join(bin);
        let mut cmd = if self.as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        cmd.args(args).current_dir("/tmp");
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
        assert!(
            out.status.success(),
            "{bin} {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Creates, starts and watches a new cluster in `dir`.
    pub fn start_in(dir: PathBuf, extra_conf: &str) -> Self {
        // The tiers are chosen by where a test lives: `scripts/test.sh fast` runs what is not in
        // an `on_postgres` module and says so here, so a test that needs a server cannot slip
        // into it unnoticed.
        assert!(
            std::env::var_os("PE_TIER").is_none_or(|t| t != "fast"),
            "{}: this test starts PostgreSQL but lies outside an `on_postgres` module, so the \
             fast tier runs it; move it into one (the pg tier runs those)",
            std::thread::current().name().unwrap_or("a test")
        );
        let bindir = bindir();
        assert_major(&bindir);
        let as_root = is_root();
        std::fs::create_dir_all(dir.join("sock")).expect("mkdir");
        if as_root {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status();
            assert!(
                ok.map(|s| s.success()).unwrap_or(false),
                "chown of {} failed",
                dir.display()
            );
        }
        let port = crate::free_port();
        let cluster = Self {
            port,
            dir,
            bindir,
            as_root,
        };
        let data = cluster.data_dir();
        cluster.run(
            "initdb",
            &[
                "-D",
                path(&data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ],
        );
        let conf = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\nfull_page_writes = off\nmax_connections = 300\nshared_buffers = 128MB\n{extra_conf}\n",
            cluster.dir.join("sock").display()
        );
        let conf_path = data.join("postgresql.auto.conf");
        let mut existing = std::fs::read_to_string(&conf_path).unwrap_or_default();
        existing.push_str(&conf);
        std::fs::write(&conf_path, existing).expect("write conf");
        cluster.start();
        cluster.watch();
        cluster
    }

    /// Writes a file into the data directory, owned by the server's OS user, with `mode`.
    pub fn write_data_file(&self, name: &str, text: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.data_dir().join(name);
        std::fs::write(&path, text).expect("write a data file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        if self.as_root {
            let ok = Command::new("chown")
                .arg("postgres:postgres")
                .arg(&path)
                .status();
            assert!(
                ok.map(|s| s.success()).unwrap_or(false),
                "chown {}",
                path.display()
            );
        }
    }

    /// Turns TLS on for the next start (the server must be stopped): its certificate and key,
    /// and, when given, the CA that client certificates must chain to (for `cert` logins).
    pub fn enable_tls(&self, cert: &str, key: &str, client_ca: Option<&str>) {
        self.write_data_file("server.crt", cert, 0o644);
        self.write_data_file("server.key", key, 0o600);
        let mut conf =
            "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n".to_owned();
        if let Some(ca) = client_ca {
            self.write_data_file("root.crt", ca, 0o644);
            conf.push_str("ssl_ca_file = 'root.crt'\n");
        }
        let path = self.data_dir().join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&path).expect("read the configuration");
        text.push_str(&conf);
        std::fs::write(&path, text).expect("write the configuration");
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn start(&self) {
        let log = self.dir.join("server.log");
        self.run(
            "pg_ctl",
            &[
                "-D",
                path(&self.data_dir()),
                "-l",
                path(&log),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }

    pub fn stop(&self, mode: &str) {
        self.run(
            "pg_ctl",
            &["-D", path(&self.data_dir()), "-m", mode, "-w", "stop"],
        );
    }

    /// Stops the server and removes its files once this test process is gone.
    pub fn watch(&self) {
        let pid = std::process::id();
        let script = format!(
            "while [ -d /proc/{pid} ]; do sleep 0.5; done; {} -D {} -m immediate stop >/dev/null 2>&1; rm -rf {}",
            self.bindir.join("pg_ctl").display(),
            self.data_dir().display(),
            self.dir.display()
        );
        let cmd = if self.as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "setsid", "sh", "-c", &script]);
            c
        } else {
            let mut c = Command::new("setsid");
            c.args(["sh", "-c", &script]);
            c
        };
        detach(cmd);
    }

    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A URL for a login with a password-less trust connection.
    pub fn url_as(&self, user: &str, db: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/{db}", self.port)
    }
}

/// Removes `base` once this test process is gone and the clusters under it have been emptied
/// by their own watchdogs (which run as `postgres`, so they cannot remove what root created:
/// `base` itself and the cluster directories in it were left behind, empty, on every run).
/// Waits at most a minute for them, so it never removes a running server's files.
pub fn remove_after_exit(base: &Path, clusters: &[&Path]) {
    let pid = std::process::id();
    let pending: Vec<String> = clusters
        .iter()
        .map(|c| format!("[ -n \"$(ls -A '{}' 2>/dev/null)\" ]", c.display()))
        .collect();
    let script = format!(
        "while [ -d /proc/{pid} ]; do sleep 0.5; done; \
         i=0; while [ $i -lt 120 ] && {{ {}; }}; do sleep 0.5; i=$((i+1)); done; \
         [ $i -lt 120 ] && rm -rf '{}'",
        pending.join(" || "),
        base.display()
    );
    let mut cmd = Command::new("setsid");
    cmd.args(["sh", "-c", &script]);
    detach(cmd);
}

/// Starts a watchdog with no standard streams and does not wait for it: it outlives this
/// process to clean up after it.
fn detach(mut cmd: Command) {
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    #[allow(clippy::zombie_processes)]
    let _watchdog = cmd.spawn().expect("spawn watchdog");
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs async setup on a private runtime (the caller may be inside another runtime).
pub fn block_on<F: std::future::Future + Send + 'static>(f: F) -> F::Output
where
    F::Output: Send + 'static,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(f)
    })
    .join()
    .expect("setup thread")
}

/// The shared cluster of this test binary, with a migrated template database.
pub fn cluster() -> &'static PgCluster {
    CLUSTER.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!(
            "pe-pg-{}-{}",
            std::process::id(),
            crate::free_port()
        ));
        // Extra postgresql.conf lines for profiling (benches), e.g. pg_stat_statements.
        let extra = std::env::var("PE_PG_CONF")
            .unwrap_or_default()
            .replace(';', "\n");
        let cluster = PgCluster::start_in(dir, &extra);
        let admin = cluster.url("postgres");
        let template = cluster.url(TEMPLATE);
        block_on(async move {
            let store = Store::connect(&ConnectOptions::new(admin.parse().unwrap()))
                .await
                .expect("connect admin");
            let pool = store.pg_pool().expect("pg");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {TEMPLATE}")))
                .execute(&pool)
                .await
                .expect("create template");
            store.close().await;
            let store = Store::connect(&ConnectOptions::new(template.parse().unwrap()))
                .await
                .expect("connect template");
            store.migrate(true, None).await.expect("migrate template");
            // One real LOGIN per group role, member of that role only (roles are cluster-wide).
            let pool = store.pg_pool().expect("pg");
            for (login, role) in LOGINS {
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE ROLE {login} LOGIN")))
                    .execute(&pool)
                    .await
                    .expect("create login");
                sqlx::query(sqlx::AssertSqlSafe(format!("GRANT {role} TO {login}")))
                    .execute(&pool)
                    .await
                    .expect("grant role");
            }
            store.close().await;
        });
        cluster
    })
}

/// A fresh database cloned from the migrated template; returns its URL (superuser).
pub async fn fresh_db() -> String {
    let name = format!(
        "t_{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::SeqCst)
    );
    clone_db(TEMPLATE, &name).await
}

/// Database `to`, a copy of `from` (no session may be connected to `from`), on the shared
/// server; returns its URL (superuser).
pub async fn clone_db(from: &str, to: &str) -> String {
    let c = cluster();
    clone_db_at(&c.url("postgres"), from, to).await;
    c.url(to)
}

/// Database `to`, a copy of `from`, on the server `admin` (a superuser's URL) reaches.
pub async fn clone_db_at(admin: &str, from: &str, to: &str) {
    let admin = admin.to_owned();
    let create = format!("CREATE DATABASE {to} TEMPLATE {from}");
    block_on(async move {
        let store = Store::connect(&ConnectOptions::new(admin.parse().unwrap()))
            .await
            .expect("connect admin");
        let pool = store.pg_pool().expect("pg");
        sqlx::query(sqlx::AssertSqlSafe(create))
            .execute(&pool)
            .await
            .expect("clone a database");
        store.close().await;
    });
}

/// Swaps the user of a database URL.
pub fn as_login(url: &str, login: &str) -> String {
    url.replacen("postgres://postgres@", &format!("postgres://{login}@"), 1)
}

/// A fresh, migrated SQLite file; returns its URL and keeps the directory alive.
pub async fn fresh_sqlite() -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = migrated_sqlite(&dir.path().join("t.db")).await;
    (url, dir)
}

/// A migrated SQLite file at `path`; returns its URL.
pub async fn migrated_sqlite(path: &Path) -> String {
    let url = format!("sqlite://{}", path.display());
    let store = Store::connect(&ConnectOptions::new(url.parse().unwrap()))
        .await
        .expect("connect sqlite");
    store.migrate(false, None).await.expect("migrate sqlite");
    store.close().await;
    url
}

/// Waits until another session of `c`'s database waits for a lock: how a test that holds one
/// learns that its actor has reached it. PostgreSQL announces no such event, so this polls
/// `pg_stat_activity`; it panics after `timeout`.
///
/// `c` is usually inside the transaction that holds the lock, and a backend reads
/// `pg_stat_activity` once per transaction: each poll discards that snapshot first, or a poll
/// made before the actor reached the lock would be all the others ever saw (a flaky failure
/// in CI on a loaded machine).
pub async fn until_a_session_waits_for_a_lock(
    c: &mut sqlx::PgConnection,
    timeout: std::time::Duration,
) {
    let started = std::time::Instant::now();
    loop {
        sqlx::query("SELECT pg_stat_clear_snapshot()")
            .execute(&mut *c)
            .await
            .expect("discard the statistics snapshot");
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() \
             AND datname = current_database()",
        )
        .fetch_one(&mut *c)
        .await
        .expect("read pg_stat_activity");
        if waiting > 0 {
            return;
        }
        assert!(
            started.elapsed() < timeout,
            "no session waited for a lock within {timeout:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
