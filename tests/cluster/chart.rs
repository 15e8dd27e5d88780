//! The chart as a platform team installs it: with its development PostgreSQL StatefulSet and
//! `migration.createRoles`, the migration hook, the control plane's import of the demo fixture,
//! a publication (`helm upgrade`) whose trigger hook creates the recovery Job from the chart's
//! template, that Job's pods and what an operator reads of them (termination messages, the
//! `RunSummary` Event), and the consumer's view afterwards.
//!
//! The images are the product's (`PE_IMAGE`, the image tier's build) and a PostgreSQL with the
//! official image's interface (`PE_POSTGRES_IMAGE`, scripts/cluster/postgres-image.sh), both
//! imported into the cluster by `scripts/test.sh kind`.

use package_executor_testkit::cluster::{self, Namespace};
use package_executor_testkit::helm;
use serde_json::Value;

pub(crate) const RELEASE: &str = "pe";

/// An image the tier built and imported, as `REPOSITORY:TAG`, from the environment variable
/// `scripts/test.sh kind` sets.
pub(crate) fn env_image(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| panic!("{var} is not set: scripts/test.sh kind sets it"))
}

/// The product's image (`PE_IMAGE`).
pub(crate) fn image() -> String {
    env_image("PE_IMAGE")
}

pub(crate) fn postgres_image() -> String {
    env_image("PE_POSTGRES_IMAGE")
}

/// The `--set` values that make IMAGE (`REPOSITORY:TAG`) the release's.
pub(crate) fn image_values(image: &str) -> Vec<String> {
    let (repository, tag) = image.rsplit_once(':').expect("an image is REPOSITORY:TAG");
    vec![
        "--set".to_owned(),
        format!("image.repository={repository}"),
        "--set".to_owned(),
        format!("image.tag={tag}"),
    ]
}

/// `helm ARGS -n NAMESPACE`, as it ended.
pub(crate) fn helm_output<S: AsRef<std::ffi::OsStr>>(
    ns: &Namespace,
    args: &[S],
) -> std::process::Output {
    std::process::Command::new(helm::bin())
        .args(args)
        .args(["--namespace", &ns.name])
        .current_dir(helm::root())
        .output()
        .expect("helm")
}

/// `helm ARGS -n NAMESPACE`, which must succeed.
pub(crate) fn helm(ns: &Namespace, args: &[&str]) -> String {
    let out = helm_output(ns, args);
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        ns.describe()
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The values every install here uses, and EXTRA.
pub(crate) fn values(extra: &[&str]) -> Vec<String> {
    let mut v = image_values(&image());
    v.extend(
        [
            "image.pullPolicy=Never".to_owned(),
            "postgresql.enabled=true".to_owned(),
            format!("postgresql.image={}", postgres_image()),
            "postgresql.storage=64Mi".to_owned(),
            "migration.createRoles=true".to_owned(),
            "database.existingSecret=".to_owned(),
        ]
        .into_iter()
        .flat_map(|s| ["--set".to_owned(), s]),
    );
    v.extend(extra.iter().map(|s| (*s).to_owned()));
    v
}

pub(crate) fn upgrade(ns: &Namespace, extra: &[&str]) {
    let mut args: Vec<String> = ["upgrade", "--install", RELEASE, "charts/package-executor"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    args.extend(values(extra));
    args.extend(["--wait", "--timeout", "5m"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    helm(ns, &args);
}

/// The database Secret the chart made (its `migrate-url` and `executor-url`).
pub(crate) fn db_secret(ns: &Namespace) -> String {
    let names = ns.kubectl(&[
        "get",
        "secret",
        "-l",
        &format!("app.kubernetes.io/instance={RELEASE}"),
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    names
        .split_whitespace()
        .find(|n| n.ends_with("-db"))
        .unwrap_or_else(|| panic!("no database Secret among {names}"))
        .to_owned()
}

/// The labels the development database's NetworkPolicy admits (the chart's `pe.selector`): a
/// pod of ours that talks to the database carries them, as the chart's own pods do.
pub(crate) fn executor_labels() -> Value {
    serde_json::json!({
        "app.kubernetes.io/name": "package-executor",
        "app.kubernetes.io/instance": RELEASE,
    })
}

/// Runs the product's image once in a pod (restricted, read-only root, the executor's labels)
/// with ARGS and `DATABASE_URL` from the Secret's KEY; its exit code and log.
pub(crate) fn run_once(ns: &Namespace, name: &str, key: &str, args: &[&str]) -> (i64, String) {
    run_once_with(ns, &image(), name, key, args)
}

/// [`run_once`] with another image of the product (the build one migration ahead, say).
pub(crate) fn run_once_with(
    ns: &Namespace,
    image: &str,
    name: &str,
    key: &str,
    args: &[&str],
) -> (i64, String) {
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": executor_labels()},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"}
            },
            "containers": [{
                "name": "main",
                "image": image,
                "imagePullPolicy": "Never",
                "args": args,
                // Limits too: the matrix's namespace has a ResourceQuota on CPU limits.
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi"},
                    "limits": {"cpu": "1", "memory": "256Mi"}
                },
                "env": [{"name": "DATABASE_URL", "valueFrom": {"secretKeyRef": {
                    "name": db_secret(ns), "key": key}}}],
                "securityContext": {
                    "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}
                }
            }]
        }
    });
    run_pod(ns, &pod, "180s")
}

