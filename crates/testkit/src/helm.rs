//! The chart as helm renders it: the one place the tests find helm (`.tools/bin/helm`, which
//! `scripts/test.sh` installs, else `helm` on PATH) and split its output into objects.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The crate's root, where `charts/package-executor` lives.
pub fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// A tool the chart tests run (`helm`, `kubernetes-validate`): `.tools/bin/NAME`, which
/// `scripts/test.sh` installs, else NAME on PATH; a missing tool fails the test, saying how to
/// install it (these tests never skip).
pub fn tool(name: &str) -> PathBuf {
    let local = root().join(".tools/bin").join(name);
    if local.exists() {
        return local;
    }
    if let Ok(out) = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        && out.status.success()
    {
        return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    }
    panic!(
        "{name} is not installed. `./scripts/test.sh install` installs it (helm built from its Go \
         module by tools/build.sh and linked into .tools/bin, kubernetes-validate with pip); \
         these tests never skip."
    );
}

/// The helm binary.
pub fn bin() -> PathBuf {
    tool("helm")
}

/// `helm template pe charts/package-executor ARGS` in the crate's root, as it ended.
pub fn template_output(args: &[&str]) -> Output {
    Command::new(bin())
        .args(["template", "pe", "charts/package-executor"])
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("helm: {e}; scripts/test.sh installs it into .tools/bin"))
}

/// `helm template pe charts/package-executor ARGS`, which must succeed: its YAML.
pub fn template(args: &[&str]) -> String {
    let out = template_output(args);
    assert!(
        out.status.success(),
        "helm template {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).expect("helm prints UTF-8");
    record(&yaml);
    yaml
}

/// checkov's judgement of a render file or a folder of them (`--framework kubernetes`,
/// `--skip-download`: it asks nothing of the network): its summary, and each failed check as
/// `ID resource in file (name)`. A folder's name must not start with "." (checkov skips it).
pub fn checkov(target: &Path) -> (serde_json::Value, Vec<String>) {
    let flag = if target.is_dir() { "-d" } else { "-f" };
    let out = Command::new(tool("checkov"))
        .args([
            "--framework",
            "kubernetes",
            "--skip-download",
            "--quiet",
            "-o",
            "json",
            flag,
        ])
        .arg(target)
        .output()
        .unwrap_or_else(|e| panic!("checkov: {e}; scripts/test.sh installs it into .tools/bin"));
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "checkov: {e}\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let v = if v.is_array() { v[0].clone() } else { v };
    // checkov skips what it cannot see (a folder whose name starts with "."): judging nothing
    // must not pass.
    assert!(
        v["summary"]["resource_count"].as_u64().unwrap_or(0) > 0,
        "checkov read no resource in {}: {v}",
        target.display()
    );
    let failed = v["results"]["failed_checks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            format!(
                "{} {} in {} ({})",
                f["check_id"], f["resource"], f["file_path"], f["check_name"]
            )
        })
        .collect();
    (v["summary"].clone(), failed)
}

/// The folder the chart tests keep their renders in when `PE_CHART_RENDERS` names one: the
/// end-to-end tier runs them with it set, then puts every render through the real API server
/// (`tests/cluster/renders.rs`).
pub const RENDERS_ENV: &str = "PE_CHART_RENDERS";

/// Keeps a render (YAML or JSON objects) for the API server's judgement, one file per distinct
/// render, when [`RENDERS_ENV`] is set; does nothing otherwise, nor for a render of no objects
/// (a subchart turned off), which `kubectl apply` would refuse as empty.
pub fn record(rendered: &str) {
    use sha2::Digest as _;
    let Some(dir) = std::env::var_os(RENDERS_ENV) else {
        return;
    };
    if docs(rendered).is_empty() {
        return;
    }
    let digest = sha2::Sha256::digest(rendered.as_bytes());
    let name: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    std::fs::create_dir_all(&dir).expect("the renders folder");
    std::fs::write(Path::new(&dir).join(format!("{name}.yaml")), rendered).expect("write a render");
}

