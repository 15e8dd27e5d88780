//! A password planted in every form a connection string can carry it (the user part, the
//! `password` and `sslpassword` parameters in any case or percent-encoding, a multi-host URL,
//! URLs that do not parse, libpq keyword strings with spaces and quotes) never reaches
//! standard output, standard error, the summary file, the metrics file or the Kubernetes
//! Event, whatever fails (a refused connection, an unknown host, a missing database, TLS
//! required by the client and refused by the server, a failed authentication, or nothing: a
//! good run) and whatever log filter is set (`PACKAGE_EXECUTOR_LOG`, down to `debug`). The
//! Pushgateway URL's user part is sent as basic authentication and printed nowhere, `--help`
//! included.

use package_executor_testkit::db;
use package_executor_testkit::pg;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The planted password: the login's real one, so a good run really logs in with it.
const SECRET: &str = "hunter2sekrit9Q";

/// One HTTP/1.1 request as a sink saw it: its head and its body.
struct Seen {
    head: String,
    body: String,
}

/// A loopback HTTP/1.1 server that records every request and answers it with `reply(body)`.
async fn sink(reply: fn(&[u8]) -> Vec<u8>) -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&requests);
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let n = conn.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    let length: usize = head
                        .to_ascii_lowercase()
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if buf.len() < end + 4 + length {
                        continue;
                    }
                    let body = buf[end + 4..end + 4 + length].to_vec();
                    buf.drain(..end + 4 + length);
                    // Recorded before the answer, so a client that has its answer has been seen.
                    let answer = reply(&body);
                    seen.lock().unwrap().push(Seen {
                        head,
                        body: String::from_utf8_lossy(&body).into_owned(),
                    });
                    conn.write_all(&answer).await.unwrap();
                }
            });
        }
    });
    (port, requests)
}

/// A stand-in for the API server's Event endpoint: answers each request with its body as the
/// created object (what the executor needs from `POST .../events`).
fn created(body: &[u8]) -> Vec<u8> {
    let mut reply = format!(
        "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    reply.extend_from_slice(body);
    reply
}

/// An authenticated Pushgateway's answer: 200, no body.
fn accepted(_: &[u8]) -> Vec<u8> {
    b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec()
}

/// Where the planted password stands in the URL.
#[derive(Clone, Copy, Debug)]
enum Form {
    UserPart,
    PasswordParam,
    SslPasswordParam,
    MultiHost,
    /// `postgres//user:PW@host`: no colon after the scheme.
    NoColon,
    /// `postgres:/user:PW@host`: one slash.
    OneSlash,
    /// `postgres:user:PW@host`: no slashes.
    Opaque,
    /// `host=… password = PW`: a libpq keyword string with spaces around `=`.
    KeywordSpaced,
    /// `host=… password='a PW'`: a quoted keyword value.
    KeywordQuoted,
    /// `?PassWord=PW`.
    MixedCase,
    /// `?SSLPASSWORD=PW`.
    SslUpper,
    /// `?sslpass%77ord=PW`: the name percent-encoded.
    SslEncoded,
}

impl Form {
    const ALL: [Form; 12] = [
        Form::UserPart,
        Form::PasswordParam,
        Form::SslPasswordParam,
        Form::MultiHost,
        Form::NoColon,
        Form::OneSlash,
        Form::Opaque,
        Form::KeywordSpaced,
        Form::KeywordQuoted,
        Form::MixedCase,
        Form::SslUpper,
        Form::SslEncoded,
    ];

    /// Whether a run with nothing else wrong logs in with the planted password.
    fn logs_in(self) -> bool {
        matches!(self, Form::UserPart | Form::PasswordParam | Form::MultiHost)
    }
}

/// The log filters a run is given in turn: none (the default, which silences sqlx's option
/// warnings), the one docs/operations.md documents, and everything.
const LOG_FILTERS: [Option<&str>; 3] = [None, Some("info,sqlx::query=debug"), Some("debug")];

/// What goes wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    Refused,
    UnknownHost,
    MissingDatabase,
    TlsRefused,
    Authentication,
    None,
}

