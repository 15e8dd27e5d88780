//! The chart as helm renders it: the one place the tests find helm (`.tools/bin/helm`, which
//! `scripts/test.sh` installs, else `helm` on PATH) and split its output into objects.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The crate's root, where `charts/package-executor` lives.
pub fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The helm binary.
pub fn bin() -> PathBuf {
    let local = root().join(".tools/bin/helm");
    if local.exists() { local } else { "helm".into() }
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
    String::from_utf8(out.stdout).expect("helm prints UTF-8")
}

/// The objects of a multi-document YAML stream, one value each.
pub fn objects(yaml: &str) -> Vec<serde_json::Value> {
    yaml.split("\n---")
        .filter_map(|doc| serde_norway::from_str::<serde_json::Value>(doc).ok())
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
