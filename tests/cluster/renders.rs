//! Every render the chart tests make, judged by the real API server: `tests/e2e/kind.sh`
//! runs the chart tests with `PE_CHART_RENDERS` set (each distinct render, and each Job
//! `trigger` makes of a rendered recovery template, is kept as a file), then this test creates
//! each one with a server-side dry run in a namespace that enforces the `restricted` Pod
//! Security level: validation, defaulting, every admission plugin the cluster runs
//! (scripts/kind/cluster.yaml names them) and Pod Security's warnings for the pod templates of Jobs
//! and CronJobs, which it only warns about (it enforces on Pods), so a warning fails too.

use std::path::PathBuf;

use package_executor_testkit::cluster::{self, Namespace};
use package_executor_testkit::helm;
use serde_json::Value;

/// The PrometheusRule kind, for the renders that enable it: no prometheus-operator runs here, and
/// its CRD's schema is not in any module this repository builds, so the API server checks only
/// what it checks of any object (its name, labels and annotations), and promtool checks the
/// rules themselves (tests/it/chart/alerts.rs).
const PROMETHEUS_RULE_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: prometheusrules.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: PrometheusRule, listKind: PrometheusRuleList, plural: prometheusrules, singular: prometheusrule}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#;

/// Creates a render's objects in NS with a server-side dry run: kubectl's output. Its
/// ServiceAccounts are created for real first: a Pod (`helm test`'s) names its account, which
/// the ServiceAccount admission plugin looks up, and a dry run creates nothing it could find.
fn create_dry_run(ns: &Namespace, rendered: &str) -> std::process::Output {
    let mut objects = helm::objects(rendered);
    for object in &mut objects {
        object["metadata"]["namespace"] = Value::String(ns.name.clone());
    }
    let (accounts, objects): (Vec<Value>, Vec<Value>) = objects
        .into_iter()
        .partition(|o| o["kind"] == "ServiceAccount");
    if !accounts.is_empty() {
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": accounts});
        let out = ns.kubectl_output(&["apply", "-f", "-"], Some(&list.to_string()));
        if !out.status.success() || String::from_utf8_lossy(&out.stderr).contains("Warning") {
            return out;
        }
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
    ns.kubectl_output(
        &["create", "--dry-run=server", "-o", "name", "-f", "-"],
        Some(&list.to_string()),
    )
}

/// The PriorityClasses a set of renders names, made for real, and deleted when dropped.
struct PriorityClasses(Vec<String>);

impl PriorityClasses {
    fn for_renders(texts: &[String]) -> Self {
        let mut names: Vec<String> = texts
            .iter()
            .flat_map(|t| helm::objects(t))
            .filter_map(|o| {
                let pod = match o["kind"].as_str()? {
                    "Pod" => &o["spec"],
                    "CronJob" => &o["spec"]["jobTemplate"]["spec"]["template"]["spec"],
                    _ => &o["spec"]["template"]["spec"],
                };
                pod["priorityClassName"].as_str().map(str::to_owned)
            })
            .collect();
        names.sort();
        names.dedup();
        for name in &names {
            let class = serde_json::json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": 1000,
                "description": "tests/cluster/renders.rs: a class a chart render names"
            });
            cluster::kubectl_in(&["apply", "-f", "-"], &class.to_string());
        }
        Self(names)
    }
}

impl Drop for PriorityClasses {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = cluster::kubectl_output(
                &["delete", "priorityclass", name, "--ignore-not-found"],
                None,
            );
        }
    }
}

fn renders() -> Vec<PathBuf> {
    let dir = std::env::var_os(helm::RENDERS_ENV).unwrap_or_else(|| {
        panic!(
            "{} is not set: scripts/test.sh kind runs the chart tests with it first",
            helm::RENDERS_ENV
        )
    });
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir:?}: {e}"))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn every_chart_render_passes_the_api_server() {
    let files = renders();
    assert!(files.len() > 20, "only {} renders were kept", files.len());
    cluster::kubectl_in(&["apply", "-f", "-"], PROMETHEUS_RULE_CRD);
    cluster::kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/prometheusrules.monitoring.coreos.com",
        "--timeout=60s",
    ]);
    let ns = Namespace::new("renders");
    ns.kubectl(&[
        "label",
        "namespace",
        &ns.name,
        "pod-security.kubernetes.io/warn=restricted",
    ]);

    // A Pod (`helm test`'s) names its PriorityClass, which the Priority admission plugin looks
    // up: the classes the renders name exist for the test's while (cluster-scoped, removed
    // after it, whatever it found).
    let texts: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let _classes = PriorityClasses::for_renders(&texts);

    let mut judged = 0;
    let mut refused = Vec::new();
    for (file, text) in files.iter().zip(&texts) {
        let out = create_dry_run(&ns, text);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || stderr.contains("Warning") {
            refused.push(format!("{}:\n{stderr}", file.display()));
        }
        judged += 1;
    }
    eprintln!("the API server judged {judged} renders");
    assert!(
        refused.is_empty(),
        "the API server refused:\n{}",
        refused.join("\n")
    );
}