/// Creates POD (one container) in NS, waits at most WITHIN for its container to end, and
/// deletes it: the container's exit code and log.
pub(crate) fn run_pod(ns: &Namespace, pod: &Value, within: &str) -> (i64, String) {
    ns.apply(&pod.to_string());
    let pod_ref = format!("pod/{}", pod["metadata"]["name"].as_str().unwrap());
    ns.wait(
        &pod_ref,
        "jsonpath={.status.containerStatuses[0].state.terminated.reason}",
        within,
    );
    let code = ns.kubectl(&[
        "get",
        &pod_ref,
        "-o",
        "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}",
    ]);
    let log = ns.kubectl(&["logs", &pod_ref]);
    ns.kubectl(&["delete", &pod_ref, "--wait=false"]);
    (code.trim().parse().unwrap(), log)
}

/// The control plane's change to a project's packages: `@acme/slack` leaves demo-2, whose
/// current snapshot is then no longer current.
pub(crate) fn remove_a_package_of_demo_2(ns: &Namespace) {
    let (code, log) = run_once(
        ns,
        "remove-slack",
        "migrate-url",
        &[
            "sources",
            "remove",
            "--project",
            "demo-2",
            "--package",
            "@acme/slack",
        ],
    );
    assert_eq!(code, 0, "{log}");
}

/// The newest recovery Job of the release.
pub(crate) fn newest_recovery_job(ns: &Namespace) -> String {
    ns.kubectl(&[
        "get",
        "jobs",
        "-l",
        "app.kubernetes.io/component=snapshot-recovery",
        "--sort-by=.metadata.creationTimestamp",
        "-o",
        "jsonpath={.items[-1:].metadata.name}",
    ])
}

/// Installs the release with EXTRA values and imports the demo fixture as the control plane
/// would (with the owner's login), once the install's own recovery Job (nothing to do yet)
/// ended, so that the next Job is the one that builds.
pub(crate) fn install_and_import(ns: &Namespace, extra: &[&str]) {
    let mut install = vec!["--set", "publicationId=e2e-install"];
    install.extend_from_slice(extra);
    upgrade(ns, &install);
    let first = newest_recovery_job(ns);
    assert!(!first.is_empty(), "the install created no recovery Job");
    ns.wait(&format!("job/{first}"), "condition=Complete", "300s");
    let (code, log) = run_once(
        ns,
        "import-demo",
        "migrate-url",
        &[
            "sources",
            "import",
            "/usr/share/package-executor/demo-fixture.json",
        ],
    );
    assert_eq!(code, 0, "{log}");
}

/// Installs the release with EXTRA values, imports the demo fixture, and publishes (`helm upgrade`): the recovery Job the upgrade's hook created, once it
/// completed, and the run summaries of its pods (their termination messages).
pub(crate) fn install_import_publish(ns: &Namespace, extra: &[&str]) -> (String, Vec<Value>) {
    install_and_import(ns, extra);

    // A publication: the upgrade's hook creates the recovery Job from the template.
    let before = newest_recovery_job(ns);
    let mut publish = vec!["--set", "publicationId=e2e-publish"];
    publish.extend_from_slice(extra);
    upgrade(ns, &publish);
    let job = newest_recovery_job(ns);
    assert_ne!(job, before, "the upgrade created no recovery Job");
    let annotation = ns.kubectl(&[
        "get",
        &format!("job/{job}"),
        "-o",
        "jsonpath={.metadata.annotations.qinglong\\.io/publication-id}",
    ]);
    assert_eq!(annotation, "e2e-publish");
    ns.wait(&format!("job/{job}"), "condition=Complete", "300s");
    let summaries = summaries_of(ns, &job);
    for summary in &summaries {
        assert_eq!(summary["exitCode"], 0, "{summary}");
    }
    (job, summaries)
}

/// The run summaries of a Job's pods: each one's termination message.
pub(crate) fn summaries_of(ns: &Namespace, job: &str) -> Vec<Value> {
    let pods = cluster::get_json(&["-n", &ns.name, "pods", "-l", &format!("job-name={job}")]);
    let summaries: Vec<Value> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pod| {
            let message = pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
                .as_str()
                .unwrap_or_else(|| panic!("no termination message: {pod}"));
            let summary: Value = serde_json::from_str(message).unwrap();
            assert_eq!(
                summary["schema"], "package-executor/run-summary@v1",
                "{summary}"
            );
            summary
        })
        .collect();
    assert!(!summaries.is_empty(), "no pods of {job}");
    summaries
}

