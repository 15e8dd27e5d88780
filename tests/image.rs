//! The container image, run with podman: `--version`, `--help`, `demo` in a writable scratch
//! directory, then the chart's own pods as `helm template` renders them (migrate, a recovery
//! Job's two Indexed shards from the suspended template CronJob, the sweep), each container with
//! its command, arguments,
//! environment (the rendered Secret's values filled in, the downward API's too), TLS mounts,
//! user, read-only root filesystem and no capabilities, against a PostgreSQL on the host that
//! takes only `verify-full` TLS with client-certificate logins.
//!
//! It needs the image built from the real Dockerfile (`scripts/image-build.sh`, which
//! `scripts/test.sh` runs) and names it in `PE_IMAGE`; the test command runs it with
//! `--ignored` so that a plain `cargo test` does not build images. Without `PE_IMAGE` it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use package_executor_testkit::db;
use package_executor_testkit::helm;
use package_executor_testkit::pg;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use package_executor::store::{ConnectOptions, Store};
use package_executor_testkit::certs::{ca, leaf};
use pg::PgCluster;
use serde_json::Value;

/// The image under test, as `scripts/image-build.sh` tagged it.
fn image() -> String {
    std::env::var("PE_IMAGE").unwrap_or_else(|_| {
        panic!("PE_IMAGE is not set: build the image with scripts/image-build.sh (scripts/test.sh does)")
    })
}

/// `podman` with the test's own configuration (`scripts/image-env.sh` writes it).
fn podman() -> tokio::process::Command {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/containers");
    let mut c = tokio::process::Command::new("podman");
    c.env("CONTAINERS_CONF", tools.join("containers.conf"))
        .env("CONTAINERS_STORAGE_CONF", tools.join("storage.conf"))
        .kill_on_drop(true);
    c
}