/// The other half of `tests/it/chart/manifests.rs`'s schema test: each value the schema refuses
/// (`helm::REFUSED_BY_THE_API_SERVER`), rendered without the schema, is refused by the API
/// server too, so the schema is no stricter than the server on them.
#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn what_the_schema_refuses_the_api_server_refuses() {
    let ns = Namespace::new("refused");
    let mut accepted = Vec::new();
    for set in helm::REFUSED_BY_THE_API_SERVER {
        let out = helm::template_output(&["--skip-schema-validation", "--set", set]);
        assert!(
            out.status.success(),
            "{set}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = create_dry_run(&ns, &String::from_utf8_lossy(&out.stdout));
        if out.status.success() {
            accepted.push(*set);
        }
    }
    assert!(
        accepted.is_empty(),
        "the API server accepts what the schema refuses: {accepted:?}"
    );
}

/// Issue 51, defect 12: the API server's rule in the NetworkPolicy must name the API server's
/// own addresses. Policy implementations that look after kube-proxy's translation (kube-router
/// here, Calico, Cilium) never see the `kubernetes` Service's ClusterIP, so a rule for it drops
/// every call. With `lookup` the chart reads the Service and its EndpointSlices at install (a
/// server-side dry run reads them too): a ClusterIP among the CIDRs is refused, naming the
/// addresses to give, and without CIDRs the rule holds those addresses, which NOTES says were
/// read once.
#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn the_api_servers_cluster_ip_is_refused_as_its_policy_address() {
    let ns = Namespace::new("api-cidrs");
    let cluster_ip = cluster::kubectl(&[
        "get",
        "service",
        "kubernetes",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let endpoint = cluster::kubectl(&[
        "get",
        "endpointslices",
        "-n",
        "default",
        "-l",
        "kubernetes.io/service-name=kubernetes",
        "-o",
        "jsonpath={.items[0].endpoints[0].addresses[0]}",
    ]);
    let dry_run = |extra: &[&str]| {
        let mut args = vec![
            "install",
            "pe",
            "charts/package-executor",
            "--dry-run=server",
            "--namespace",
            &ns.name,
            "--set",
            "networkPolicy.apiServer.lookup=true",
        ];
        args.extend_from_slice(extra);
        std::process::Command::new(helm::bin())
            .args(&args)
            .current_dir(helm::root())
            .output()
            .expect("helm")
    };
    let cidr = format!("networkPolicy.apiServer.cidrs={{{cluster_ip}/32}}");
    let out = dry_run(&["--set", &cidr]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a ClusterIP was accepted");
    assert!(
        err.contains(&format!(
            "holds {cluster_ip}/32, the `kubernetes` Service's ClusterIP"
        )) && err.contains(&format!("{endpoint}/32")),
        "{err}"
    );
    let out = dry_run(&[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(&format!("cidr: \"{endpoint}/32\"")), "{text}");
    assert!(text.contains("as read now"), "{text}");
}

/// checkov (the same pinned release as the fast tier's test) over every render the chart tests
/// make: no check fails that the chart does not skip, with its reason, in the template it
/// concerns (`pe.checkovSkips`). Each render is placed in a namespace of its own, as a release
/// is installed (the renders default to `default`, which checkov flags). The Jobs `trigger`
/// makes of a recovery template are left out: they are that template's pod exactly, judged with
/// the CronJob that carries its skips.
#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn every_chart_render_passes_checkov() {
    // Not tempfile's default ".tmp…" name: checkov skips folders whose name starts with ".".
    let dir = tempfile::Builder::new()
        .prefix("checkov-renders-")
        .tempdir()
        .unwrap();
    let mut kept = 0;
    for (i, file) in renders().iter().enumerate() {
        let objects: Vec<Value> = helm::objects(&std::fs::read_to_string(file).unwrap())
            .into_iter()
            .filter(|o| {
                o["kind"] != "Job"
                    || o["metadata"]["annotations"]["qinglong.io/publication-id"].is_null()
            })
            .map(|mut o| {
                o["metadata"]["namespace"] = Value::String("pe".into());
                o
            })
            .collect();
        if objects.is_empty() {
            continue;
        }
        let yaml: Vec<String> = objects
            .iter()
            .map(|o| serde_norway::to_string(o).unwrap())
            .collect();
        std::fs::write(dir.path().join(format!("{i:03}.yaml")), yaml.join("---\n")).unwrap();
        kept += 1;
    }
    let (summary, failed) = helm::checkov(dir.path());
    eprintln!("checkov over {kept} renders: {summary} (every render but the Jobs trigger makes)");
    assert!(kept > 20, "only {kept} renders");
    assert!(failed.is_empty(), "{failed:#?}");
}