/// What the consumer reads: every demo project but the rejected one is current, through the
/// executor's login; and every stored snapshot verifies.
pub(crate) fn assert_converged(ns: &Namespace) {
    assert_converged_with(ns, &image());
}

/// [`assert_converged`], asked with another image of the product.
pub(crate) fn assert_converged_with(ns: &Namespace, image: &str) {
    for (project, want) in [
        ("demo-1", 0),
        ("demo-2", 0),
        ("demo-empty", 0),
        ("demo-rejected", 4),
    ] {
        let (code, log) = run_once_with(
            ns,
            image,
            &format!("current-{project}"),
            "executor-url",
            &["current", project, "--json"],
        );
        assert_eq!(code, want, "current {project}: {log}");
    }
    let (code, log) = run_once_with(ns, image, "verify", "migrate-url", &["verify"]);
    assert_eq!(code, 0, "verify: {log}");
}

pub(crate) fn published(summaries: &[Value]) -> u64 {
    summaries
        .iter()
        .map(|s| s["published"].as_u64().unwrap())
        .sum()
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn the_chart_installs_publishes_and_every_project_converges() {
    let ns = Namespace::new("e2e");
    let (job, summaries) = install_import_publish(&ns, &[]);
    assert_eq!(summaries.len(), 1, "{summaries:?}");
    assert_eq!(published(&summaries), 3, "{summaries:?}");

    // The Job carries the run's Event.
    let events = ns.kubectl(&[
        "get",
        "events.events.k8s.io",
        "--field-selector",
        &format!("regarding.name={job},reason=RunSummary"),
        "-o",
        "jsonpath={.items[*].note}",
    ]);
    assert!(
        events.contains("package-executor/run-summary@v1"),
        "{events}"
    );
    assert_converged(&ns);
    network_policy_admits_the_executor_to_the_database_and_nothing_else(&ns);
    the_notes_explain_command_answers(&ns);
    helm_test_passes(&ns);
}

/// `helm test`: the release's test pod reaches the database as the executor, through the
/// NetworkPolicy, and finds the schema this image runs on.
fn helm_test_passes(ns: &Namespace) {
    let out = helm(ns, &["test", RELEASE, "--timeout", "5m"]);
    assert!(out.contains("-test"), "{out}");
    assert!(out.contains("Succeeded"), "{out}");
}

/// The NOTES' "why is a project not current?" command, as a person pastes it (PROJECT filled
/// in), through the NetworkPolicy to the database: it names the rejected project's reason.
/// The answer is read from the ended pod's log: an attach (`run --rm -i`) lost whatever the
/// pod printed before it connected, and once left this test with nothing but kubectl's prompt.
fn the_notes_explain_command_answers(ns: &Namespace) {
    let notes = helm(ns, &["get", "notes", RELEASE]);
    let lines: Vec<&str> = notes.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains(" run explain "))
        .unwrap_or_else(|| panic!("no explain command in the NOTES:\n{notes}"));
    let mut command = String::new();
    for line in &lines[start..] {
        let line = line.trim();
        match line.strip_suffix('\\') {
            Some(part) => command.push_str(part),
            None => {
                command.push_str(line);
                break;
            }
        }
    }
    let command = command.replace("PROJECT", "demo-rejected");
    let out = std::process::Command::new("timeout")
        .args(["420", "sh", "-c", &command])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{command}\n{text}\n{}", ns.describe());
    for answer in ["project demo-rejected", "rejected       forbidden-field"] {
        assert!(
            text.contains(answer),
            "{answer:?} not in:\n{command}\n{text}"
        );
    }
}