async fn output(mut cmd: tokio::process::Command, what: &str) -> Output {
    tokio::time::timeout(Duration::from_secs(300), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{what}: no end within 300 s"))
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A scratch directory the image's user (65532) may write.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// `podman run` of the image as the chart runs it (read-only root, no capabilities), with
/// `flags` before the image and `args` after it.
fn in_image(image: &str, flags: &[String], args: &[&str]) -> tokio::process::Command {
    let mut cmd = podman();
    cmd.args(["run", "--rm", "--read-only", "--cap-drop=ALL"])
        .args(flags)
        .arg(image)
        .args(args);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the image: scripts/test.sh builds it and runs this with --ignored"]
async fn the_image_runs_its_commands() {
    let image = image();
    let out = output(in_image(&image, &[], &["--version"]), "--version").await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let version = text(&out.stdout);
    assert_eq!(
        version.trim(),
        format!("package-executor {}", env!("CARGO_PKG_VERSION"))
    );
    println!("in the image: {}", version.trim());

    let mut cmd = podman();
    cmd.args([
        "image",
        "inspect",
        "--format",
        "{{.Config.User}} {{.Size}}",
        &image,
    ]);
    let out = output(cmd, "inspect").await;
    let inspected = text(&out.stdout);
    assert!(inspected.starts_with("65532:65532 "), "{inspected}");
    println!("image user and size (bytes): {}", inspected.trim());

    let out = output(in_image(&image, &[], &["--help"]), "--help").await;
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("Usage: package-executor"));

    // `demo` in a writable scratch directory: migrate, import the bundled fixture, run.
    let dir = scratch();
    let flags = [
        "--workdir=/work".to_owned(),
        format!("--volume={}:/work", dir.path().display()),
    ];
    let out = output(in_image(&image, &flags, &["demo"]), "demo").await;
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let said = text(&out.stdout);
    assert!(said.contains("published"), "{said}");
    assert!(dir.path().join("package-executor.db").exists());
}

/// A PostgreSQL that speaks only TLS on TCP, and lets the chart's logins in by their client
/// certificates alone (`hostssl … cert`), with the files the chart mounts.
struct Database {
    cluster: PgCluster,
    /// Volume name → the files in it (key → content), as the chart's Secrets would hold them.
    secrets: BTreeMap<String, BTreeMap<String, String>>,
    _dir: tempfile::TempDir,
}

impl Database {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        if pg::is_root() {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let cluster = PgCluster::start_in(dir.path().join("pg"), "");
        // Over plaintext while it is still trusted: the group roles (made by migrating a scratch
        // database with --create-roles), the two logins, and an empty `app` database that the
        // chart's migrate pod migrates as the owner's login.
        let admin = cluster.url("postgres");
        let scratch = cluster.url("roles");
        pg::block_on(async move {
            let store = Store::connect(&ConnectOptions::new(admin.parse().unwrap()))
                .await
                .unwrap();
            let pool = store.pg_pool().unwrap();
            for sql in ["CREATE DATABASE roles", "CREATE DATABASE app"] {
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .execute(&pool)
                    .await
                    .unwrap();
            }
            store.close().await;
            let store = Store::connect(&ConnectOptions::new(scratch.parse().unwrap()))
                .await
                .unwrap();
            store.migrate(true, None).await.unwrap();
            let pool = store.pg_pool().unwrap();
            for sql in [
                "CREATE ROLE pe_migrator LOGIN IN ROLE ql3_owner",
                "CREATE ROLE pe_executor LOGIN IN ROLE ql3_package_executor",
                "GRANT CREATE ON DATABASE app TO ql3_owner",
            ] {
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .execute(&pool)
                    .await
                    .unwrap();
            }
            store.close().await;
        });
        cluster.stop("fast");

        let authority = ca("package-executor image test CA");
        let (server_crt, server_key) = leaf(&authority, "localhost", &["localhost", "127.0.0.1"]);
        let (mig_crt, mig_key) = leaf(&authority, "pe_migrator", &[]);
        let (exec_crt, exec_key) = leaf(&authority, "pe_executor", &[]);
        cluster.enable_tls(&server_crt, &server_key, Some(&authority.pem()));
        cluster.write_data_file(
            "pg_hba.conf",
            "local all all trust\nhostssl all postgres 127.0.0.0/8 trust\n\
             hostssl all all 127.0.0.0/8 cert\n",
            0o600,
        );
        cluster.start();

        let mut secrets = BTreeMap::new();
        let files = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>()
        };
        secrets.insert("pe-ca".to_owned(), files(&[("ca.crt", &authority.pem())]));
        secrets.insert(
            "pe-migrate-cert".to_owned(),
            files(&[("tls.crt", &mig_crt), ("tls.key", &mig_key)]),
        );
        secrets.insert(
            "pe-executor-cert".to_owned(),
            files(&[("tls.crt", &exec_crt), ("tls.key", &exec_key)]),
        );
        Self {
            cluster,
            secrets,
            _dir: dir,
        }
    }

    /// A URL of a login on `localhost` (the name the server's certificate carries).
    fn url(&self, user: &str) -> String {
        format!("postgres://{user}@localhost:{}/app", self.cluster.port)
    }

    /// The superuser, over TLS, for what the test itself reads and writes.
    async fn admin(&self) -> Store {
        let url = format!(
            "postgres://postgres@127.0.0.1:{}/app?sslmode=require",
            self.cluster.port
        );
        db::connect(&url).await
    }
}

/// The chart rendered as the test installs it: the local image, the Secret created from the two
/// URLs, `verify-full` with the CA and a client certificate per job, two shards, the sweep.
fn render(db: &Database, image: &str) -> Vec<Value> {
    let (repository, tag) = image.rsplit_once(':').unwrap();
    let migrate = format!("database.migrateUrl={}", db.url("pe_migrator"));
    let execute = format!("database.executorUrl={}", db.url("pe_executor"));
    let repository = format!("image.repository={repository}");
    let tag = format!("image.tag={tag}");
    helm::objects(&helm::template(&[
        "--namespace",
        "pe",
        "--set",
        &repository,
        "--set",
        &tag,
        "--set",
        "database.create=true",
        "--set",
        &migrate,
        "--set",
        &execute,
        "--set",
        "database.tls.sslmode=verify-full",
        "--set",
        "database.tls.ca.secret=pe-ca",
        "--set",
        "database.tls.clientCert.migrateSecret=pe-migrate-cert",
        "--set",
        "database.tls.clientCert.executorSecret=pe-executor-cert",
        "--set",
        "run.shards=2",
        "--set",
        "sweep.enabled=true",
        // A timeout set through the chart, parsed by the binary in every pod that connects.
        "--set",
        "database.timeouts.connect=45s",
    ]))
}

/// The rendered object of `kind` whose name ends with `suffix`.
fn object<'a>(objects: &'a [Value], kind: &str, suffix: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(suffix))
        })
        .unwrap_or_else(|| panic!("no {kind} *{suffix} in the rendered chart"))
}

