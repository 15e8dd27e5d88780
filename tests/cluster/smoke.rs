//! The cluster is what it claims to be: Kubernetes v1.34 with every readiness check passing,
//! the controllers this job relies on (Job, Indexed Job, StatefulSet with a claim) working.

use package_executor_testkit::cluster::{self, Namespace, busybox_pod_spec};
use serde_json::json;

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn the_api_server_is_v1_34_and_every_readiness_check_passes() {
    let version: serde_json::Value =
        serde_json::from_str(&cluster::kubectl(&["version", "-o", "json"])).unwrap();
    let server = version["serverVersion"]["gitVersion"].as_str().unwrap();
    assert!(server.starts_with("v1.34."), "server version {server}");

    let readyz = cluster::kubectl(&["get", "--raw", "/readyz?verbose"]);
    let checks: Vec<&str> = readyz.lines().filter(|l| l.starts_with('[')).collect();
    assert!(checks.len() > 10, "{readyz}");
    assert!(checks.iter().all(|l| l.starts_with("[+]")), "{readyz}");
    assert!(readyz.contains("readyz check passed"), "{readyz}");
}

/// A Job of one busybox pod that runs SCRIPT, with SPEC's fields beside its template.
fn job(name: &str, spec: serde_json::Value, script: &str) -> String {
    let mut spec = spec;
    spec["backoffLimit"] = 0.into();
    spec["template"] = serde_json::json!({"spec": busybox_pod_spec(script)});
    serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": spec,
    })
    .to_string()
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn a_job_completes_and_an_indexed_job_runs_every_index() {
    let ns = Namespace::new("smoke-jobs");
    ns.apply(&job("plain", json!({}), "echo done"));
    ns.apply(&job(
        "indexed",
        json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3}),
        "echo index $JOB_COMPLETION_INDEX",
    ));
    ns.wait("job/plain", "condition=Complete", "180s");
    ns.wait("job/indexed", "condition=Complete", "180s");
    let logs = ns.kubectl(&["logs", "-l", "job-name=indexed", "--tail=-1"]);
    let mut indexes: Vec<&str> = logs.lines().collect();
    indexes.sort_unstable();
    assert_eq!(indexes, ["index 0", "index 1", "index 2"], "{logs}");
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn a_statefulset_keeps_its_claims_data_across_a_pod_deletion() {
    let ns = Namespace::new("smoke-sts");
    let mut pod = busybox_pod_spec(
        "[ -f /data/born ] || date +%s%N > /data/born; cat /data/born; exec sleep 3600",
    );
    pod["restartPolicy"] = "Always".into();
    pod["containers"][0]["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    ns.apply(
        &json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "keeper"},
            "spec": {"clusterIP": "None", "selector": {"app": "keeper"}}
        })
        .to_string(),
    );
    ns.apply(
        &json!({
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "keeper"},
            "spec": {
                "serviceName": "keeper",
                "replicas": 1,
                "selector": {"matchLabels": {"app": "keeper"}},
                "template": {"metadata": {"labels": {"app": "keeper"}}, "spec": pod},
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "16Mi"}}
                    }
                }]
            }
        })
        .to_string(),
    );
    ns.wait("pod/keeper-0", "condition=Ready", "180s");
    let born = ns.kubectl(&["logs", "keeper-0"]);
    let uid = ns.kubectl(&["get", "pod", "keeper-0", "-o", "jsonpath={.metadata.uid}"]);
    ns.kubectl(&["delete", "pod", "keeper-0", "--wait=true"]);
    ns.wait("pod/keeper-0", "condition=Ready", "180s");
    let again = ns.kubectl(&["get", "pod", "keeper-0", "-o", "jsonpath={.metadata.uid}"]);
    assert_ne!(uid, again, "the pod was recreated");
    assert_eq!(
        ns.kubectl(&["logs", "keeper-0"]),
        born,
        "the claim kept its data"
    );
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn cluster_dns_answers_for_services_and_forwards_nothing() {
    let ns = Namespace::new("smoke-dns");
    ns.apply(&job(
        "dns",
        json!({}),
        "nslookup kubernetes.default.svc.cluster.local; \
         if nslookup -timeout=2 example.com; then echo OUTSIDE-RESOLVED; fi; echo DONE",
    ));
    ns.wait("job/dns", "condition=Complete", "180s");
    let log = ns.kubectl(&["logs", "job/dns"]);
    assert!(log.contains("Address: 10.96.0.1"), "{log}");
    assert!(!log.contains("OUTSIDE-RESOLVED"), "{log}");
    assert!(log.contains("DONE"), "{log}");
    // Not resolved because nothing is forwarded, not because a forward found no way out.
    let corefile = cluster::kubectl(&[
        "-n",
        "kube-system",
        "get",
        "configmap",
        "coredns",
        "-o",
        "jsonpath={.data.Corefile}",
    ]);
    assert!(corefile.contains("kubernetes cluster.local"), "{corefile}");
    assert!(!corefile.contains("forward"), "{corefile}");
}