/// NetworkPolicy is enforced (kube-router's controller, scripts/kind/network-policy.yaml), both
/// ways: the development database admits the executor's pods only (its ingress policy), and
/// the executor's pods reach only what their egress policy lists (the cluster DNS's pods, the
/// database's and the API server, which the run above used): not the kubelet's port, and not
/// another address on the database's port or a DNS port (a decoy that listens on 5432 and
/// 5353). The same connections from a pod with the executor's labels and from one without
/// give opposite results; without the enforcer (`KIND_ADDONS` without it) all connect and this
/// fails.
fn network_policy_admits_the_executor_to_the_database_and_nothing_else(ns: &Namespace) {
    let service = named(ns, "service", "postgresql");
    let database = ns.kubectl(&[
        "get",
        "service",
        &service,
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let node = cluster::kubectl(&[
        "get",
        "nodes",
        "-o",
        "jsonpath={.items[0].status.addresses[?(@.type==\"InternalIP\")].address}",
    ]);
    let decoy = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "decoy", "labels": {"app": "decoy"}},
        "spec": cluster::busybox_pod_spec(
            "mkdir -p /tmp/www && httpd -p 5432 -h /tmp/www && exec httpd -f -p 5353 -h /tmp/www"
        ),
    });
    ns.apply(&decoy.to_string());
    ns.wait("pod/decoy", "condition=Ready", "120s");
    let decoy = ns.kubectl(&["get", "pod", "decoy", "-o", "jsonpath={.status.podIP}"]);
    // The enforcer puts a new pod's rules in force at its first sync after the pod appears,
    // which can come after the pod's first connection (seen: the executor's probe refused by
    // the database and let through to the kubelet, as if it had no labels). So each probe tries
    // the connections again, a second apart and at most 30 times, until they give what its
    // labels call for, and prints the last results: with the enforcer off they never do.
    let probe = |expected: [u8; 4]| {
        let [d, k, o, n] = expected;
        format!(
            "for try in $(seq 30); do \
               nc -w 5 {database} 5432 </dev/null; d=$?; \
               nc -w 5 {node} 10250 </dev/null; k=$?; \
               nc -w 5 {decoy} 5432 </dev/null; o=$?; \
               nc -w 5 {decoy} 5353 </dev/null; n=$?; \
               [ $d = {d} ] && [ $k = {k} ] && [ $o = {o} ] && [ $n = {n} ] && break; sleep 1; \
             done; echo TRIES=$try; echo DATABASE=$d; echo KUBELET=$k; echo OTHER_DATABASE=$o; \
             echo OTHER_DNS=$n"
        )
    };
    for (name, labels, expected) in [
        ("probe-executor", executor_labels(), [0, 1, 1, 1]),
        ("probe-unlabelled", serde_json::json!({}), [1, 0, 0, 0]),
    ] {
        let pod = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": cluster::busybox_pod_spec(&probe(expected)),
        });
        ns.apply(&pod.to_string());
        ns.wait(
            &format!("pod/{name}"),
            "jsonpath={.status.phase}=Succeeded",
            "600s",
        );
        let log = ns.kubectl(&["logs", name]);
        for (what, exit) in ["DATABASE", "KUBELET", "OTHER_DATABASE", "OTHER_DNS"]
            .into_iter()
            .zip(expected)
        {
            let line = format!("{what}={exit}");
            assert!(
                log.lines().any(|l| l == line),
                "{name}: expected {line} (database {service} at {database}:5432, kubelet at \
                 {node}:10250, a decoy at {decoy}:5432 and :5353): {log}"
            );
        }
    }
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn three_shards_run_as_an_indexed_job_and_each_project_is_published_once() {
    let ns = Namespace::new("e2e-shards");
    let (job, summaries) = install_import_publish(&ns, &["--set", "run.shards=3"]);
    let mode = ns.kubectl(&[
        "get",
        &format!("job/{job}"),
        "-o",
        "jsonpath={.spec.completionMode}",
    ]);
    assert_eq!(mode, "Indexed");
    let mut shards: Vec<String> = summaries.iter().map(|s| s["shard"].to_string()).collect();
    shards.sort();
    assert_eq!(shards.len(), 3, "every shard's pod ran: {summaries:?}");
    shards.dedup();
    assert_eq!(shards.len(), 3, "three distinct shards: {summaries:?}");
    assert_eq!(published(&summaries), 3, "each project once: {summaries:?}");
    assert_converged(&ns);
}

/// A field of the recovery template's pod's (first) container, by its JSONPath below it.
pub(crate) fn recovery_container_field(ns: &Namespace, field: &str) -> String {
    ns.kubectl(&[
        "get",
        "cronjob",
        "-l",
        "app.kubernetes.io/component=snapshot-recovery",
        "-o",
        &format!(
            "jsonpath={{.items[0].spec.jobTemplate.spec.template.spec.containers[0].{field}}}"
        ),
    ])
}