/// One container of a rendered pod template, run as the kubelet would run it here: its
/// environment resolved, its Secret volumes written out, the pod's and the container's security
/// settings translated to podman's flags. Returns the output and the termination message.
async fn run_pod(
    objects: &[Value],
    db: &Database,
    job: &str,
    pod: &Value,
    index: Option<u32>,
) -> (Output, String) {
    let spec = &pod["spec"];
    let container = &spec["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(spec["securityContext"]["runAsUser"], 65532, "{job}");
    assert_eq!(security["readOnlyRootFilesystem"], true, "{job}");
    assert_eq!(security["allowPrivilegeEscalation"], false, "{job}");
    assert_eq!(security["capabilities"]["drop"][0], "ALL", "{job}");
    let user = format!(
        "{}:{}",
        spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]
    );
    let fs_group = spec["securityContext"]["fsGroup"].as_u64().unwrap();
    let dir = scratch();
    let mut flags: Vec<String> = Vec::new();
    // A pod always has these; the Event has no token to use here, so it is logged and skipped.
    flags.push("--env=KUBERNETES_SERVICE_HOST=127.0.0.1".into());
    flags.push("--env=KUBERNETES_SERVICE_PORT=1".into());
    if let Some(i) = index {
        flags.push(format!("--env=JOB_COMPLETION_INDEX={i}"));
    }
    let secret = object(objects, "Secret", "-db");
    for e in container["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap();
        let value = if let Some(v) = e["value"].as_str() {
            v.to_owned()
        } else if let Some(r) = e["valueFrom"]["secretKeyRef"].as_object() {
            assert_eq!(r["name"], secret["metadata"]["name"], "{job}: {name}");
            secret["stringData"][r["key"].as_str().unwrap()]
                .as_str()
                .unwrap_or_else(|| panic!("{job}: {name}: no such key in the Secret"))
                .to_owned()
        } else {
            match e["valueFrom"]["fieldRef"]["fieldPath"].as_str().unwrap() {
                "metadata.namespace" => "pe".to_owned(),
                "metadata.labels['batch.kubernetes.io/job-name']" => job.to_owned(),
                other => panic!("{job}: {name}: downward API field {other} not known here"),
            }
        };
        flags.push(format!("--env={name}={value}"));
    }
    // Secret volumes: each item written as the kubelet projects it (owner root, group fsGroup,
    // the mode given, group-readable through fsGroup).
    for m in container["volumeMounts"].as_array().unwrap() {
        let name = m["name"].as_str().unwrap();
        let volume = spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap();
        let source = &volume["secret"];
        let files = &db.secrets[source["secretName"].as_str().unwrap()];
        let mode = source["defaultMode"].as_u64().unwrap_or(0o644) as u32 | 0o040;
        let at = dir.path().join(name);
        std::fs::create_dir(&at).unwrap();
        for item in source["items"].as_array().unwrap() {
            let path = at.join(item["path"].as_str().unwrap());
            std::fs::write(&path, &files[item["key"].as_str().unwrap()]).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            std::os::unix::fs::chown(&path, Some(0), Some(fs_group as u32)).unwrap();
        }
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o755)).unwrap();
        flags.push(format!(
            "--volume={}:{}:ro",
            at.display(),
            m["mountPath"].as_str().unwrap()
        ));
    }
    // The termination message file, writable by the container's user.
    let message = dir.path().join("termination-log");
    std::fs::write(&message, "").unwrap();
    std::fs::set_permissions(&message, std::fs::Permissions::from_mode(0o666)).unwrap();
    let path = container["terminationMessagePath"]
        .as_str()
        .unwrap_or("/dev/termination-log");
    flags.push(format!("--volume={}:{path}", message.display()));
    flags.extend([
        "--network=host".to_owned(),
        "--security-opt=no-new-privileges".to_owned(),
        format!("--user={user}"),
    ]);
    if let Some(command) = container["command"].as_array() {
        flags.push(format!("--entrypoint={}", command[0].as_str().unwrap()));
    }
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let cmd = in_image(container["image"].as_str().unwrap(), &flags, &args);
    let out = output(cmd, job).await;
    let message = std::fs::read_to_string(&message).unwrap();
    println!(
        "pod of {job}{}: exit {:?}, termination message {message}",
        index.map_or_else(String::new, |i| format!(" (index {i})")),
        out.status.code()
    );
    (out, message)
}

