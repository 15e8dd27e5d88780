//! The cluster is what it claims to be: Kubernetes v1.34 with every readiness check passing,
//! the controllers this job relies on (Job, Indexed Job, StatefulSet with a claim) working.

use package_executor_testkit::cluster::{
    self, BUSYBOX, Namespace, RESTRICTED, RESTRICTED_CONTAINER,
};

#[test]
#[ignore = "needs a cluster: scripts/test.sh cluster"]
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

fn job(name: &str, extra_spec: &str, script: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
spec:
  backoffLimit: 0
  {extra_spec}
  template:
    spec:
      restartPolicy: Never
      {RESTRICTED}
      containers:
        - name: main
          image: {BUSYBOX}
          imagePullPolicy: Never
          command: ["sh", "-c", {script:?}]
          {RESTRICTED_CONTAINER}
"#
    )
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh cluster"]
fn a_job_completes_and_an_indexed_job_runs_every_index() {
    let ns = Namespace::new("smoke-jobs");
    ns.apply(&job("plain", "", "echo done"));
    ns.apply(&job(
        "indexed",
        "completionMode: Indexed\n  completions: 3\n  parallelism: 3",
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
#[ignore = "needs a cluster: scripts/test.sh cluster"]
fn a_statefulset_keeps_its_claims_data_across_a_pod_deletion() {
    let ns = Namespace::new("smoke-sts");
    ns.apply(&format!(
        r#"apiVersion: v1
kind: Service
metadata:
  name: keeper
spec:
  clusterIP: None
  selector: {{app: keeper}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: keeper
spec:
  serviceName: keeper
  replicas: 1
  selector:
    matchLabels: {{app: keeper}}
  template:
    metadata:
      labels: {{app: keeper}}
    spec:
      terminationGracePeriodSeconds: 1
      {RESTRICTED}
      containers:
        - name: main
          image: {BUSYBOX}
          imagePullPolicy: Never
          command: ["sh", "-c", "[ -f /data/born ] || date +%s%N > /data/born; cat /data/born; exec sleep 3600"]
          {RESTRICTED_CONTAINER}
          volumeMounts: [{{name: data, mountPath: /data}}]
  volumeClaimTemplates:
    - metadata: {{name: data}}
      spec:
        accessModes: [ReadWriteOnce]
        resources: {{requests: {{storage: 16Mi}}}}
"#
    ));
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
#[ignore = "needs a cluster: scripts/test.sh cluster"]
fn cluster_dns_answers_for_services_and_forwards_nothing() {
    let ns = Namespace::new("smoke-dns");
    ns.apply(&job(
        "dns",
        "",
        "nslookup kubernetes.default.svc.cluster.local; \
         if nslookup -timeout=2 example.com; then echo OUTSIDE-RESOLVED; fi; echo DONE",
    ));
    ns.wait("job/dns", "condition=Complete", "180s");
    let log = ns.kubectl(&["logs", "job/dns"]);
    assert!(log.contains("Address: 10.96.0.1"), "{log}");
    assert!(!log.contains("OUTSIDE-RESOLVED"), "{log}");
    assert!(log.contains("DONE"), "{log}");
}