/// The recovery template's memory limit, which follows `run.concurrency` (docs/contract.md,
/// "Memory": 32 MiB + the budget + 25 MiB a worker).
fn recovery_memory_limit(ns: &Namespace) -> String {
    recovery_container_field(ns, "resources.limits.memory")
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn upgrade_rollback_and_uninstall_leave_only_the_claim() {
    let ns = Namespace::new("e2e-life");
    upgrade(&ns, &[]);
    assert_eq!(recovery_memory_limit(&ns), "268Mi");
    // A changed development password (issue 51, defect 4): the upgrade's migration hook logs in
    // with it (`upgrade` fails otherwise), and so does the executor.
    upgrade(
        &ns,
        &[
            "--set",
            "run.concurrency=2",
            "--set",
            "postgresql.password=second-pass",
        ],
    );
    assert_eq!(recovery_memory_limit(&ns), "198Mi");
    assert_logs_in(&ns, "after-change");
    helm(
        &ns,
        &["rollback", RELEASE, "1", "--wait", "--timeout", "5m"],
    );
    assert_eq!(recovery_memory_limit(&ns), "268Mi");
    assert_logs_in(&ns, "after-rollback");
    let history = helm(&ns, &["history", RELEASE, "-o", "json"]);
    let history: Value = serde_json::from_str(&history).unwrap();
    assert_eq!(history.as_array().unwrap().len(), 3, "{history}");

    uninstall_leaves_only_the_claim(&ns);

    // A reinstall onto the kept claim with another password: the database takes the new one.
    upgrade(&ns, &["--set", "postgresql.password=third-pass"]);
    assert_logs_in(&ns, "after-reinstall");
    // The claim's size cannot change: refused before the API server would, saying what to do.
    let mut args: Vec<String> = ["upgrade", RELEASE, "charts/package-executor"]
        .map(str::to_owned)
        .to_vec();
    args.extend(values(&[
        "--set",
        "postgresql.password=third-pass",
        "--set",
        "postgresql.storage=128Mi",
    ]));
    let out = helm_output(&ns, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a storage change was accepted");
    assert!(
        err.contains("postgresql.storage cannot change once installed (it is 64Mi")
            && err.contains("keep postgresql.storage=64Mi"),
        "{err}"
    );
}

/// `helm uninstall`, after which nothing of the release is left in its namespace but the
/// development database's claim (docs/operations.md says it stays).
pub(crate) fn uninstall_leaves_only_the_claim(ns: &Namespace) {
    helm(ns, &["uninstall", RELEASE, "--wait", "--timeout", "5m"]);
    // Jobs made from the recovery template go with it, by their owner, and the StatefulSet's
    // pod with the StatefulSet: the garbage collector deletes them after the uninstall.
    let owned = ns.kubectl(&["get", "jobs,pods", "-o", "name"]);
    for object in owned.lines() {
        ns.wait(object, "delete", "120s");
    }
    let kinds = cluster::kubectl(&[
        "api-resources",
        "--verbs=list",
        "--namespaced",
        "-o",
        "name",
    ]);
    let kinds: Vec<&str> = kinds.lines().filter(|k| !k.starts_with("events")).collect();
    let left = ns.kubectl(&["get", &kinds.join(","), "-o", "name"]);
    let left: Vec<&str> = left
        .lines()
        // What every namespace has, made by its controllers, not by the release.
        .filter(|o| *o != "serviceaccount/default" && *o != "configmap/kube-root-ca.crt")
        .collect();
    assert_eq!(left.len(), 1, "left after uninstall: {left:?}");
    assert!(
        left[0].starts_with("persistentvolumeclaim/data-"),
        "the development database's claim stays (docs/operations.md): {left:?}"
    );
}

/// Both of the chart's database logins work: the owner's (`verify`) and the executor's (`run`).
fn assert_logs_in(ns: &Namespace, label: &str) {
    let (code, log) = run_once(ns, &format!("verify-{label}"), "migrate-url", &["verify"]);
    assert_eq!(code, 0, "verify {label}: {log}");
    let (code, log) = run_once(ns, &format!("run-{label}"), "executor-url", &["run"]);
    assert_eq!(code, 0, "run {label}: {log}");
}

/// The name of the release's first KIND whose component label is COMPONENT ("" when none).
pub(crate) fn named(ns: &Namespace, kind: &str, component: &str) -> String {
    ns.kubectl(&[
        "get",
        kind,
        "-l",
        &format!("app.kubernetes.io/component={component}"),
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ])
}

/// Sends SIGNAL to a pod's (first) container's main process from its node, through the
/// node's container runtime: a container's own PID 1 ignores SIGSTOP sent from inside it.
/// kind's node is a podman container in the tier's namespaces, so `podman exec` reaches its
/// PID namespace and its `crictl`.
fn signal_container(ns: &Namespace, pod: &str, signal: &str) {
    let status = ns.kubectl(&[
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={.spec.nodeName} {.status.containerStatuses[0].containerID}",
    ]);
    let (node, id) = status
        .split_once(' ')
        .expect("a scheduled pod with a container");
    let id = id
        .strip_prefix("containerd://")
        .expect("a containerd container");
    let on_node = |args: &[&str]| {
        let out = std::process::Command::new("podman")
            .args(["exec", node])
            .args(args)
            .output()
            .expect("podman (scripts/kind.sh exec puts it on PATH)");
        assert!(out.status.success(), "podman exec {node} {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let info: Value = serde_json::from_str(&on_node(&["crictl", "inspect", id])).unwrap();
    let pid = info["info"]["pid"]
        .as_i64()
        .unwrap_or_else(|| panic!("no pid for {id} in crictl's answer: {info}"))
        .to_string();
    on_node(&["kill", "-s", signal, &pid]);
}

/// Waits until the Job has created a pod that reached Running, and gives its name.
pub(crate) fn running_pod_of(ns: &Namespace, job: &str) -> String {
    let selector = format!("job-name={job}");
    // The Job controller creates the pod; wait for it to exist, then to run.
    ns.wait(&format!("job/{job}"), "jsonpath={.status.active}=1", "120s");
    let pod = ns.kubectl(&[
        "get",
        "pods",
        "-l",
        &selector,
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    ns.wait(
        &format!("pod/{pod}"),
        "jsonpath={.status.phase}=Running",
        "120s",
    );
    pod
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn a_run_pod_and_the_database_pod_deleted_then_the_sweep_on_its_schedule() {
    let ns = Namespace::new("e2e-faults");
    install_and_import(&ns, &[]);

    // The database stops answering (its postmaster stopped: connections are accepted and never
    // served), so a recovery Job's pod is held mid-run, connecting; that pod is deleted while it
    // runs. Then the database answers again, and the Job's next pod converges.
    let postgres = named(&ns, "statefulset", "postgresql");
    let server = format!("{postgres}-0");
    signal_container(&ns, &server, "STOP");
    let cron = named(&ns, "cronjob", "snapshot-recovery");
    ns.kubectl(&[
        "create",
        "job",
        "recovery-by-hand",
        &format!("--from=cronjob/{cron}"),
    ]);
    let doomed = running_pod_of(&ns, "recovery-by-hand");
    // Gone only once its container ended: the database answers again after that.
    ns.kubectl(&["delete", "pod", &doomed, "--wait=true", "--timeout=120s"]);
    signal_container(&ns, &server, "CONT");
    ns.wait("job/recovery-by-hand", "condition=Complete", "300s");
    // The deleted pod stopped when told (exit 3, its summary said so: nothing taken), and the
    // Job's next pod built everything.
    let events = ns.kubectl(&[
        "get",
        "events.events.k8s.io",
        "--field-selector",
        "regarding.name=recovery-by-hand,reason=RunSummary",
        "-o",
        "jsonpath={range .items[*]}{.note}{\"\\n\"}{end}",
    ]);
    let codes: Vec<(i64, i64)> = events
        .lines()
        .map(|l| {
            let s: Value = serde_json::from_str(l).unwrap();
            (
                s["exitCode"].as_i64().unwrap(),
                s["published"].as_i64().unwrap(),
            )
        })
        .collect();
    assert!(
        codes.contains(&(3, 0)),
        "the deleted pod's summary: {events}"
    );
    assert!(codes.contains(&(0, 3)), "the next pod's summary: {events}");
    assert_converged(&ns);

    // The database's pod deleted: the StatefulSet brings it back with its data (demo-1 is still
    // current), and the next publication publishes.
    let uid = ns.kubectl(&[
        "get",
        "pod",
        &format!("{postgres}-0"),
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    ns.kubectl(&["delete", "pod", &format!("{postgres}-0"), "--wait=true"]);
    ns.wait(&format!("pod/{postgres}-0"), "condition=Ready", "180s");
    let again = ns.kubectl(&[
        "get",
        "pod",
        &format!("{postgres}-0"),
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    assert_ne!(uid, again, "the database's pod was recreated");
    // Ready is not yet reachable: the Service's endpoints and the node's rules follow the new
    // pod a moment later, and a command meeting that gap exits 8 (database unavailable) at once.
    let mut attempt = 0;
    let (code, log) = loop {
        let (code, log) = run_once(
            &ns,
            &format!("current-kept-{attempt}"),
            "executor-url",
            &["current", "demo-1"],
        );
        attempt += 1;
        if code != 8 || attempt == 5 {
            break (code, log);
        }
    };
    assert_eq!(code, 0, "the database kept its data: {log}");
    remove_a_package_of_demo_2(&ns);
    upgrade(&ns, &["--set", "publicationId=e2e-after-restart"]);
    let job = newest_recovery_job(&ns);
    ns.wait(&format!("job/{job}"), "condition=Complete", "300s");
    let pods = cluster::get_json(&["-n", &ns.name, "pods", "-l", &format!("job-name={job}")]);
    let message =
        pods["items"][0]["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
    let summary: Value = serde_json::from_str(&message).unwrap();
    assert_eq!(summary["published"], 1, "demo-2 again: {summary}");

    // The sweep CronJob on a one-minute schedule makes a Job that completes.
    upgrade(
        &ns,
        &[
            "--set",
            "publicationId=e2e-after-restart",
            "--set",
            "sweep.enabled=true",
            "--set-string",
            "sweep.schedule=*/1 * * * *",
        ],
    );
    let sweep = named(&ns, "cronjob", "sweep");
    assert!(!sweep.is_empty(), "no sweep CronJob");
    ns.wait(
        &format!("cronjob/{sweep}"),
        "jsonpath={.status.lastSuccessfulTime}",
        "180s",
    );
}

/// Issue 51's matrix, the part installed for real: each value set is installed with the
/// development database, imports the demo fixture, publishes (its recovery Job completes and
/// publishes every buildable project) and is uninstalled, leaving only the claim. Every render
/// of the chart's own tests (the rest of the matrix) goes through the API server in
/// `renders.rs`.
fn install_publish_uninstall(prefix: &str, setup: Option<&str>, extra: &[&str]) {
    let ns = Namespace::new(prefix);
    if let Some(yaml) = setup {
        ns.apply(yaml);
    }
    let mut values = Vec::new();
    for v in extra {
        values.extend(["--set", *v]);
    }
    let (_, summaries) = install_import_publish(&ns, &values);
    assert_eq!(published(&summaries), 3, "{extra:?}: {summaries:?}");
    if setup.is_some() {
        // What the test made is not the release's to remove.
        ns.kubectl(&["delete", "resourcequotas,limitranges", "--all"]);
    }
    uninstall_leaves_only_the_claim(&ns);
}

macro_rules! installed {
    ($($name:ident($prefix:literal, $setup:expr, [$($value:literal),* $(,)?]);)*) => {$(
        #[test]
        #[ignore = "needs a cluster: scripts/test.sh kind"]
        fn $name() {
            install_publish_uninstall($prefix, $setup, &[$($value),*]);
        }
    )*};
}

/// Every pod must state a CPU limit here (issue 51, defect 10).
const CPU_QUOTA: &str = "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: cpu}\nspec:\n  hard: {limits.cpu: \"16\"}\n";

installed! {
    matrix_name_override("m-name", None, ["nameOverride=executor"]);
    matrix_fullname_override("m-fullname", None, ["fullnameOverride=ops"]);
    matrix_sweep("m-sweep", None, ["sweep.enabled=true"]);
    matrix_no_network_policy("m-nonetpol", None, ["networkPolicy.enabled=false"]);
    matrix_trigger_in_cluster("m-trigger", None, ["rbac.triggerInCluster=true"]);
    matrix_memory_request("m-memory", None, ["resources.requests.memory=300Mi"]);
    matrix_cpu_limits_under_a_quota("m-quota", Some(CPU_QUOTA), [
        "resources.limits.cpu=1",
        "migration.resources.limits.cpu=500m",
        "recovery.hookResources.limits.cpu=200m",
        "postgresql.resources.limits.cpu=1",
    ]);
    matrix_smallest_budget("m-small", None, ["run.concurrency=1", "run.memoryBudgetMiB=50"]);
    matrix_pod_labels_and_annotations("m-meta", None, [
        "podLabels.team=tools",
        "podAnnotations.example\\.com/owner=tools",
    ]);
    matrix_scheduling("m-sched", None, [
        "nodeSelector.kubernetes\\.io/os=linux",
        "tolerations[0].key=dedicated",
        "tolerations[0].operator=Exists",
        "tolerations[0].effect=NoSchedule",
    ]);
    // A platform's overlay (issue 81): its pods run the init container, mount the volume and
    // read the (optional) ConfigMap's variables, and still publish.
    matrix_extension_points("m-ext", None, [
        "envFrom[0].configMapRef.name=platform-env",
        "envFrom[0].configMapRef.optional=true",
        "extraVolumes[0].name=scratch",
        "extraVolumes[0].emptyDir.sizeLimit=16Mi",
        "extraVolumeMounts[0].name=scratch",
        "extraVolumeMounts[0].mountPath=/scratch",
        "initContainers[0].name=ready",
        "initContainers[0].image=example.local/busybox:1",
        "initContainers[0].imagePullPolicy=Never",
        "initContainers[0].command[0]=/bin/true",
        "initContainers[0].securityContext.allowPrivilegeEscalation=false",
        "initContainers[0].securityContext.capabilities.drop[0]=ALL",
        "initContainers[0].resources.requests.cpu=10m",
        "initContainers[0].resources.requests.memory=8Mi",
        "initContainers[0].resources.limits.memory=16Mi",
        "topologySpreadConstraints[0].maxSkew=1",
        "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
        "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
        "topologySpreadConstraints[0].labelSelector.matchLabels.app\\.kubernetes\\.io/instance=pe",
    ]);
}

/// The development database's password in the Secret-shaped tests below: it must appear in no
/// pod spec, argument list or log.
const LOGIN_PASSWORD: &str = "e2e-Login-Pw1";

/// Database logins from the Secrets platforms already make (issue 81): a release installed
/// with each login read from such a Secret (made here, for the development database) migrates,
/// publishes, and holds its password nowhere but in that Secret.
fn logs_in_from_secrets(prefix: &str, secrets: &str, logins: &[&str]) {
    let ns = Namespace::new(prefix);
    ns.apply(secrets);
    let mut values = vec![
        "--set".to_owned(),
        format!("postgresql.password={LOGIN_PASSWORD}"),
    ];
    for v in logins {
        values.extend(["--set".to_owned(), (*v).to_owned()]);
    }
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let (job, summaries) = install_import_publish(&ns, &values);
    assert_eq!(published(&summaries), 3, "{logins:?}: {summaries:?}");
    let specs = ns.kubectl(&["get", "pods,jobs,cronjobs,statefulsets", "-o", "yaml"]);
    assert!(
        !specs.contains(LOGIN_PASSWORD),
        "a password in a spec:\n{specs}"
    );
    let logs = ns.kubectl(&["logs", "-l", &format!("job-name={job}"), "--tail=-1"]);
    assert!(
        !logs.contains(LOGIN_PASSWORD),
        "a password in a log:\n{logs}"
    );
    let out = ns.kubectl_output(&["delete", "-f", "-"], Some(secrets));
    assert!(out.status.success(), "{out:?}");
    uninstall_leaves_only_the_claim(&ns);
}

/// CloudNativePG's two Secrets for a cluster: `<cluster>-app` (the application's login) and
/// `<cluster>-superuser`, each with `uri`, `host`, `port`, `dbname`, `user` and `password`.
fn cloudnativepg_secrets() -> String {
    let host = format!("{RELEASE}-package-executor-postgresql");
    [("db-app", "pe_executor"), ("db-superuser", "postgres")]
        .iter()
        .map(|(name, user)| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name},
                "type": "kubernetes.io/basic-auth",
                "stringData": {
                    "uri": format!("postgresql://{user}:{LOGIN_PASSWORD}@{host}:5432/postgres"),
                    "host": host, "port": "5432", "dbname": "postgres",
                    "username": user, "user": user, "password": LOGIN_PASSWORD,
                },
            })
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn matrix_logins_from_cloudnativepg_shaped_secrets() {
    logs_in_from_secrets(
        "m-cnpg",
        &cloudnativepg_secrets(),
        &[
            "database.executorLogin.secret=db-app",
            "database.executorLogin.urlKey=uri",
            "database.migrateLogin.secret=db-superuser",
        ],
    );
}

/// Bitnami's PostgreSQL chart keeps only passwords in its Secret (`postgres-password` for the
/// superuser, `password` for its user): the rest of each login is given as values.
#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn matrix_logins_from_a_bitnami_shaped_secret() {
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-postgresql"},
        "stringData": {"postgres-password": LOGIN_PASSWORD, "password": LOGIN_PASSWORD},
    })
    .to_string();
    let host = format!("database.executorLogin.host={RELEASE}-package-executor-postgresql");
    let migrate_host = format!("database.migrateLogin.host={RELEASE}-package-executor-postgresql");
    logs_in_from_secrets(
        "m-bitnami",
        &secret,
        &[
            "database.executorLogin.secret=db-postgresql",
            &host,
            "database.executorLogin.port=5432",
            "database.executorLogin.dbname=postgres",
            "database.executorLogin.user=pe_executor",
            "database.migrateLogin.secret=db-postgresql",
            &migrate_host,
            "database.migrateLogin.port=5432",
            "database.migrateLogin.dbname=postgres",
            "database.migrateLogin.user=postgres",
            "database.migrateLogin.keys.password=postgres-password",
        ],
    );
}

/// `rbac.triggerJobPolicy`: the publication's Job, which trigger makes from the template, passes
/// the admission policy (the template's pod and the Job's are equal after the API server's
/// defaulting), and any other Job trigger's account tries (one whose pod mounts the owner's
/// database Secret) is refused by the API server, while the same Job from another account
/// passes (the policy binds trigger's account alone).
#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn matrix_trigger_may_create_only_the_templates_jobs() {
    let ns = Namespace::new("m-jobpolicy");
    let (_, summaries) = install_import_publish(&ns, &["--set", "rbac.triggerJobPolicy=true"]);
    assert_eq!(published(&summaries), 3, "{summaries:?}");
    let account = format!(
        "system:serviceaccount:{}:{RELEASE}-package-executor-trigger",
        ns.name
    );
    let mut spec = cluster::busybox_pod_spec("cat /secret/migrate-url");
    spec["volumes"] = serde_json::json!([{"name": "s", "secret": {"secretName": db_secret(&ns)}}]);
    spec["containers"][0]["volumeMounts"] =
        serde_json::json!([{"name": "s", "mountPath": "/secret"}]);
    let job = |name: &str| {
        serde_json::json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {"template": {"spec": spec.clone()}, "backoffLimit": 0}
        })
        .to_string()
    };
    let out = ns.kubectl_output(
        &["create", "--dry-run=server", "--as", &account, "-f", "-"],
        Some(&job("steal-the-owner-url")),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "trigger's account created another Job"
    );
    assert!(
        err.contains("may create only Jobs whose pod is the recovery template's"),
        "{err}"
    );
    let out = ns.kubectl_output(
        &["create", "--dry-run=server", "-f", "-"],
        Some(&job("an-admins-job")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    uninstall_leaves_only_the_claim(&ns);
}
