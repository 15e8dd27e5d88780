//! The alert rules as the chart ships them: extracted from the rendered PrometheusRule and run
//! through `promtool check rules` and `promtool test rules` (the Prometheus mixins'
//! convention) with `tests/prometheus/alerts.test.yml`, where every alert fires on the series
//! that should fire it and stays silent on a near miss. Needs Debian's `prometheus` package for
//! `promtool` (`scripts/test.sh` installs it) and helm; it fails when either is missing.

use package_executor_testkit::helm;

use std::process::Command;

use helm::root;

fn output(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}; scripts/test.sh installs it (Debian's prometheus package for promtool, helm into .tools/bin)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

#[test]
fn the_charts_alert_rules_pass_promtools_unit_tests() {
    let (rules, rule) = helm::alert_rules();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.yml"),
        serde_norway::to_string(&rules).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        root().join("tests/prometheus/alerts.test.yml"),
        dir.path().join("alerts.test.yml"),
    )
    .unwrap();
    let checked = output(
        Command::new("promtool")
            .args(["check", "rules", "rules.yml"])
            .current_dir(dir.path()),
        "promtool check rules",
    );
    println!("{checked}");
    let tested = output(
        Command::new("promtool")
            .args(["test", "rules", "alerts.test.yml"])
            .current_dir(dir.path()),
        "promtool test rules",
    );
    println!("{tested}");
    // Every alert the chart defines has a case in the unit tests.
    let tests = std::fs::read_to_string(root().join("tests/prometheus/alerts.test.yml")).unwrap();
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for r in group["rules"].as_array().unwrap() {
            let name = r["alert"].as_str().unwrap();
            assert!(
                tests.contains(&format!(
                    "alertname: {name}\n        exp_alerts:\n          - "
                )),
                "{name} has no firing case"
            );
            assert!(
                tests.contains(&format!("alertname: {name}\n        exp_alerts: []")),
                "{name} has no silent case"
            );
        }
    }
}