/// The documents of a multi-document YAML stream, one value each (empty ones left out).
pub fn docs(yaml: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize as _;
    serde_norway::Deserializer::from_str(yaml)
        .map(|d| serde_json::Value::deserialize(d).expect("helm renders YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The objects of a multi-document YAML stream.
pub fn objects(yaml: &str) -> Vec<serde_json::Value> {
    docs(yaml)
        .into_iter()
        .filter(serde_json::Value::is_object)
        .collect()
}

/// The chart's alert rules as a Prometheus rule file (`{"groups": …}`), and the rendered
/// PrometheusRule they come from.
pub fn alert_rules() -> (serde_json::Value, serde_json::Value) {
    let rendered = template(&[
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--api-versions",
        "monitoring.coreos.com/v1/PrometheusRule",
        "--show-only",
        "templates/prometheusrule.yaml",
    ]);
    let rule = objects(&rendered)
        .into_iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("the chart renders a PrometheusRule");
    (serde_json::json!({"groups": rule["spec"]["groups"]}), rule)
}

/// Values the chart's schema refuses because the API server would refuse what they render
/// (issue 51, defect 5: every value the schema accepts must give objects the API server
/// accepts). The chart tests check that the schema refuses each; the end-to-end tier renders each
/// without the schema and checks that the API server refuses it too, so no entry of the
/// schema is stricter than the server on these.
pub const REFUSED_BY_THE_API_SERVER: &[&str] = &[
    "database.port=70000",
    // Indexed Jobs take at most 100,000 completions and parallelism (the API server's
    // validation of batch/v1 Job).
    "run.shards=100001",
    "metrics.pushUrl=http://pushgateway:9091,metrics.pushPort=70000",
    "networkPolicy.apiServer.cidrs={10.0.0.0/33}",
    "networkPolicy.apiServer.cidrs={10.0.0/8}",
    "networkPolicy.apiServer.ports={70000}",
    "networkPolicy.dns.ports={0}",
    "sweep.enabled=true,sweep.timeZone=Europe/Berln",
    "sweep.enabled=true,sweep.timeZone=Local",
    "sweep.enabled=true,sweep.schedule=TZ=UTC 0 * * * *",
    "sweep.enabled=true,sweep.schedule=0 * * *",
    "serviceAccount.create=false,serviceAccount.name=Ops_Account,serviceAccount.triggerName=t",
    "priorityClassName=High_Priority",
    "podLabels.team=has space",
    "podLabels.bad key=x",
    "podAnnotations.bad key=x",
    "nodeSelector.kubernetes\\.io/os=linux!",
    "tolerations[0].operator=Exists,tolerations[0].value=x",
    "tolerations[0].key=k,tolerations[0].tolerationSeconds=10,tolerations[0].effect=NoSchedule",
    "tolerations[0].value=x",
    "tolerations[0].key=bad key,tolerations[0].operator=Exists",
    "extraEnv[0].name=X,extraEnv[0].value=a,extraEnv[0].valueFrom.fieldRef.fieldPath=metadata.name",
    "extraEnv[0].name=X,extraEnv[0].valueFrom.fieldRef.fieldPath=spec.bogus",
    "extraEnv[0].name=X,extraEnv[0].valueFrom.secretKeyRef.name=s",
    "extraVolumes[0].name=scratch,extraVolumes[0].emptyDir.medium=Memory,extraVolumes[0].configMap.name=x",
    "extraVolumes[0].name=Scratch,extraVolumes[0].emptyDir.medium=Memory",
    "extraVolumeMounts[0].name=scratch",
    "initContainers[0].name=wait",
    "envFrom[0].configMapRef.name=a,envFrom[0].secretRef.name=b",
    "topologySpreadConstraints[0].maxSkew=0,topologySpreadConstraints[0].topologyKey=k,topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
    "networkPolicy.database.to[0].ipBlock.cidr=10.1.2.0/24,networkPolicy.database.to[0].podSelector.matchLabels.app=db",
];

/// Values the schema refuses although the API server would accept what they render: names and
/// keys no Secret or ConfigMap can have (the server checks the reference's shape only where it
/// creates the object), so the pod would wait for ever. Found by the end-to-end tier's check of
/// the list above.
pub const REFUSED_AS_NAMES_NOTHING_CAN_HAVE: &[&str] = &[
    "imagePullSecrets[0].name=Bad_Name",
    "database.tls.sslmode=verify-full,database.tls.ca.configMap=Bad_CM",
    "database.tls.sslmode=verify-full,database.tls.ca.configMap=db-ca,database.tls.ca.key=bad/key",
];
