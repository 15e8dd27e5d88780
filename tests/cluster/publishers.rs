//! A publisher outside the release (issue 81): a service in another namespace, with its own
//! ServiceAccount, bound by `trigger.publishers`, runs the image's `trigger --wait` after the
//! control plane changed a project's packages. The Job it makes runs and the consumer's
//! `current` answers the new digest; the same trigger again attaches to that Job; an account
//! that is not bound is refused by RBAC (403); the bound one is refused by the admission policy
//! when it creates any other Job (another image, command, a hostPath volume, a privileged
//! container) or deletes a recovery Job that did not fail.

use package_executor_testkit::cluster::Namespace;
use serde_json::{Value, json};

use crate::chart::{
    image, install_and_import, named, remove_a_package_of_demo_2, run_once, run_pod,
    uninstall_leaves_only_the_claim,
};

/// A change to the recovery template's pod spec.
type Change = fn(&mut Value);

/// Runs `package-executor ARGS` once in a pod of NS as ACCOUNT (its token mounted, no database
/// login): its exit code and log.
fn run_as(ns: &Namespace, name: &str, account: &str, args: &[&str]) -> (i64, String) {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": account,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"}
            },
            "containers": [{
                "name": "main",
                "image": image(),
                "imagePullPolicy": "Never",
                "args": args,
                "resources": {
                    "requests": {"cpu": "50m", "memory": "32Mi"},
                    "limits": {"memory": "64Mi"}
                },
                "securityContext": {
                    "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}
                }
            }]
        }
    });
    run_pod(ns, &pod, "400s")
}

/// The snapshot digest `current PROJECT --json` answers (None when there is no current one).
fn current_digest(ns: &Namespace, name: &str, project: &str) -> Option<String> {
    let (code, log) = run_once(ns, name, "executor-url", &["current", project, "--json"]);
    if code == 4 {
        return None;
    }
    assert_eq!(code, 0, "current {project}: {log}");
    let line = log
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON from current {project}: {log}"));
    let answer: Value = serde_json::from_str(line).unwrap();
    Some(answer["snapshotDigest"].as_str().unwrap().to_owned())
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn a_publisher_in_another_namespace_triggers_the_release_and_nothing_else() {
    let ns = Namespace::new("e2e-pub");
    let publishing = Namespace::new("e2e-publishing");
    publishing.apply(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: publisher}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: stranger}\n",
    );
    let bound = format!("trigger.publishers[0].namespace={}", publishing.name);
    install_and_import(
        &ns,
        &[
            "--set",
            &bound,
            "--set",
            "trigger.publishers[0].serviceAccount=publisher",
        ],
    );
    let cron = named(&ns, "cronjob", "snapshot-recovery");
    let trigger = |pod: &str, account: &str, publication: &str| {
        run_as(
            &publishing,
            pod,
            account,
            &[
                "trigger",
                "--from-cronjob",
                &cron,
                "--namespace",
                &ns.name,
                "--publication-id",
                publication,
                "--wait",
                "--timeout",
                "5m",
            ],
        )
    };

    // The fixture's import was the control plane's publication: the publisher triggers, waits,
    // and the consumer reads a current snapshot.
    assert_eq!(current_digest(&ns, "before-1", "demo-2"), None);
    let (code, log) = trigger("publish-1", "publisher", "pub-1");
    assert_eq!(code, 0, "{log}");
    let first = current_digest(&ns, "after-1", "demo-2").expect("demo-2 current");

    // The control plane changes demo-2's packages; the publisher triggers again, and the
    // consumer reads the new snapshot.
    remove_a_package_of_demo_2(&ns);
    assert_eq!(
        current_digest(&ns, "stale", "demo-2"),
        None,
        "never a stale one"
    );
    let (code, log) = trigger("publish-2", "publisher", "pub-2");
    assert_eq!(code, 0, "{log}");
    let second = current_digest(&ns, "after-2", "demo-2").expect("demo-2 current again");
    assert_ne!(first, second, "the new package set's snapshot");

    // The same publication again attaches to its Job: still one Job for it.
    let (code, log) = trigger("publish-2-again", "publisher", "pub-2");
    assert_eq!(code, 0, "{log}");
    let jobs = ns.kubectl(&[
        "get",
        "jobs",
        "-o",
        "jsonpath={range .items[*]}{.metadata.annotations.qinglong\\.io/publication-id}{\"\\n\"}{end}",
    ]);
    assert_eq!(jobs.lines().filter(|l| *l == "pub-2").count(), 1, "{jobs}");

    // An account the release does not bind is refused by RBAC.
    let (code, log) = trigger("stranger", "stranger", "pub-3");
    assert_ne!(code, 0, "{log}");
    assert!(
        log.contains("403") || log.to_lowercase().contains("forbidden"),
        "{log}"
    );

    // The bound account may create only the template's Jobs and delete only failed ones.
    let account = format!("system:serviceaccount:{}:publisher", publishing.name);
    let template: Value =
        serde_json::from_str(&ns.kubectl(&["get", "cronjob", &cron, "-o", "json"])).unwrap();
    let job_with = |name: &str, change: Change| -> String {
        let mut spec = template["spec"]["jobTemplate"]["spec"].clone();
        change(&mut spec["template"]["spec"]);
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec})
            .to_string()
    };
    let as_publisher = |args: &[&str], stdin: Option<&str>| {
        let mut all = args.to_vec();
        all.extend(["--as", &account, "--dry-run=server"]);
        ns.kubectl_output(&all, stdin)
    };
    let changes: [(&str, Change); 4] = [
        ("another-image", |p| {
            p["containers"][0]["image"] = json!("example.local/busybox:1");
        }),
        ("another-command", |p| {
            p["containers"][0]["args"] = json!(["verify"])
        }),
        ("a-host-path", |p| {
            p["volumes"] = json!([{"name": "host", "hostPath": {"path": "/"}}]);
        }),
        ("privileged", |p| {
            p["containers"][0]["securityContext"]["privileged"] = json!(true);
            p["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true);
        }),
    ];
    for (name, change) in &changes {
        let out = as_publisher(&["create", "-f", "-"], Some(&job_with(name, *change)));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{name}: the publisher created another Job"
        );
        assert!(
            err.contains("may create only Jobs whose pod is the recovery template's"),
            "{name}: {err}"
        );
    }
    // The template's own Job passes (the policy holds it to the template, no more).
    let out = as_publisher(
        &["create", "-f", "-"],
        Some(&job_with("the-template", |_| {})),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A recovery Job that completed may not be deleted by it.
    let done = ns.kubectl(&[
        "get",
        "jobs",
        "-o",
        "jsonpath={.items[?(@.metadata.annotations.qinglong\\.io/publication-id==\"pub-1\")].metadata.name}",
    ]);
    let out = as_publisher(&["delete", "job", done.trim()], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the publisher deleted a completed Job"
    );
    assert!(err.contains("may delete only failed Jobs"), "{err}");

    uninstall_leaves_only_the_claim(&ns);
}