fn url(form: Form, failure: Failure, port: u16, db: &str) -> String {
    let host = match failure {
        Failure::Refused => "127.0.0.1:1".to_owned(),
        Failure::UnknownHost => "no-such-host.invalid:5432".to_owned(),
        _ => format!("127.0.0.1:{port}"),
    };
    let db = if failure == Failure::MissingDatabase {
        "no_such_db"
    } else {
        db
    };
    let user = if failure == Failure::Authentication {
        "stranger"
    } else {
        "leaky"
    };
    let tls = if failure == Failure::TlsRefused {
        "sslmode=require"
    } else {
        "sslmode=disable"
    };
    match form {
        Form::UserPart => format!("postgres://{user}:{SECRET}@{host}/{db}?{tls}"),
        Form::PasswordParam => format!("postgres://{user}@{host}/{db}?password={SECRET}&{tls}"),
        Form::SslPasswordParam => {
            format!("postgres://{user}:{SECRET}@{host}/{db}?{tls}&sslpassword={SECRET}")
        }
        Form::MultiHost => format!(
            "postgres://{user}:{SECRET}@127.0.0.1:1,{host}/{db}?password={SECRET}&{tls}&target_session_attrs=read-write"
        ),
        Form::NoColon => format!("postgres//{user}:{SECRET}@{host}/{db}?{tls}"),
        Form::OneSlash => format!("postgres:/{user}:{SECRET}@{host}/{db}?{tls}"),
        Form::Opaque => format!("postgres:{user}:{SECRET}@{host}/{db}?{tls}"),
        Form::KeywordSpaced => {
            let (h, p) = host.split_once(':').unwrap();
            format!("host={h} port={p} user={user} password = {SECRET} dbname={db} {tls}")
        }
        Form::KeywordQuoted => {
            let (h, p) = host.split_once(':').unwrap();
            format!("host={h} port={p} user={user} password='a {SECRET}' dbname={db} {tls}")
        }
        Form::MixedCase => format!("postgres://{user}@{host}/{db}?PassWord={SECRET}&{tls}"),
        Form::SslUpper => {
            format!("postgres://{user}:{SECRET}@{host}/{db}?{tls}&SSLPASSWORD={SECRET}")
        }
        Form::SslEncoded => {
            format!("postgres://{user}:{SECRET}@{host}/{db}?{tls}&sslpass%77ord={SECRET}")
        }
    }
}

/// A server of its own (the shared one's other tests log in without passwords), migrated, with
/// the demo imported and password logins for everyone but the superuser the harness uses;
/// returns it, its admin store, its database's name and its port.
async fn password_server(
    base: &std::path::Path,
) -> (pg::PgCluster, package_executor::store::Store, String, u16) {
    let cluster = pg::PgCluster::start_in(base.join("pg"), "");
    let hba = cluster.data_dir().join("pg_hba.conf");
    std::fs::write(
        &hba,
        "local all all trust\nhost all postgres 127.0.0.1/32 trust\n\
         host all all 127.0.0.1/32 scram-sha-256\n",
    )
    .unwrap();
    let data = cluster.data_dir();
    cluster.run("pg_ctl", &["-D", data.to_str().unwrap(), "reload"]);
    let admin_url = cluster.url("postgres");
    let admin = db::connect(&admin_url).await;
    admin.migrate(true, None).await.unwrap();
    db::import(&admin, db::DEMO).await;
    let db_name = admin_url.rsplit('/').next().unwrap().to_owned();
    let port: u16 = admin_url
        .split(':')
        .nth(2)
        .and_then(|p| p.split('/').next())
        .unwrap()
        .parse()
        .unwrap();
    (cluster, admin, db_name, port)
}

/// What separates the two halves of each odd password: white space, quotes, escapes, URL
/// delimiters, non-ASCII. Each half is unique, so a leak of either, whole or cut, is seen.
const SEPARATORS: [&str; 13] = [
    " ", "\t", "\n", "\"", "'", "\\", "#", "&", "?", "/", "@", "é", "%",
];
const LEFT: &str = "Kq7m";
const RIGHT: &str = "Zp4w";