/// A run's termination message: the run summary, for this shard.
fn summary(message: &str, job: &str, index: u32) -> Value {
    let s: Value = serde_json::from_str(message).unwrap_or_else(|e| {
        panic!("{job} shard {index}: the termination message is not the summary ({e}): {message:?}")
    });
    assert_eq!(s["schema"], "package-executor/run-summary@v1");
    assert_eq!(s["shard"]["index"], index);
    assert_eq!(s["shard"]["count"], 2);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the image: scripts/test.sh builds it and runs this with --ignored"]
async fn the_charts_pods_run_in_the_image() {
    let image = image();
    let db = Database::start();
    let objects = render(&db, &image);

    // Migrate, as the owner's login, by its client certificate.
    let migrate = object(&objects, "Job", "-migrate");
    let (out, _) = run_pod(
        &objects,
        &db,
        "pe-package-executor-migrate",
        &migrate["spec"]["template"],
        None,
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "migrate: {}", text(&out.stderr));

    // The control plane publishes: the demo fixture.
    let admin = db.admin().await;
    db::import(&admin, db::DEMO).await;

    // A recovery Job, as `trigger --from-cronjob` makes it of the chart's suspended template:
    // two Indexed shards side by side.
    let recovery = object(&objects, "CronJob", "-recovery");
    let job = &recovery["spec"]["jobTemplate"]["spec"];
    assert_eq!(job["completionMode"], "Indexed");
    let pod = &job["template"];
    let (a, b) = tokio::join!(
        run_pod(
            &objects,
            &db,
            "pe-package-executor-recovery-1",
            pod,
            Some(0)
        ),
        run_pod(
            &objects,
            &db,
            "pe-package-executor-recovery-1",
            pod,
            Some(1)
        ),
    );
    let mut published = 0;
    for (i, (out, message)) in [a, b].into_iter().enumerate() {
        let i = i as u32;
        assert_eq!(
            out.status.code(),
            Some(0),
            "recovery shard {i}: {}",
            text(&out.stderr)
        );
        let s = summary(&message, "recovery", i);
        published += s["published"].as_u64().unwrap();
        // JSON logs in a pod, and the Event skipped without a token, not fatal.
        assert!(
            text(&out.stderr).contains("\"run summary\""),
            "{}",
            text(&out.stderr)
        );
    }
    assert_eq!(
        published, 3,
        "demo-1, demo-2 and demo-empty, across the shards"
    );
    for project in ["demo-1", "demo-2", "demo-empty"] {
        assert!(
            db::current_digest(&admin, project).await.is_some(),
            "{project}"
        );
    }
    assert_eq!(db::current_digest(&admin, "demo-rejected").await, None);

    // The sweep (--full-scan), from the CronJob's job template: nothing left to publish.
    let sweep = object(&objects, "CronJob", "-sweep");
    let pod = &sweep["spec"]["jobTemplate"]["spec"]["template"];
    assert!(
        pod["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--full-scan"),
        "the sweep runs a full scan"
    );
    for i in 0..2 {
        let (out, message) =
            run_pod(&objects, &db, "pe-package-executor-sweep-1", pod, Some(i)).await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "sweep shard {i}: {}",
            text(&out.stderr)
        );
        let s = summary(&message, "sweep", i);
        assert_eq!(s["published"], 0, "{s}");
    }
    admin.close().await;
}
