//! The fast tier's model of the API server (`crates/testkit/src/k8s_rules.rs`) against the API
//! server itself, on the same objects: each rule the server enforces is kept for the fast tier
//! (which has no cluster) only while it says what the server says. Every object here is created
//! with a server-side dry run, so nothing is left behind.

use package_executor_testkit::cluster::{Namespace, busybox_pod_spec};
use package_executor_testkit::k8s_rules;
use serde_json::{Value, json};

/// Whether the API server takes OBJECT (a server-side dry run), and what it said.
fn accepts(ns: &Namespace, object: &Value) -> (bool, String) {
    let out = ns.kubectl_output(
        &["create", "--dry-run=server", "-o", "name", "-f", "-"],
        Some(&object.to_string()),
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Names at and around every bound the rules state, and the characters they allow.
fn names() -> Vec<String> {
    let mut names: Vec<String> = [1, 52, 53, 54, 62, 63, 64, 252, 253, 254]
        .iter()
        .map(|&n| "a".repeat(n))
        .collect();
    names.extend(
        [
            "a-b",
            "-ab",
            "ab-",
            "a.b",
            "a..b",
            ".ab",
            "A",
            "aB",
            "a_b",
            "a b",
            "1a",
            "a1",
            "pe.prod-db",
            "a/b",
            "é",
        ]
        .map(str::to_owned),
    );
    // Dotted names whose labels are each within 63 characters, and the whole near 253.
    names.push(format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61)
    ));
    names.push(format!("{}.{}", "a".repeat(64), "b"));
    names
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn the_name_and_label_rules_say_what_the_api_server_says() {
    let ns = Namespace::new("rules-names");
    let mut disagree = Vec::new();
    for name in names() {
        // A Namespace's name is a DNS label; a ConfigMap's a DNS subdomain; a label's value.
        let cases = [
            (
                "is_dns_label",
                k8s_rules::is_dns_label(&name),
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
            ),
            (
                "is_dns_subdomain",
                k8s_rules::is_dns_subdomain(&name),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}),
            ),
            (
                "is_label_value",
                k8s_rules::is_label_value(&name),
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "probe", "labels": {"probe": name}}}),
            ),
        ];
        for (rule, says, object) in cases {
            let (server, why) = accepts(&ns, &object);
            if says != server {
                disagree.push(format!(
                    "{rule}({name:?}) = {says}, the server: {server} {why}"
                ));
            }
        }
    }
    assert!(disagree.is_empty(), "{disagree:#?}");
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn the_job_and_cron_job_rules_say_what_the_api_server_says() {
    let ns = Namespace::new("rules-jobs");
    let mut disagree = Vec::new();
    let template = json!({"spec": busybox_pod_spec("true")});
    for length in [50, 52, 53, 54, 55, 60, 61, 62, 63, 64] {
        let name = "j".repeat(length);
        for (mode, completions) in [
            ("NonIndexed", 1),
            ("Indexed", 1),
            ("Indexed", 10),
            ("Indexed", 100),
        ] {
            let spec = json!({
                "completionMode": mode, "completions": completions,
                "parallelism": 1, "template": template,
            });
            let mut broken = Vec::new();
            k8s_rules::job_name("probe", &name, &spec, &mut broken);
            let job = json!({"apiVersion": "batch/v1", "kind": "Job",
                             "metadata": {"name": name}, "spec": spec});
            let (server, why) = accepts(&ns, &job);
            if broken.is_empty() != server {
                disagree.push(format!(
                    "job_name({length} characters, {mode} of {completions}): {broken:?}, the server: {server} {why}"
                ));
            }
        }
        let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": name},
            "spec": {"schedule": "*/5 * * * *", "suspend": true,
                     "jobTemplate": {"spec": {"template": template}}}});
        let mut broken = Vec::new();
        k8s_rules::cron_job("probe", &cron, &mut broken);
        let (server, why) = accepts(&ns, &cron);
        if broken.is_empty() != server {
            disagree.push(format!(
                "cron_job({length} characters): {broken:?}, the server: {server} {why}"
            ));
        }
    }
    assert!(disagree.is_empty(), "{disagree:#?}");
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn the_block_owner_deletion_rule_says_what_the_admission_plugin_says() {
    let ns = Namespace::new("rules-owners");
    let template = json!({"spec": busybox_pod_spec("true")});
    ns.apply(
        &json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "owner"},
            "spec": {"schedule": "*/5 * * * *", "suspend": true,
                     "jobTemplate": {"spec": {"template": template}}}})
        .to_string(),
    );
    let uid = ns.kubectl(&["get", "cronjob", "owner", "-o", "jsonpath={.metadata.uid}"]);
    // Two accounts that may create Jobs; one may also update the CronJobs' finalizers.
    for (account, finalizers) in [("plain", false), ("granted", true)] {
        let mut rules = vec![json!({"apiGroups": ["batch"], "resources": ["jobs"],
                                    "verbs": ["create", "get"]})];
        if finalizers {
            rules.push(
                json!({"apiGroups": ["batch"], "resources": ["cronjobs/finalizers"],
                              "verbs": ["update"]}),
            );
        }
        ns.apply(
            &json!({"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": account}, "rules": rules},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": account},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
                 "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns.name}]}
            ]})
            .to_string(),
        );
    }
    let mut disagree = Vec::new();
    for (account, granted) in [("plain", false), ("granted", true)] {
        for block in [false, true] {
            let job = json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "owned", "ownerReferences": [{
                    "apiVersion": "batch/v1", "kind": "CronJob", "name": "owner", "uid": uid,
                    "blockOwnerDeletion": block}]},
                "spec": {"template": template}});
            let mut broken = Vec::new();
            k8s_rules::owner_references("probe", &job, granted, &mut broken);
            let user = format!("--as=system:serviceaccount:{}:{account}", ns.name);
            let out = ns.kubectl_output(
                &["create", "--dry-run=server", &user, "-o", "name", "-f", "-"],
                Some(&job.to_string()),
            );
            if broken.is_empty() != out.status.success() {
                disagree.push(format!(
                    "owner_references(blockOwnerDeletion {block}, granted {granted}): {broken:?}, \
                     the server: {} {}",
                    out.status.success(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    assert!(disagree.is_empty(), "{disagree:#?}");
}