/// Where an odd password is given.
#[derive(Clone, Copy, Debug)]
enum Given {
    /// `postgres://user:PW@…` as typed.
    RawUserPart,
    /// `postgres://user:%XX…@…`.
    EncodedUserPart,
    /// `?password=PW` as typed.
    RawParam,
    /// `?password=%XX…`.
    EncodedParam,
    /// `PGPASSWORD`.
    Env,
    /// A password file (`PGPASSFILE`).
    Passfile,
}

fn encode_all(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// Passwords with a space, a tab, a newline, quotes, a backslash, `#`, `&`, `?`, `/`, `@`,
/// non-ASCII or `%` in them, given in every way a connection takes one, reach no output of any
/// command, in text or JSON logs, at the default level or at debug, whether the server is
/// reached (and the login works, or the role lacks a grant) or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_with_any_separator_reaches_no_output() {
    let base = tempfile::tempdir().unwrap();
    let (_cluster, admin, db_name, port) = password_server(base.path()).await;
    for (i, sep) in SEPARATORS.iter().enumerate() {
        let password = format!("{LEFT}{sep}{RIGHT}").replace('\'', "''");
        db::exec(
            &admin,
            &format!("CREATE ROLE odd_{i} LOGIN PASSWORD '{password}'"),
        )
        .await
        .unwrap();
        db::exec(&admin, &format!("GRANT ql3_package_executor TO odd_{i}"))
            .await
            .unwrap();
    }
    let fixture = package_executor_testkit::db::DEMO_PATH;
    let commands: [&[&str]; 7] = [
        &["migrate"],
        &["run"],
        &["publish", "demo-1"],
        &["current", "demo-1"],
        &["explain", "demo-1"],
        &["verify"],
        &["sources", "import", fixture],
    ];
    let givens = [
        Given::RawUserPart,
        Given::EncodedUserPart,
        Given::RawParam,
        Given::EncodedParam,
        Given::Env,
        Given::Passfile,
    ];
    // (format, filter) in turn.
    let logs = [
        ("text", None),
        ("json", None),
        ("text", Some("debug")),
        ("json", Some("debug")),
    ];
    let dir = tempfile::tempdir().unwrap();
    let limit = Arc::new(tokio::sync::Semaphore::new(6));
    let mut runs = tokio::task::JoinSet::new();
    let mut n = 0;
    for (i, sep) in SEPARATORS.iter().enumerate() {
        let password = format!("{LEFT}{sep}{RIGHT}");
        for given in givens {
            // A password file holds no line break.
            if matches!(given, Given::Passfile) && *sep == "\n" {
                continue;
            }
            for args in commands {
                n += 1;
                // Every other command meets a closed port; the rest reach the server.
                let host = if n % 2 == 0 {
                    "127.0.0.1:1".to_owned()
                } else {
                    format!("127.0.0.1:{port}")
                };
                let base = format!("postgres://odd_{i}");
                let tail = format!("@{host}/{db_name}?sslmode=disable");
                let url = match given {
                    Given::RawUserPart => format!("{base}:{password}{tail}"),
                    Given::EncodedUserPart => format!("{base}:{}{tail}", encode_all(&password)),
                    Given::RawParam => format!("{base}{tail}&password={password}"),
                    Given::EncodedParam => {
                        format!("{base}{tail}&password={}", encode_all(&password))
                    }
                    Given::Env | Given::Passfile => format!("{base}{tail}"),
                };
                let mut cmd = db::exe(&url, "1s");
                cmd.args(args)
                    .env_remove("PGPASSWORD")
                    .env_remove("PGPASSFILE");
                match given {
                    Given::Env => {
                        cmd.env("PGPASSWORD", &password);
                    }
                    Given::Passfile => {
                        let file = dir.path().join(format!("pgpass-{n}"));
                        let escaped = password.replace('\\', "\\\\").replace(':', "\\:");
                        std::fs::write(&file, format!("*:*:*:odd_{i}:{escaped}\n")).unwrap();
                        use std::os::unix::fs::PermissionsExt as _;
                        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
                            .unwrap();
                        cmd.env("PGPASSFILE", &file);
                    }
                    _ => {}
                }
                let (format, filter) = logs[n % logs.len()];
                cmd.env("PACKAGE_EXECUTOR_LOG_FORMAT", format);
                match filter {
                    Some(f) => cmd.env("PACKAGE_EXECUTOR_LOG", f),
                    None => cmd.env_remove("PACKAGE_EXECUTOR_LOG"),
                };
                let summary = dir.path().join(format!("summary-{n}.json"));
                if args[0] == "run" {
                    cmd.arg("--summary-file").arg(&summary);
                }
                let what = format!("{sep:?} {given:?} {args:?} {format} {filter:?} {host}");
                let limit = Arc::clone(&limit);
                runs.spawn(async move {
                    let _permit = limit.acquire_owned().await.unwrap();
                    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
                        .await
                        .unwrap_or_else(|_| panic!("{what}: no end within 120 s"))
                        .unwrap();
                    let file = std::fs::read_to_string(&summary).unwrap_or_default();
                    (what, out, file)
                });
            }
        }
    }
    let (mut checked, mut logged_in) = (0, 0);
    while let Some(done) = runs.join_next().await {
        let (what, out, file) = done.unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        for (name, text) in [
            ("stdout", &*stdout),
            ("stderr", &*stderr),
            ("the summary file", &*file),
        ] {
            for half in [LEFT, RIGHT] {
                assert!(
                    !text.contains(half),
                    "{what}: part of the password ({half}) is in {name}:\n{text}"
                );
            }
            checked += 1;
        }
        if what.contains("[\"run\"]") && out.status.code() == Some(0) {
            logged_in += 1;
        }
    }
    assert!(logged_in > 0, "no odd password ever logged in");
    println!(
        "secrets: {n} commands ({} separators, {} ways to give a password, {} commands, \
         text and JSON logs at two levels, a closed port and the server in turn), {checked} \
         outputs checked, {logged_in} logins with an odd password seen, 0 leaks",
        SEPARATORS.len(),
        givens.len(),
        commands.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_reaches_any_output() {
    let base = tempfile::tempdir().unwrap();
    let (_cluster, admin, db_name, port) = password_server(base.path()).await;
    for statement in [
        format!("CREATE ROLE leaky LOGIN PASSWORD '{SECRET}'"),
        "GRANT ql3_package_executor TO leaky".to_owned(),
        "CREATE ROLE stranger LOGIN PASSWORD 'another-one'".to_owned(),
    ] {
        db::exec(&admin, &statement).await.unwrap();
    }

    let (api_port, events) = sink(created).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{api_port}\n\
             users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: fake\n    user: u\n    namespace: ns\n\
             current-context: c\n"
        ),
    )
    .unwrap();

    let forms = Form::ALL;
    let failures = [
        Failure::Refused,
        Failure::UnknownHost,
        Failure::MissingDatabase,
        Failure::TlsRefused,
        Failure::Authentication,
        Failure::None,
    ];
    let commands: [&[&str]; 6] = [
        &["migrate"],
        &["run"],
        &["publish", "demo-1"],
        &["current", "demo-1"],
        &["explain", "demo-1"],
        &["verify"],
    ];
    let limit = Arc::new(tokio::sync::Semaphore::new(6));
    let mut runs = tokio::task::JoinSet::new();
    let mut n = 0;
    let mut run_commands = 0;
    for form in forms {
        for failure in failures {
            for args in commands {
                n += 1;
                let url = url(form, failure, port, &db_name);
                let summary = dir.path().join(format!("summary-{n}.json"));
                let metrics = dir.path().join(format!("metrics-{n}.prom"));
                let mut cmd = db::exe(&url, "2s");
                cmd.args(args);
                match LOG_FILTERS[n % LOG_FILTERS.len()] {
                    Some(filter) => cmd.env("PACKAGE_EXECUTOR_LOG", filter),
                    None => cmd.env_remove("PACKAGE_EXECUTOR_LOG"),
                };
                if args[0] == "run" {
                    run_commands += 1;
                    cmd.arg("--summary-file")
                        .arg(&summary)
                        .arg("--metrics-file")
                        .arg(&metrics)
                        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
                        .env("KUBECONFIG", &kubeconfig)
                        .env("PACKAGE_EXECUTOR_JOB_NAME", "job")
                        .env("PACKAGE_EXECUTOR_POD_NAMESPACE", "ns");
                }
                let limit = Arc::clone(&limit);
                let what = format!("{form:?} {failure:?} {args:?}");
                let logs_in = form.logs_in();
                runs.spawn(async move {
                    let _permit = limit.acquire_owned().await.unwrap();
                    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
                        .await
                        .unwrap_or_else(|_| panic!("{what}: no end within 120 s"))
                        .unwrap();
                    let files = [summary, metrics]
                        .iter()
                        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
                        .collect::<Vec<_>>();
                    (what, logs_in, out, files)
                });
            }
        }
    }
    let mut good_runs = 0;
    let mut checked = 0;
    while let Some(done) = runs.join_next().await {
        let (what, logs_in, out, files) = done.unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        for (name, text) in [
            ("stdout", &*stdout),
            ("stderr", &*stderr),
            ("the summary file", &files[0]),
            ("the metrics file", &files[1]),
        ] {
            assert!(
                !text.contains(SECRET),
                "{what}: the password is in {name}:\n{text}"
            );
            checked += 1;
        }
        if what.contains("None [\"run\"]") && logs_in {
            assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
            good_runs += 1;
        }
        if what.contains("[\"run\"]") {
            assert!(files[0].contains("\"exitCode\""), "{what}: a summary");
        }
    }
    assert_eq!(good_runs, 3, "the good runs logged in with the password");
    let events = events.lock().unwrap();
    assert_eq!(events.len(), run_commands, "every run recorded its Event");
    for e in events.iter().map(|e| &e.body) {
        assert!(!e.contains(SECRET), "the password is in an Event: {e}");
    }
    println!(
        "secrets: {n} commands ({} forms, {} failures, {} commands, log filters in turn), \
         {checked} outputs and {} Events checked, 0 leaks",
        forms.len(),
        failures.len(),
        commands.len(),
        events.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pushgateway_password_is_sent_not_shown() {
    use base64::Engine as _;
    let url = pg::fresh_db().await;
    let store = db::connect(&url).await;
    db::import(&store, db::DEMO).await;
    store.close().await;
    let (port, heads) = sink(accepted).await;
    let push_url = format!("http://pusher:{SECRET}@127.0.0.1:{port}");
    let basic = format!(
        "authorization: basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("pusher:{SECRET}"))
    )
    .to_ascii_lowercase();
    let mut outputs = 0;
    for (i, filter) in LOG_FILTERS.iter().enumerate() {
        // Given as a flag, then in the environment.
        let mut cmd = db::exe(&url, "5s");
        cmd.arg("run");
        if i % 2 == 0 {
            cmd.arg("--metrics-push-url").arg(&push_url);
        } else {
            cmd.env("PACKAGE_EXECUTOR_METRICS_PUSH_URL", &push_url);
        }
        match filter {
            Some(filter) => cmd.env("PACKAGE_EXECUTOR_LOG", filter),
            None => cmd.env_remove("PACKAGE_EXECUTOR_LOG"),
        };
        let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
            .await
            .expect("the run ends")
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{filter:?}: {stderr}");
        for text in [&*String::from_utf8_lossy(&out.stdout), &*stderr] {
            assert!(
                !text.contains(SECRET),
                "{filter:?}: the password shown:\n{text}"
            );
            outputs += 1;
        }
    }
    let heads: Vec<String> = heads
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.head.clone())
        .collect();
    assert!(
        heads.len() >= LOG_FILTERS.len(),
        "every run pushed: {heads:?}"
    );
    for head in &heads {
        assert!(
            head.to_ascii_lowercase().contains(&basic),
            "the user part is sent as basic authentication: {head}"
        );
    }
    for args in [&["run", "--help"][..], &["help", "run"], &["run", "-h"]] {
        let mut cmd = db::exe(&url, "5s");
        cmd.args(args)
            .env("PACKAGE_EXECUTOR_METRICS_PUSH_URL", &push_url);
        let out = cmd.output().await.unwrap();
        assert_eq!(out.status.code(), Some(0));
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("--metrics-push-url"), "{help}");
        assert!(
            !help.contains(SECRET),
            "{args:?} shows the password:\n{help}"
        );
        outputs += 1;
    }
    println!(
        "secrets: {} pushes with basic authentication, {outputs} outputs checked, 0 leaks",
        heads.len()
    );
}
