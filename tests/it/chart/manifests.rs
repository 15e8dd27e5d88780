//! The Helm chart, the kind manifests and `trigger --dry-run`: `helm lint --strict`, strict
//! validation against the real Kubernetes schemas (kubernetes-validate, Kubernetes 1.33, the
//! oldest minor k8s-openapi 0.29 supports), and parsing into k8s-openapi types.

use package_executor_testkit::helm::{self, docs, root, tool};
use package_executor_testkit::k8s_rules;

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec};
use k8s_openapi::api::core::v1::PodSpec;
use serde_json::Value;

const KUBE_VERSION: &str = "1.33.0";

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A chart render: valid against the Kubernetes schemas, and meeting the rules no schema states
/// (`crates/testkit/src/k8s_rules.rs`), for its own objects and for the Job `trigger` makes of its
/// recovery template.
fn validate(label: &str, yaml: &str) {
    validate_schema(label, yaml);
    let d = docs(yaml);
    let mut broken = k8s_rules::check_render(&d, &[]);
    broken.extend(triggered_rules(&d));
    assert!(broken.is_empty(), "{label}: {broken:#?}");
}

/// The Job `trigger --from-cronjob` makes of the render's recovery template (as the cluster
/// returns it, with a uid), against the rules, with the account the release hook runs it as.
fn triggered_rules(d: &[Value]) -> Vec<String> {
    let Some(cron) = d.iter().find(|x| {
        x["kind"] == "CronJob"
            && x["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .ends_with("-recovery")
    }) else {
        return Vec::new();
    };
    let job = triggered_job(
        cron,
        Some("3f1c2a9e-0000-4000-8000-000000000001"),
        "a-publication-with-a-long-name-1234567890",
        Some("ns"),
    );
    let job = serde_json::to_value(&job).unwrap();
    helm::record(&serde_json::to_string(&job).unwrap());
    let account = d
        .iter()
        .find(|x| x["metadata"]["labels"]["app.kubernetes.io/component"] == "release-trigger")
        .and_then(|x| x["spec"]["template"]["spec"]["serviceAccountName"].as_str())
        .unwrap_or("default")
        .to_owned();
    k8s_rules::check_triggered(&job, d, &account)
}

/// The Job `trigger --from-cronjob` makes of a rendered recovery CronJob, as the cluster returns
/// it (with `uid`, when given).
fn triggered_job(
    cron: &Value,
    uid: Option<&str>,
    publication: &str,
    namespace: Option<&str>,
) -> Job {
    let mut cron: CronJob = serde_json::from_value(cron.clone()).unwrap();
    cron.metadata.uid = uid.map(str::to_owned);
    package_executor::k8s::job::finalize(
        package_executor::k8s::job::from_cron_job(&cron).unwrap(),
        publication,
        namespace,
    )
}

/// `helm template pe charts/package-executor --kube-version KUBE_VERSION VALUES`.
fn render(values: &[&str]) -> String {
    let mut args = vec![
        "template",
        "pe",
        "charts/package-executor",
        "--kube-version",
        KUBE_VERSION,
    ];
    args.extend(values);
    run_helm(&args)
}

fn validate_schema(label: &str, yaml: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{label}.yaml"));
    std::fs::write(&file, yaml).unwrap();
    let out = run(Command::new(tool("kubernetes-validate"))
        .args(["--strict", "-k", KUBE_VERSION])
        .arg(&file));
    assert!(
        !out.contains("ERROR") && !out.contains("WARN"),
        "{label}: {out}"
    );
}

fn find<'a>(docs: &'a [Value], kind: &str, name_part: &str) -> &'a Value {
    docs.iter()
        .find(|d| {
            d["kind"] == kind
                && d["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .contains(name_part)
        })
        .unwrap_or_else(|| panic!("no {kind} named *{name_part}*"))
}

/// The object of `kind` named exactly `name`.
fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// Supporting objects are ordinary release resources (`helm uninstall` removes them, an
/// upgrade restarts nothing that did not change); only what must run at a point of the
/// lifecycle is a hook: the migration, the short Job that creates a release's recovery Job, and
/// the check before a rollback.
fn assert_only_lifecycle_hooks(docs: &[Value]) {
    for d in docs {
        let name = d["metadata"]["name"].as_str().unwrap();
        let hook = d["metadata"]["annotations"]["helm.sh/hook"].as_str();
        match hook {
            None => {}
            Some("post-install,post-upgrade") if name.ends_with("-migrate") => {}
            Some("post-install,post-upgrade") => {
                assert!(name.contains("-release-"), "{name}")
            }
            Some("pre-rollback") => assert!(name.ends_with("-rollback-check"), "{name}"),
            Some("test") => assert!(name.ends_with("-test"), "{name}"),
            Some(other) => panic!("{} {name} is a {other} hook", d["kind"]),
        }
    }
}

/// The spec of the suspended CronJob whose jobTemplate every recovery Job is made from.
fn recovery_template(docs: &[Value]) -> JobSpec {
    let cron: CronJob = serde_json::from_value(find(docs, "CronJob", "recovery").clone()).unwrap();
    let spec = cron.spec.unwrap();
    assert_eq!(spec.suspend, Some(true), "a template, never scheduled");
    spec.job_template.spec.unwrap()
}

/// The Secret key a pod's (first) container reads `DATABASE_URL` from: which login it holds.
fn database_url_key(pod: &PodSpec) -> String {
    let env = pod.containers[0].env.as_ref().unwrap();
    let url = env.iter().find(|e| e.name == "DATABASE_URL").unwrap();
    let from = url.value_from.as_ref().unwrap();
    from.secret_key_ref.as_ref().unwrap().key.clone()
}

/// The properties every executor pod must have.
fn assert_hardened(pod: &PodSpec, memory: &str) {
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(
        psc.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_owned()][..])
    );
    assert_eq!(
        c.termination_message_policy.as_deref(),
        Some("FallbackToLogsOnError")
    );
    let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["memory"].0, memory);
}

fn assert_run_job(spec: &JobSpec, memory: &str) {
    let rules = &spec.pod_failure_policy.as_ref().unwrap().rules;
    // Fail fast on the codes retrying cannot help: the Job, or in Indexed mode the shard.
    let fail = rules.iter().find(|r| r.on_exit_codes.is_some()).unwrap();
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    assert_eq!(fail.action, if indexed { "FailIndex" } else { "FailJob" });
    assert_eq!(
        fail.on_exit_codes.as_ref().unwrap().values,
        vec![1, 2, 5, 6]
    );
    let ignore = rules.iter().find(|r| r.action == "Ignore").unwrap();
    assert_eq!(
        ignore.on_pod_conditions.as_ref().unwrap()[0].type_,
        "DisruptionTarget"
    );
    // Every attempt gets its full 1800 s, and each of the 3 retries the Job controller's delay
    // before it (10 s, doubled each time: 10, 20, 40).
    assert_eq!(spec.active_deadline_seconds, Some(4 * 1800 + 10 + 20 + 40));
    assert_eq!(spec.ttl_seconds_after_finished, Some(86_400));
    let pod = spec.template.spec.as_ref().unwrap();
    assert_hardened(pod, memory);
    let env = pod.containers[0].env.as_ref().unwrap();
    let deadline = env
        .iter()
        .find(|e| e.name == "PACKAGE_EXECUTOR_DEADLINE")
        .unwrap()
        .value
        .clone()
        .unwrap();
    let deadline: i64 = deadline.trim_end_matches('s').parse().unwrap();
    let grace = pod.termination_grace_period_seconds.unwrap_or(30);
    assert!(
        deadline < 1800 - grace,
        "--deadline {deadline}s leaves time to write the summary"
    );
    let job_name = env
        .iter()
        .find(|e| e.name == "PACKAGE_EXECUTOR_JOB_NAME")
        .unwrap();
    assert!(
        job_name.value_from.as_ref().unwrap().field_ref.is_some(),
        "the Job's name comes from the downward API"
    );
}

/// `helm ARGS`. Every render (`helm template`) of this file is checked against the rules a
/// schema cannot state (`crates/testkit/src/k8s_rules.rs`): names and what the controllers derive from
/// them, hooks, and the Job `trigger` makes of its recovery template. (The accounts rule needs
/// to know which accounts the values say exist elsewhere: `validate` and the accounts test
/// check it.)
fn run_helm(args: &[&str]) -> String {
    let out = run(Command::new(tool("helm")).args(args).current_dir(root()));
    if args.first() == Some(&"template") {
        helm::record(&out);
        let d = docs(&out);
        let mut broken = k8s_rules::check_shape(&d);
        broken.extend(triggered_rules(&d));
        assert!(broken.is_empty(), "helm {args:?}: {broken:#?}");
    }
    out
}

const ALL_ON: [&str; 16] = [
    "--set",
    "metrics.dashboard.enabled=true",
    "--set",
    "postgresql.enabled=true",
    "--set",
    "sweep.enabled=true",
    "--set",
    "run.shards=3",
    "--set",
    "rbac.triggerInCluster=true",
    "--set",
    "migration.createRoles=true",
    "--set",
    "database.timeouts.connect=45s",
    "--set",
    "database.timeouts.answerMargin=5s",
];

#[test]
fn chart_lints_validates_and_parses() {
    run_helm(&["lint", "--strict", "charts/package-executor"]);
    let mut lint_all = vec!["lint", "--strict", "charts/package-executor"];
    lint_all.extend(ALL_ON);
    run_helm(&lint_all);

    let default = run_helm(&[
        "template",
        "pe",
        "charts/package-executor",
        "--kube-version",
        KUBE_VERSION,
    ]);
    validate("default", &default);
    let d = docs(&default);
    assert_only_lifecycle_hooks(&d);
    let migrate = find(&d, "Job", "migrate");
    assert_eq!(
        migrate["metadata"]["annotations"]["helm.sh/hook"],
        "post-install,post-upgrade"
    );
    assert!(
        !d.iter()
            .any(|x| x["kind"] == "Secret" || x["kind"] == "StatefulSet")
    );
    assert!(!d.iter().any(|x| {
        x["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("-sweep"))
    }));
    // The recovery Job's one definition: a suspended CronJob's jobTemplate.
    let spec = recovery_template(&d);
    assert_eq!(spec.backoff_limit, Some(3));
    assert_run_job(&spec, "268Mi");
    let migrate: Job = serde_json::from_value(migrate.clone()).unwrap();
    let mpod = migrate.spec.unwrap().template.spec.unwrap();
    assert_hardened(&mpod, "128Mi");
    assert_eq!(database_url_key(&mpod), "migrate-url");
    assert_eq!(
        database_url_key(spec.template.spec.as_ref().unwrap()),
        "executor-url"
    );
    let role = named(&d, "Role", "pe-package-executor");
    assert_eq!(
        role["rules"].as_array().unwrap().len(),
        1,
        "the run pods may record Events, nothing else"
    );
    // The release hook that creates each publication's recovery Job runs as trigger's own
    // account, which holds no database login; the run and migrate pods cannot create Jobs.
    let release = find(&d, "Job", "-release-1");
    let release_pod = &release["spec"]["template"]["spec"];
    assert_eq!(
        release_pod["serviceAccountName"],
        "pe-package-executor-trigger"
    );
    assert!(
        release_pod["containers"][0]
            .get("env")
            .is_none_or(|env| { !env.to_string().contains("secretKeyRef") })
    );
    let args: Vec<&str> = release_pod["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        &args[..4],
        [
            "trigger",
            "--from-cronjob",
            "pe-package-executor-recovery",
            "--publication-id",
        ]
    );
    assert!(args[4].starts_with("release-1-"), "{args:?}");
    for pod in [
        &find(&d, "Job", "migrate")["spec"]["template"]["spec"],
        &find(&d, "CronJob", "recovery")["spec"]["jobTemplate"]["spec"]["template"]["spec"],
    ] {
        assert_eq!(pod["serviceAccountName"], "pe-package-executor");
    }

    let mut all_args = vec![
        "template",
        "pe",
        "charts/package-executor",
        "--kube-version",
        KUBE_VERSION,
    ];
    all_args.extend(ALL_ON);
    let all = run_helm(&all_args);
    validate("all-on", &all);
    let a = docs(&all);
    assert_only_lifecycle_hooks(&a);
    let migrate = find(&a, "Job", "migrate");
    assert_eq!(
        named(&a, "Role", "pe-package-executor")["rules"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let trigger_role = named(&a, "Role", "pe-package-executor-trigger");
    assert_eq!(
        trigger_role["rules"],
        serde_json::json!([
            {"apiGroups": ["batch"], "resources": ["cronjobs"],
             "resourceNames": ["pe-package-executor-recovery"], "verbs": ["get"]},
            {"apiGroups": ["batch"], "resources": ["jobs"],
             "verbs": ["create", "delete", "get", "list", "watch"]}
        ])
    );
    let cron: CronJob = serde_json::from_value(find(&a, "CronJob", "sweep").clone()).unwrap();
    let cron_spec = cron.spec.unwrap();
    assert_eq!(cron_spec.concurrency_policy.as_deref(), Some("Forbid"));
    let sweep_job = cron_spec.job_template.spec.unwrap();
    assert_eq!(sweep_job.completion_mode.as_deref(), Some("Indexed"));
    assert_eq!(sweep_job.backoff_limit_per_index, Some(3));
    assert_eq!(sweep_job.backoff_limit, None);
    assert_run_job(&sweep_job, "268Mi");
    // The sweep's pods are labelled as the sweep, not as a recovery Job's.
    let sweep_labels = sweep_job
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert_eq!(sweep_labels["app.kubernetes.io/component"], "sweep");
    let sweep_pod = sweep_job.template.spec.unwrap();
    assert_eq!(
        sweep_pod.containers[0].args.as_deref(),
        Some(&["run".to_owned(), "--full-scan".to_owned()][..]),
        "the sweep proves every project"
    );
    let env = sweep_pod.containers[0].env.clone().unwrap();
    assert_eq!(
        env.iter()
            .find(|e| e.name == "PACKAGE_EXECUTOR_SHARD_COUNT")
            .unwrap()
            .value
            .as_deref(),
        Some("3")
    );
    let value = |env: &[k8s_openapi::api::core::v1::EnvVar], name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    // The database timeouts that are set reach every pod that connects, and only those.
    assert_eq!(
        value(&env, "PACKAGE_EXECUTOR_CONNECT_TIMEOUT").as_deref(),
        Some("45s")
    );
    assert_eq!(
        value(&env, "PACKAGE_EXECUTOR_ANSWER_MARGIN").as_deref(),
        Some("5s")
    );
    assert_eq!(value(&env, "PACKAGE_EXECUTOR_STATEMENT_TIMEOUT"), None);
    let migrate: Job = serde_json::from_value(migrate.clone()).unwrap();
    let migrate_container = &migrate.spec.unwrap().template.spec.unwrap().containers[0];
    assert!(
        migrate_container
            .args
            .as_ref()
            .unwrap()
            .contains(&"--create-roles".to_owned())
    );
    assert_eq!(
        value(
            migrate_container.env.as_ref().unwrap(),
            "PACKAGE_EXECUTOR_CONNECT_TIMEOUT"
        )
        .as_deref(),
        Some("45s")
    );
}

/// `helm template` as a user types it, with no flags: helm's default Kubernetes version must
/// satisfy the chart's `kubeVersion`.
#[test]
fn chart_renders_with_no_flags() {
    let out = run_helm(&["template", "charts/package-executor"]);
    assert!(docs(&out).iter().any(|d| d["kind"] == "Job"));
}

const TLS_ON: [&str; 12] = [
    "--set",
    "database.tls.sslmode=verify-full",
    "--set",
    "database.tls.ca.configMap=db-ca",
    "--set",
    "database.tls.clientCert.executorSecret=pe-executor-cert",
    "--set",
    "database.tls.clientCert.migrateSecret=pe-migrator-cert",
    "--set",
    "sweep.enabled=true",
    "--set",
    "run.shards=2",
];

/// Each pod gets the CA bundle and its own job's client certificate, read-only, the key file
/// mode 0400, and libpq's variables pointing at them.
fn assert_tls(pod: &PodSpec, cert_secret: &str) {
    let c = &pod.containers[0];
    let env: std::collections::BTreeMap<_, _> = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .filter(|e| e.name.starts_with("PGSSL"))
        .map(|e| (e.name.as_str(), e.value.as_deref().unwrap()))
        .collect();
    assert_eq!(env["PGSSLMODE"], "verify-full");
    assert_eq!(env["PGSSLROOTCERT"], "/etc/package-executor/tls/ca/ca.crt");
    assert_eq!(
        env["PGSSLCERT"],
        "/etc/package-executor/tls/client/client.crt"
    );
    assert_eq!(
        env["PGSSLKEY"],
        "/etc/package-executor/tls/client/client.key"
    );
    let mounts = c.volume_mounts.as_ref().unwrap();
    assert_eq!(mounts.len(), 2);
    assert!(mounts.iter().all(|m| m.read_only == Some(true)));
    let volumes = pod.volumes.as_ref().unwrap();
    let ca = volumes.iter().find(|v| v.name == "tls-ca").unwrap();
    assert_eq!(ca.config_map.as_ref().unwrap().name, "db-ca");
    let client = volumes.iter().find(|v| v.name == "tls-client").unwrap();
    let secret = client.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some(cert_secret));
    assert_eq!(secret.default_mode, Some(0o400));
    assert_eq!(
        pod.security_context.as_ref().unwrap().fs_group,
        Some(65532),
        "the non-root user reads the key through its group"
    );
}

#[test]
fn chart_mounts_tls_material_for_each_job() {
    let mut args = vec![
        "template",
        "pe",
        "charts/package-executor",
        "--kube-version",
        KUBE_VERSION,
    ];
    args.extend(TLS_ON);
    run_helm(
        &[
            &["lint", "--strict", "charts/package-executor"][..],
            &TLS_ON[..],
        ]
        .concat(),
    );
    let out = run_helm(&args);
    validate("tls", &out);
    let d = docs(&out);
    assert_only_lifecycle_hooks(&d);
    let recovery = recovery_template(&d);
    assert_tls(recovery.template.spec.as_ref().unwrap(), "pe-executor-cert");
    let migrate: Job = serde_json::from_value(find(&d, "Job", "migrate").clone()).unwrap();
    assert_tls(
        migrate.spec.unwrap().template.spec.as_ref().unwrap(),
        "pe-migrator-cert",
    );
    let cron: CronJob = serde_json::from_value(find(&d, "CronJob", "sweep").clone()).unwrap();
    let sweep = cron.spec.unwrap().job_template.spec.unwrap();
    assert_tls(sweep.template.spec.as_ref().unwrap(), "pe-executor-cert");

    // Without TLS values, no PGSSL* variable and no volume: the URL decides alone.
    let plain = run_helm(&[
        "template",
        "pe",
        "charts/package-executor",
        "--kube-version",
        KUBE_VERSION,
    ]);
    assert!(!plain.contains("PGSSL") && !plain.contains("tls-client"));
}

const METRICS_ON: [&str; 6] = [
    "--set",
    "metrics.pushUrl=http://pushgateway.monitoring:9091",
    "--set",
    "metrics.prometheusRule.enabled=true",
    "--set",
    "sweep.enabled=true",
];

/// The PrometheusRule renders only where its API exists, is well formed, and its expressions
/// name only metrics this program emits; the pods get the push URL and may reach it.
#[test]
fn chart_pushes_metrics_and_renders_alert_rules() {
    run_helm(
        &[
            &["lint", "--strict", "charts/package-executor"][..],
            &METRICS_ON[..],
        ]
        .concat(),
    );
    let base = [
        "template",
        "pe",
        "charts/package-executor",
        "--kube-version",
        KUBE_VERSION,
    ];
    let without_api = run_helm(&[&base[..], &METRICS_ON[..]].concat());
    assert!(
        !docs(&without_api)
            .iter()
            .any(|d| d["kind"] == "PrometheusRule"),
        "no PrometheusRule where the API is missing"
    );
    let with_api = run_helm(
        &[
            &base[..],
            &METRICS_ON[..],
            &["--api-versions", "monitoring.coreos.com/v1/PrometheusRule"][..],
        ]
        .concat(),
    );
    let all = docs(&with_api);
    // The Kubernetes schemas do not know the CRD: validate everything else strictly, and the
    // rule's structure here.
    let others: Vec<&Value> = all
        .iter()
        .filter(|d| d["kind"] != "PrometheusRule")
        .collect();
    let yaml: String = others
        .iter()
        .map(|d| format!("---\n{}", serde_norway::to_string(d).unwrap()))
        .collect();
    validate("metrics", &yaml);
    let rule = find(&all, "PrometheusRule", "pe");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    let alerts: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    assert_eq!(
        alerts,
        [
            "PackageExecutorConfigurationError",
            "PackageExecutorDatabaseUnavailable",
            "PackageExecutorRejectedPackages",
            "PackageExecutorProjectsUnresolved",
            "PackageExecutorReplayMismatch",
            "PackageExecutorNoRecentSuccess",
            "PackageExecutorNeverSucceeded",
            "PackageExecutorNoRuns",
        ]
    );
    for r in rules {
        let expr = r["expr"].as_str().unwrap();
        assert!(r["labels"]["severity"].is_string());
        assert!(
            r["annotations"]["summary"].is_string() && r["annotations"]["description"].is_string()
        );
        assert!(
            r["annotations"]["runbook_url"]
                .as_str()
                .is_some_and(|u| u.contains("operations.md#")),
            "{r}"
        );
        let mut named = 0;
        for (i, _) in expr.match_indices("package_executor_") {
            let name: String = expr[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                package_executor::metrics::NAMES.contains(&name.as_str()),
                "{expr} names {name}, which the executor does not emit"
            );
            named += 1;
        }
        assert!(named > 0, "{expr} names a metric");
    }
    let recovery = recovery_template(&all);
    let env = recovery.template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    let value = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        value("PACKAGE_EXECUTOR_METRICS_PUSH_URL"),
        "http://pushgateway.monitoring:9091"
    );
    assert_eq!(value("PACKAGE_EXECUTOR_METRICS_JOB"), "package_executor");
    // The grouping key's instance names the release and its namespace.
    let instance = value("PACKAGE_EXECUTOR_METRICS_INSTANCE");
    assert!(instance.starts_with("pe."), "{instance}");
    let policy = find(&all, "NetworkPolicy", "pe");
    assert!(
        policy["spec"]["egress"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["ports"][0]["port"] == 9091),
        "the pods may reach the Pushgateway"
    );
}

/// `manifests/` is rendered from the chart (`scripts/render-manifests.sh`), never written by
/// hand: this fails when it is out of date. It validates, meets the rules, and holds the chart's
/// Jobs (the migration, the release's trigger, and the recovery template's). The two Jobs are a
/// file of their own, deleted and created anew (their pod templates are immutable, so applying a
/// changed one over the old is refused), and the other file holds no Job.
#[test]
fn manifests_are_the_charts_render() {
    let fresh = tempfile::tempdir().unwrap();
    run(Command::new(root().join("scripts/render-manifests.sh"))
        .arg(fresh.path())
        .env(
            "PATH",
            format!(
                "{}:{}",
                root().join(".tools/bin").display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        ));
    let mut whole = String::new();
    for file in ["10-package-executor.yaml", "20-jobs.yaml"] {
        let committed = std::fs::read_to_string(root().join("manifests").join(file)).unwrap();
        let rendered = std::fs::read_to_string(fresh.path().join(file)).unwrap();
        assert!(
            committed == rendered,
            "manifests/{file} is out of date: run scripts/render-manifests.sh and commit the result"
        );
        whole.push_str(&committed);
    }
    let namespace = std::fs::read_to_string(root().join("manifests/00-namespace.yaml")).unwrap();
    validate_schema("namespace", &namespace);
    validate("manifests", &whole);
    let d = docs(&whole);
    let spec = recovery_template(&d);
    assert_run_job(&spec, "268Mi");
    let migrate: Job = serde_json::from_value(find(&d, "Job", "-migrate").clone()).unwrap();
    assert_hardened(&migrate.spec.unwrap().template.spec.unwrap(), "128Mi");
    assert!(
        d.iter().any(|x| x["kind"] == "StatefulSet"),
        "the development PostgreSQL"
    );
    let jobs = docs(&std::fs::read_to_string(root().join("manifests/20-jobs.yaml")).unwrap());
    assert_eq!(jobs.len(), 2, "the migration and the release's trigger");
    assert!(jobs.iter().all(|j| j["kind"] == "Job"));
    let rest =
        docs(&std::fs::read_to_string(root().join("manifests/10-package-executor.yaml")).unwrap());
    assert!(
        rest.iter().all(|x| x["kind"] != "Job"),
        "no Job to apply over"
    );
    assert!(root().join("tests/e2e/kind.sh").exists());
}

fn dry_run(extra: &[&str]) -> Job {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_package-executor"));
    cmd.args([
        "trigger",
        "--publication-id",
        "pub-7",
        "--namespace",
        "apps",
        "--dry-run",
    ])
    .args(extra);
    let yaml = run(&mut cmd);
    validate_schema("dry-run", &yaml);
    // Its name and what the Job controller derives from it, and its owner references (its
    // account comes from the template, checked in the template's render).
    let mut broken = Vec::new();
    for job in docs(&yaml) {
        let name = job["metadata"]["name"].as_str().unwrap_or_default();
        k8s_rules::job_name("dry-run", name, &job["spec"], &mut broken);
        k8s_rules::owner_references("dry-run", &job, false, &mut broken);
    }
    assert!(broken.is_empty(), "dry-run: {broken:#?}");
    // Strict YAML parsers refuse a mapping with a key twice (it once printed apiVersion and
    // kind twice): every top-level key once.
    let mut top: Vec<&str> = yaml
        .lines()
        .filter(|l| !l.starts_with([' ', '-', '#']) && !l.is_empty())
        .filter_map(|l| l.split_once(':').map(|(k, _)| k))
        .collect();
    let all = top.len();
    top.sort_unstable();
    top.dedup();
    assert_eq!(top.len(), all, "a top-level key twice:\n{yaml}");
    let d = docs(&yaml);
    assert_eq!(d.len(), 1);
    serde_json::from_value(d[0].clone()).unwrap()
}

#[test]
fn trigger_dry_run_validates_and_parses() {
    // No template, no Job: there are no built-in defaults (the chart is the one definition).
    let out = Command::new(env!("CARGO_BIN_EXE_package-executor"))
        .args(["trigger", "--publication-id", "pub-7", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--from-cronjob") && stderr.contains("--job-template"),
        "{stderr}"
    );
    for gone in [
        "--image",
        "--database-secret",
        "--memory-budget",
        "--shards",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_package-executor"))
            .args(["trigger", "--help"])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains(gone),
            "{gone}"
        );
    }

    // A template's spec is used as given; labels, annotation and restartPolicy are set, and
    // the name is the template's own with the publication's hash.
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("job.yaml");
    std::fs::write(&template, "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: whatever\nspec:\n  backoffLimit: 9\n  template:\n    spec:\n      restartPolicy: OnFailure\n      containers:\n        - name: executor\n          image: example/custom:1\n").unwrap();
    let job = dry_run(&["--job-template", template.to_str().unwrap()]);
    assert_eq!(
        job.metadata.name.as_deref(),
        Some(package_executor::k8s::job::job_name_with("whatever", "pub-7").as_str())
    );
    assert_eq!(job.metadata.namespace.as_deref(), Some("apps"));
    assert_eq!(
        job.metadata.annotations.as_ref().unwrap()["qinglong.io/publication-id"],
        "pub-7"
    );
    let labels = job.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["app.kubernetes.io/name"], "package-executor");
    assert_eq!(labels["app.kubernetes.io/component"], "snapshot-recovery");
    let spec = job.spec.unwrap();
    assert_eq!(spec.backoff_limit, Some(9));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.containers[0].image.as_deref(), Some("example/custom:1"));
}

/// Every name and label value within Kubernetes' limits for the longest release name Helm
/// allows (53 characters), with every option on: 63 for names and label values, 52 for a
/// CronJob (its Jobs get 11 more characters) and a StatefulSet (its pods' revision label).
#[test]
fn names_fit_for_a_53_character_release() {
    let release = "a".repeat(53);
    let mut args = vec![
        "template",
        &release,
        "charts/package-executor",
        "--kube-version",
        KUBE_VERSION,
    ];
    args.extend(ALL_ON);
    let rendered = run_helm(&args);
    validate("53-character release", &rendered);
    let all = docs(&rendered);
    assert!(all.len() > 8, "every option renders its objects");
    for d in &all {
        let kind = d["kind"].as_str().unwrap();
        let name = d["metadata"]["name"].as_str().unwrap();
        let limit = if matches!(kind, "CronJob" | "StatefulSet") {
            52
        } else {
            63
        };
        assert!(
            name.len() <= limit,
            "{kind} {name}: {} > {limit}",
            name.len()
        );
        let mut labels = vec![&d["metadata"]["labels"]];
        labels.push(&d["spec"]["template"]["metadata"]["labels"]);
        labels.push(&d["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]);
        for map in labels.into_iter().filter_map(Value::as_object) {
            for (key, value) in map {
                let value = value.as_str().unwrap_or_default();
                assert!(value.len() <= 63, "{kind} {name}: label {key}={value}");
            }
        }
    }
}

/// What `trigger` submits is the chart's recovery Job: made from the rendered template
/// CronJob (as `--from-cronjob` makes it from the one in the cluster), its Job spec is the
/// template's, whole: service account, Secret, environment, TLS mounts, labels, security
/// context, resources and failure policy.
#[test]
fn trigger_submits_the_charts_recovery_job() {
    let mut args = vec![
        "template",
        "pe",
        "charts/package-executor",
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "run.shards=2",
    ];
    args.extend(TLS_ON);
    let rendered = docs(&run_helm(&args));
    let cron = find(&rendered, "CronJob", "recovery");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("recovery.yaml");
    std::fs::write(&file, serde_norway::to_string(cron).unwrap()).unwrap();
    let job = dry_run(&["--job-template", file.to_str().unwrap()]);
    let template: JobSpec =
        serde_json::from_value(cron["spec"]["jobTemplate"]["spec"].clone()).unwrap();
    assert_eq!(
        job.spec.as_ref().unwrap(),
        &template,
        "the template's Job spec, whole"
    );
    let pod = template.template.spec.as_ref().unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("pe-package-executor")
    );
    assert_tls(pod, "pe-executor-cert");
    let name = job.metadata.name.as_deref().unwrap();
    assert!(name.starts_with("pe-package-executor-recovery-"), "{name}");
    let labels = job.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["app.kubernetes.io/instance"], "pe");
    assert_eq!(labels["app.kubernetes.io/component"], "snapshot-recovery");
    assert_eq!(
        job.metadata.annotations.as_ref().unwrap()["qinglong.io/publication-id"],
        "pub-7"
    );
}

/// `values.schema.json` is strict: a typo in a key, or a wrong type, is an error that names it.
#[test]
fn the_values_schema_refuses_unknown_keys_and_wrong_types() {
    for (set, says) in [
        ("run.shard=2", "additional properties 'shard' not allowed"),
        (
            "sweep.enabld=true",
            "at '/sweep': additional properties 'enabld' not allowed",
        ),
        (
            "run.shards=two",
            "at '/run/shards': got string, want integer",
        ),
        (
            "database.tls.sslmode=verify_full",
            "at '/database/tls/sslmode'",
        ),
        // Kubernetes' own objects, field by field: a typo is an error, not a silent no-op.
        (
            "securityContext.runAsNonroot=true",
            "additional properties 'runAsNonroot' not allowed",
        ),
        (
            "podSecurityContext.runAsUser=abc",
            "at '/podSecurityContext/runAsUser': got string, want integer",
        ),
        (
            "resources.requests.cpu=lots",
            "at '/resources/requests/cpu'",
        ),
        (
            "migration.resources.limit.memory=1Gi",
            "at '/migration/resources': additional properties 'limit' not allowed",
        ),
        (
            "affinity.nodeAfinity.x=1",
            "at '/affinity': additional properties 'nodeAfinity' not allowed",
        ),
        (
            "tolerations[0].operator=Maybe",
            "at '/tolerations/0/operator'",
        ),
        // Values that contradict each other.
        (
            "database.create=true",
            "at '/database/executorUrl': minLength",
        ),
        (
            "database.existingSecret=",
            "at '/database/existingSecret': minLength",
        ),
        (
            "sweep.enabled=true,sweep.schedule=",
            "at '/sweep/schedule': minLength",
        ),
    ] {
        let out = helm::template_output(&["--set", set]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{set} was accepted");
        assert!(err.contains(says), "{set}: {err}");
    }
    // Both make the database Secret.
    let out = helm::template_output(&[
        "--set",
        "postgresql.enabled=true,database.create=true,database.migrateUrl=a,database.executorUrl=b",
    ]);
    assert!(
        !out.status.success(),
        "postgresql.enabled with database.create was accepted"
    );
}

/// The development PostgreSQL's password reaches a URL (percent-encoded), SQL (quotes doubled)
/// and YAML (quoted) intact, with the longest release name: the objects validate and the URL
/// gives the password back.
#[test]
fn a_password_with_quote_at_slash_and_percent_renders_a_working_url() {
    let password = "it's@a/100%";
    let release = "b".repeat(53);
    let rendered = run_helm(&[
        "template",
        &release,
        "charts/package-executor",
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "postgresql.enabled=true",
        "--set-string",
        &format!("postgresql.password={password}"),
    ]);
    validate("password", &rendered);
    let all = docs(&rendered);
    let secret = find(&all, "Secret", "-db");
    for key in ["migrate-url", "executor-url"] {
        let url = url::Url::parse(secret["stringData"][key].as_str().unwrap()).unwrap();
        let decoded =
            url::form_urlencoded::parse(format!("p={}", url.password().unwrap()).as_bytes())
                .next()
                .unwrap()
                .1
                .into_owned();
        assert_eq!(decoded, password, "{key}: {url}");
        assert!(url.host_str().unwrap().ends_with("-postgresql"), "{url}");
    }
    // The development database's own Secret: its password and its init script, which holds the
    // executor login's password (never a ConfigMap, never a plain value in the pod spec).
    assert!(!all.iter().any(|d| d["kind"] == "ConfigMap"));
    let pg_secret = find(&all, "Secret", "-postgresql");
    let sql = pg_secret["stringData"]["01-roles.sql"].as_str().unwrap();
    assert!(sql.contains("PASSWORD 'it''s@a/100%'"), "{sql}");
    assert_eq!(pg_secret["stringData"]["password"], password);
    let pg = find(&all, "StatefulSet", "postgresql");
    let pod = &pg["spec"]["template"]["spec"];
    let env = &pod["containers"][0]["env"][0];
    assert!(env["value"].is_null(), "{env}");
    assert_eq!(env["valueFrom"]["secretKeyRef"]["key"], "password");
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(
        pg["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"],
        "postgresql"
    );
}

/// The run pods' memory limit is the bound docs/contract.md states, at the chart's flags: the
/// chart's `pe.memory` and `coordinator::memory_bound` are one formula, for small budgets (the
/// largest single read counts instead), the default, and large ones, at any concurrency.
#[test]
fn the_memory_limit_is_the_stated_bound() {
    for (budget_mib, concurrency) in [(16u64, 1usize), (50, 2), (96, 4), (256, 8), (1024, 16)] {
        let yaml = run_helm(&[
            "template",
            "pe",
            "charts/package-executor",
            "--set",
            &format!("run.memoryBudgetMiB={budget_mib}"),
            "--set",
            &format!("run.concurrency={concurrency}"),
        ]);
        let d = docs(&yaml);
        let spec = recovery_template(&d);
        let pod = spec.template.spec.unwrap();
        let resources = pod.containers[0].resources.clone().unwrap();
        let want = package_executor::coordinator::memory_bound(budget_mib << 20, concurrency)
            .div_ceil(1 << 20);
        assert_eq!(
            resources.limits.unwrap()["memory"].0,
            format!("{want}Mi"),
            "budget {budget_mib} MiB, concurrency {concurrency}"
        );
        assert_eq!(resources.requests.unwrap()["memory"].0, format!("{want}Mi"));
    }
}

/// Issue 51, defect 2: a memory limit lowered, or a request raised, left the run pods' request
/// above their limit, which the API server refuses. A limit given alone caps nothing below the
/// bound (a limit under the bound is refused, naming what to lower instead); a request given
/// alone raises the limit with it; a request above its limit anywhere (run pods, migration,
/// hook, development database) is refused at render time. The renders that pass are judged by
/// the API server in the end-to-end tier.
#[test]
fn no_request_exceeds_its_limit() {
    let memory = |values: &[&str]| {
        let d = docs_of(values);
        let mut out = Vec::new();
        for kind in ["CronJob"] {
            for doc in d.iter().filter(|doc| doc["kind"] == kind) {
                let r = &doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["resources"];
                out.push((
                    r["requests"]["memory"].as_str().unwrap().to_owned(),
                    r["limits"]["memory"].as_str().unwrap().to_owned(),
                ));
            }
        }
        out
    };
    // The recovery template and the sweep alike.
    let both = |request: &str, limit: &str| vec![(request.to_owned(), limit.to_owned()); 2];
    assert_eq!(
        memory(&["sweep.enabled=true", "resources.requests.memory=1Gi"]),
        both("1Gi", "1Gi")
    );
    assert_eq!(
        memory(&["sweep.enabled=true", "resources.requests.memory=100Mi"]),
        both("100Mi", "268Mi")
    );
    assert_eq!(
        memory(&["sweep.enabled=true", "resources.limits.memory=1Gi"]),
        both("268Mi", "1Gi")
    );
    assert_eq!(
        memory(&[
            "sweep.enabled=true",
            "resources.requests.memory=300Mi",
            "resources.limits.memory=0.5Gi"
        ]),
        both("300Mi", "0.5Gi")
    );
    let refused: [(&[&str], &str); 5] = [
        (
            &["resources.limits.memory=100Mi"],
            "resources.limits.memory (100Mi) is below the run's memory bound, 268Mi",
        ),
        (
            &[
                "resources.requests.memory=1Gi",
                "resources.limits.memory=512Mi",
            ],
            "resources.requests.memory (1Gi) is above resources.limits.memory (512Mi)",
        ),
        (
            &["resources.requests.cpu=2", "resources.limits.cpu=1500m"],
            "resources.requests.cpu (2) is above resources.limits.cpu (1500m)",
        ),
        (
            &["migration.resources.requests.memory=1G"],
            "migration.resources.requests.memory (1G) is above migration.resources.limits.memory (128Mi)",
        ),
        (
            &[
                "postgresql.enabled=true",
                "postgresql.resources.limits.memory=128Mi",
            ],
            "postgresql.resources.requests.memory (256Mi) is above postgresql.resources.limits.memory (128Mi)",
        ),
    ];
    for (values, says) in refused {
        assert_refused(values, says);
    }
    // The development database's resources are the operator's to set (a namespace that asks
    // for CPU limits), and reach its container.
    let d = docs_of(&[
        "postgresql.enabled=true",
        "postgresql.resources.limits.cpu=1",
    ]);
    let db = d
        .iter()
        .find(|doc| doc["kind"] == "StatefulSet")
        .expect("the development database");
    assert_eq!(
        db["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        1
    );
}

/// An authenticated Pushgateway's URL comes from a Secret (never the pod spec), and the
/// NetworkPolicy opens the Pushgateway's port for it as for a plain URL.
#[test]
fn the_push_url_can_come_from_a_secret() {
    let yaml = run_helm(&[
        "template",
        "pe",
        "charts/package-executor",
        "--set",
        "metrics.pushUrlSecret.name=push-credentials",
        "--set",
        "networkPolicy.enabled=true",
    ]);
    let d = docs(&yaml);
    let pod = recovery_template(&d).template.spec.unwrap();
    let env = pod.containers[0].env.clone().unwrap();
    let push = env
        .iter()
        .find(|e| e.name == "PACKAGE_EXECUTOR_METRICS_PUSH_URL")
        .expect("the push URL is set");
    assert_eq!(push.value, None, "never in the pod spec");
    let secret = push
        .value_from
        .as_ref()
        .and_then(|v| v.secret_key_ref.as_ref())
        .expect("from a Secret");
    assert_eq!(
        (secret.name.as_str(), secret.key.as_str()),
        ("push-credentials", "url")
    );
    let policy = find(&d, "NetworkPolicy", "");
    let ports: Vec<i64> = policy["spec"]["egress"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rule| rule["ports"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["port"].as_i64())
        .collect();
    assert!(
        ports.contains(&9091),
        "the Pushgateway's port is open: {ports:?}"
    );
}

/// The rules module is not vacuous: each rule flags the defect it states (each one the chart
/// or `trigger` had before these rules: a 23-character release's Indexed recovery Job, the
/// sweep's Jobs at 11 shards, blockOwnerDeletion and a controller reference on a triggered
/// Job, a pod naming an account nothing made, a migration hook longer than Helm waits).
#[test]
fn the_rules_catch_what_they_state() {
    use serde_json::json;
    let mut broken = Vec::new();
    // `trigger` cut names to 63 before: a 2-shard Job's last pod was `<63>-1`.
    let name = format!("{}-{}", "r".repeat(50), "0123456789ab");
    k8s_rules::job_name(
        "indexed",
        &name,
        &json!({"completionMode": "Indexed", "completions": 2}),
        &mut broken,
    );
    assert_eq!(broken.len(), 1, "{broken:?}");
    // A 52-character CronJob's Jobs at 11 shards: 52 + 9 + 3 = 64.
    let cron = json!({"metadata": {"name": "s".repeat(52)}, "spec": {"jobTemplate": {"spec":
        {"completionMode": "Indexed", "completions": 11}}}});
    broken.clear();
    k8s_rules::cron_job("sweep", &cron, &mut broken);
    assert_eq!(broken.len(), 1, "{broken:?}");
    // The owner reference trigger used to set.
    let job = json!({"metadata": {"ownerReferences": [{"kind": "CronJob", "name": "r",
        "controller": true, "blockOwnerDeletion": true}]}});
    broken.clear();
    k8s_rules::owner_references("triggered", &job, false, &mut broken);
    assert_eq!(broken.len(), 2, "{broken:?}");
    // A pod naming an account the render does not make; a hook of 600 s.
    let d = vec![
        json!({"kind": "Job", "metadata": {"name": "m", "annotations":
        {"helm.sh/hook": "pre-upgrade"}}, "spec": {"activeDeadlineSeconds": 600,
        "template": {"spec": {"serviceAccountName": "pe-package-executor"}}}}),
    ];
    let broken = k8s_rules::check_render(&d, &[]);
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(k8s_rules::check_render(&d, &["pe-package-executor"]).len() == 1);
    // The hooks as the chart had them (issue 51, defect 13): under Argo CD both were PostSync
    // hooks, behind a sweep that a failed Job leaves Degraded, and the migration waited for the
    // suspended recovery template too.
    let hook = |name: &str, component: &str, weight: &str| {
        json!({"kind": "Job", "metadata": {"name": name, "labels":
            {"app.kubernetes.io/component": component}, "annotations":
            {"helm.sh/hook": "post-install,post-upgrade", "helm.sh/hook-weight": weight}}})
    };
    let d = vec![
        hook("pe-migrate", "migration", "-10"),
        hook("pe-release-1", "release-trigger", "0"),
        json!({"kind": "CronJob", "metadata": {"name": "pe-recovery"}}),
        json!({"kind": "CronJob", "metadata": {"name": "pe-sweep"}}),
    ];
    let mut broken = Vec::new();
    k8s_rules::argo_cd_order(&d, &mut broken);
    assert_eq!(broken.len(), 3, "{broken:#?}");
}

/// A 53-character release (Helm's longest) with 2, 11 and 100 shards, the sweep and the
/// release hook on: every object, every Job the sweep's CronJob schedules and the Job
/// `trigger` makes of the recovery template meet the rules (`validate` checks them).
#[test]
fn long_release_names_and_many_shards_meet_the_api_servers_rules() {
    let release = "a".repeat(53);
    for shards in ["2", "11", "100", "100000"] {
        let shards = format!("run.shards={shards}");
        let mut args = vec![
            "template",
            &release,
            "charts/package-executor",
            "--kube-version",
            KUBE_VERSION,
        ];
        args.extend(ALL_ON);
        args.extend(["--set", &shards, "--set", "recovery.onRelease=true"]);
        let rendered = run_helm(&args);
        validate(&format!("53-character release, {shards}"), &rendered);
        let d = docs(&rendered);
        // `trigger --dry-run` of the recovery template as a file: its Job meets the rules
        // (`dry_run` checks them) and its last pod's hostname is a DNS label.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("recovery.yaml");
        std::fs::write(
            &file,
            serde_norway::to_string(find(&d, "CronJob", "recovery")).unwrap(),
        )
        .unwrap();
        let job = dry_run(&["--job-template", file.to_str().unwrap()]);
        let spec = job.spec.unwrap();
        let host = format!(
            "{}-{}",
            job.metadata.name.unwrap(),
            spec.completions.unwrap() - 1
        );
        assert!(k8s_rules::is_dns_label(&host), "{host}");
        let sweep = find(&d, "CronJob", "sweep");
        let host = format!(
            "{}{}-{}",
            sweep["metadata"]["name"].as_str().unwrap(),
            k8s_rules::CRON_JOB_SUFFIX,
            sweep["spec"]["jobTemplate"]["spec"]["completions"]
        );
        assert!(host.len() <= 64, "{host}");
    }
}

/// Every account a pod names exists: the chart's own, the one named for pods the chart does
/// not make accounts for, or the namespace's `default`; trigger's account exists whenever
/// the release hook runs, with or without the chart's RBAC.
#[test]
fn every_account_a_pod_names_exists() {
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &[
                "--set",
                "serviceAccount.create=false",
                "--set",
                "serviceAccount.name=ops",
                "--set",
                "serviceAccount.triggerName=ops-trigger",
            ],
            &["ops", "ops-trigger"],
        ),
        (
            &[
                "--set",
                "serviceAccount.create=false",
                "--set",
                "serviceAccount.name=ops",
                "--set",
                "recovery.onRelease=false",
            ],
            &["ops"],
        ),
        (
            &[
                "--set",
                "rbac.create=false",
                "--set",
                "recovery.onRelease=true",
            ],
            &[],
        ),
        (
            &[
                "--set",
                "serviceAccount.create=false",
                "--set",
                "serviceAccount.name=ops",
                "--set",
                "serviceAccount.triggerName=ops-trigger",
                "--set",
                "rbac.triggerInCluster=true",
            ],
            &["ops", "ops-trigger"],
        ),
    ];
    for (values, external) in cases {
        let rendered = render(values);
        validate_schema("accounts", &rendered);
        let broken = k8s_rules::check_render(&docs(&rendered), external);
        assert!(broken.is_empty(), "{values:?}: {broken:#?}");
    }
}

/// Issue 51, defect 6: without `serviceAccount.create`, trigger's Role (create Jobs) was bound to
/// the namespace's `default` account, so any pod there could start Jobs that mount the owner's
/// database Secret (and the run pods' Role, create Events, went to `default` too). The chart now
/// refuses to bind a Role to an account other pods run as, and says what to set; accounts of
/// their own get the bindings.
#[test]
fn no_role_is_bound_to_an_account_other_pods_run_as() {
    const TRIGGER: &str = "Set serviceAccount.triggerName to an account of trigger's own";
    const RUN: &str = "Set serviceAccount.name to an account of the run pods' own";
    let refused: [(&[&str], &str); 5] = [
        (&["serviceAccount.create=false"], RUN),
        (
            &[
                "serviceAccount.create=false",
                "serviceAccount.triggerName=t",
            ],
            RUN,
        ),
        (
            &["serviceAccount.create=false", "serviceAccount.name=ops"],
            TRIGGER,
        ),
        (
            &[
                "serviceAccount.create=false",
                "serviceAccount.name=ops",
                "serviceAccount.triggerName=default",
            ],
            TRIGGER,
        ),
        (
            &[
                "serviceAccount.create=false",
                "serviceAccount.name=ops",
                "serviceAccount.triggerName=ops",
                "recovery.onRelease=false",
                "rbac.triggerInCluster=true",
            ],
            TRIGGER,
        ),
    ];
    for (values, says) in refused {
        assert_refused(values, says);
    }
    let docs = docs_of(&[
        "serviceAccount.create=false",
        "serviceAccount.name=ops",
        "serviceAccount.triggerName=ops-trigger",
    ]);
    let subject = |role_suffix: &str| {
        docs.iter()
            .filter(|d| d["kind"] == "RoleBinding")
            .find(|b| {
                b["roleRef"]["name"]
                    .as_str()
                    .unwrap()
                    .ends_with(role_suffix)
            })
            .map(|b| b["subjects"][0]["name"].clone())
    };
    assert_eq!(subject("-trigger"), Some(Value::from("ops-trigger")));
    assert_eq!(subject("-package-executor"), Some(Value::from("ops")));
    // Without the chart's RBAC the accounts are the operator's to grant: nothing is bound, and
    // the pods may run as `default`.
    let unbound = docs_of(&["serviceAccount.create=false", "rbac.create=false"]);
    assert!(!unbound.iter().any(|d| d["kind"] == "RoleBinding"));
}

/// `--set V` for each of VALUES.
fn set_args<'a>(values: &[&'a str]) -> Vec<&'a str> {
    values.iter().flat_map(|v| ["--set", *v]).collect()
}

fn docs_of(values: &[&str]) -> Vec<Value> {
    docs(&render(&set_args(values)))
}

/// The chart refuses to render VALUES (each given with `--set`), saying SAYS.
fn assert_refused(values: &[&str], says: &str) {
    let out = helm::template_output(&set_args(values));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{values:?} was accepted");
    assert!(err.contains(says), "{values:?}: {err}");
}

/// As a subchart: Helm passes every subchart `global` (the parent's global values), which a
/// strict schema must accept. An umbrella chart that depends on this one renders and meets the
/// schemas and the rules.
#[test]
fn the_chart_installs_as_a_subchart() {
    let dir = tempfile::tempdir().unwrap();
    let umbrella = dir.path().join("platform");
    std::fs::create_dir_all(umbrella.join("charts")).unwrap();
    std::fs::write(
        umbrella.join("Chart.yaml"),
        "apiVersion: v2\nname: platform\nversion: 1.0.0\ndependencies:\n  - name: package-executor\n    version: \">=0.0.0-0\"\n    condition: package-executor.enabled\n",
    )
    .unwrap();
    // Issue 51, defect 3: the usual `condition:` and name overrides, which the strict schema
    // refused.
    std::fs::write(
        umbrella.join("values.yaml"),
        "global:\n  imageRegistry: registry.example\npackage-executor:\n  enabled: true\n  nameOverride: executor\n  sweep:\n    enabled: true\n",
    )
    .unwrap();
    copy_dir(
        &root().join("charts/package-executor"),
        &umbrella.join("charts/package-executor"),
    );
    let rendered = run_helm(&[
        "template",
        "platform",
        umbrella.to_str().unwrap(),
        "--kube-version",
        KUBE_VERSION,
    ]);
    validate("subchart", &rendered);
    let d = docs(&rendered);
    named(&d, "CronJob", "platform-executor-sweep");
    named(&d, "CronJob", "platform-executor-recovery");
    // The condition turns it off.
    let off = run_helm(&[
        "template",
        "platform",
        umbrella.to_str().unwrap(),
        "--set",
        "package-executor.enabled=false",
    ]);
    assert!(docs(&off).is_empty(), "{off}");
}

/// Issue 51, defects 1 and 3: release names Helm accepts (a dot, a leading digit) gave a
/// Service, a StatefulSet and Indexed Jobs names the API server refuses. Every name the chart
/// makes is now a DNS-1035 label (the chart's own convention, the strictest the API asks of
/// any of them), whatever the release name or override; the API server judges these renders in
/// the end-to-end tier. fullnameOverride replaces the base of every name.
#[test]
fn every_name_is_a_dns_1035_label_whatever_the_release_name() {
    let label = |name: &str| {
        name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !name.ends_with('-')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let longest = "a.b-c".repeat(10) + "a.c";
    for release in ["pe.prod", "1pe", "9.9", longest.as_str()] {
        let rendered = run_helm(&[
            "template",
            release,
            "charts/package-executor",
            "--kube-version",
            KUBE_VERSION,
            "--set",
            "postgresql.enabled=true,database.existingSecret=,sweep.enabled=true,run.shards=10",
        ]);
        let d = docs(&rendered);
        assert!(d.len() > 10, "{release}: {rendered}");
        for doc in &d {
            let name = doc["metadata"]["name"].as_str().unwrap();
            assert!(label(name), "{release}: {} {name:?}", doc["kind"]);
            // The instance label keeps the release's own name.
            assert_eq!(
                doc["metadata"]["labels"]["app.kubernetes.io/instance"], release,
                "{name}"
            );
        }
    }
    let d = docs_of(&["fullnameOverride=ops", "sweep.enabled=true"]);
    named(&d, "CronJob", "ops-recovery");
    named(&d, "CronJob", "ops-sweep");
    named(&d, "ServiceAccount", "ops");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Two publications close together: `trigger` makes two Jobs of the recovery template, with
/// different names, neither of which the CronJob controller reconciles (no controller
/// reference: `getJobsToBeReconciled` in pkg/controller/cronjob/cronjob_controllerv2.go), so
/// its `concurrencyPolicy: Forbid` and history limits touch neither and both run; their runs
/// converge by claims and exact replay (tests/it/commands/run.rs).
#[test]
fn two_publications_get_two_jobs_the_cronjob_leaves_alone() {
    let rendered = docs(&run_helm(&["template", "pe", "charts/package-executor"]));
    let cron = find(&rendered, "CronJob", "recovery");
    let uid = Some("3f1c2a9e-0000-4000-8000-000000000002");
    let jobs: Vec<Job> = ["release-7", "release-8"]
        .iter()
        .map(|p| triggered_job(cron, uid, p, Some("ns")))
        .collect();
    assert_ne!(jobs[0].metadata.name, jobs[1].metadata.name);
    for job in &jobs {
        let refs = job.metadata.owner_references.as_ref().unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].kind, "CronJob");
        assert_eq!(
            refs[0].uid, "3f1c2a9e-0000-4000-8000-000000000002",
            "collected with it"
        );
        assert_ne!(refs[0].controller, Some(true), "not the CronJob's to prune");
        assert_ne!(refs[0].block_owner_deletion, Some(true));
    }
}

/// The chart's NOTES as Helm prints them after an install (rendered through a copy of the
/// chart that wraps them in a ConfigMap, since `helm template` leaves NOTES out).
fn notes(values: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("package-executor");
    copy_dir(&root().join("charts/package-executor"), &chart);
    std::fs::write(
        chart.join("templates/zz-notes.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: {{ include \"package-executor/templates/NOTES.txt\" . | toJson }}\n",
    )
    .unwrap();
    let mut args = vec![
        "template",
        "pe",
        chart.to_str().unwrap(),
        "--show-only",
        "templates/zz-notes.yaml",
    ];
    args.extend(values);
    let d = docs(&run_helm(&args));
    d[0]["data"]["notes"].as_str().unwrap().to_owned()
}

/// The NetworkPolicy users can install: the API server's rule never silently dropped (without
/// its addresses, its ports to any address, and NOTES says so), IPv6 CIDRs, the DNS ports
/// OpenShift needs, extra egress rules; and NOTES names the recovery Job `trigger` really
/// makes.
/// Issue 51, defect 8: the `kubectl run` commands the NOTES and the manifests' header give
/// made pods without the chart's labels, which the development database's NetworkPolicy turns
/// away. Each now carries the labels that policy admits (`pe.selector`); the end-to-end tier runs
/// the NOTES' command itself.
#[test]
fn the_kubectl_run_commands_we_give_carry_the_labels_the_network_policy_admits() {
    let labels = "--labels=app.kubernetes.io/name=package-executor,app.kubernetes.io/instance=pe";
    let manifests =
        std::fs::read_to_string(root().join("manifests/10-package-executor.yaml")).unwrap();
    for (what, text) in [
        ("NOTES", notes(&["--set", "postgresql.enabled=true"])),
        ("manifests/10-package-executor.yaml", manifests),
    ] {
        let lines: Vec<&str> = text.lines().collect();
        let runs: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].contains("kubectl") && lines[i].contains(" run "))
            .collect();
        assert!(!runs.is_empty(), "{what} gives no kubectl run command");
        for i in runs {
            // The command and its continuation lines.
            let command: String = lines[i..]
                .iter()
                .take_while(|l| !l.trim().is_empty())
                .take(4)
                .copied()
                .collect::<Vec<_>>()
                .join("\n");
            assert!(command.contains(labels), "{what}: {command}");
        }
    }
}

/// Issue 51, defect 5: each value of `helm::REFUSED_BY_THE_API_SERVER` renders objects the API
/// server refuses (the end-to-end tier shows it), and the schema now refuses it first, naming the
/// value; the values the chart's other tests render (and the server accepts) pass.
#[test]
fn the_schema_refuses_what_the_api_server_refuses() {
    let refused = helm::REFUSED_BY_THE_API_SERVER
        .iter()
        .chain(helm::REFUSED_AS_NAMES_NOTHING_CAN_HAVE);
    for set in refused {
        assert_refused(&[set], "values don't meet the specifications of the schema");
    }
}

/// Issue 51, defect 7: Argo CD renders with `helm template`, where every render's revision is
/// 1, so the publication id was always `release-1` and later syncs attached to the first
/// recovery Job and started no run (a failed one failed every sync for a day). The id now
/// carries a digest of the chart's version and values: a render that changes anything gets
/// another id (another Job), an identical one the same; the hook re-creates a failed Job of
/// its own publication (--replace-failed); a pipeline's publicationId is used as given.
#[test]
fn each_configuration_is_a_publication_under_helm_template() {
    let id = |values: &[&str]| {
        let d = docs_of(values);
        let hook = d
            .iter()
            .find(|doc| {
                doc["kind"] == "Job"
                    && doc["metadata"]["labels"]["app.kubernetes.io/component"] == "release-trigger"
            })
            .expect("the release hook");
        let args: Vec<String> = hook["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
        assert!(args.iter().any(|a| a == "--replace-failed"), "{args:?}");
        let at = args.iter().position(|a| a == "--publication-id").unwrap();
        args[at + 1].clone()
    };
    let first = id(&[]);
    assert!(first.starts_with("release-1-"), "{first}");
    assert_eq!(
        id(&[]),
        first,
        "an identical render is the same publication"
    );
    let changed = id(&["image.tag=0.1.1"]);
    assert_ne!(changed, first, "a changed image is another publication");
    assert_ne!(id(&["run.concurrency=2"]), first);
    assert_ne!(id(&["run.concurrency=2"]), changed);
    assert_eq!(id(&["publicationId=pipeline-42"]), "pipeline-42");
    // Values that may hold credentials are not in the digest: anyone who may read Jobs reads
    // the id, and a short digest of a password could be checked against guesses.
    for secret in [
        "postgresql.password=another",
        "database.migrateUrl=postgres://o:secret@db/x",
        "database.executorUrl=postgres://e:secret@db/x",
        "metrics.pushUrl=http://u:secret@push:9091",
    ] {
        assert_eq!(id(&[secret]), first, "{secret} reached the publication id");
    }
}

#[test]
fn the_network_policy_and_notes_hold_on_common_clusters() {
    let policy = |values: &[&str]| {
        let yaml = render(values);
        validate("network policy", &yaml);
        find(&docs(&yaml), "NetworkPolicy", "").clone()
    };
    let ports = |rule: &Value| -> Vec<i64> {
        rule["ports"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["port"].as_i64())
            .collect()
    };
    // Offline (helm template, Argo CD): the API rule stays, on its ports, to any address.
    let p = policy(&[]);
    let egress = p["spec"]["egress"].as_array().unwrap();
    let api = egress
        .iter()
        .find(|r| ports(r).contains(&6443))
        .expect("an API server rule");
    assert!(api["to"].is_null(), "{api}");
    assert_eq!(ports(api), [443, 6443]);
    assert!(
        ports(&egress[0]).contains(&5353),
        "OpenShift's DNS port: {}",
        egress[0]
    );
    assert!(notes(&[]).contains(
        "WARNING: the NetworkPolicy lets these pods reach ports 443, 6443 on any address"
    ));
    // Given addresses, IPv6 included; extra rules appended.
    let p = policy(&[
        "--set",
        "networkPolicy.apiServer.cidrs={10.96.0.1/32,fd00:10:96::1/128}",
        "--set",
        "networkPolicy.extraEgress[0].ports[0].port=3128",
    ]);
    let egress = p["spec"]["egress"].as_array().unwrap();
    let api = egress.iter().find(|r| ports(r).contains(&6443)).unwrap();
    let cidrs: Vec<&str> = api["to"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["ipBlock"]["cidr"].as_str().unwrap())
        .collect();
    assert_eq!(cidrs, ["10.96.0.1/32", "fd00:10:96::1/128"]);
    assert_eq!(ports(egress.last().unwrap()), [3128]);
    assert!(!notes(&["--set", "networkPolicy.apiServer.cidrs={10.96.0.1/32}"]).contains("WARNING"));

    // Egress narrowed (issue 81): DNS to the cluster DNS's pods; the database to its own pods
    // (the development one), to the peers given, or, with neither, to any address on its port.
    let rule = |p: &Value, port: i64| -> Value {
        p["spec"]["egress"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| ports(r).contains(&port))
            .unwrap_or_else(|| panic!("no rule for {port}: {p}"))
            .clone()
    };
    let p = policy(&[]);
    assert_eq!(
        rule(&p, 53)["to"],
        serde_json::json!([{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}
        }])
    );
    assert!(rule(&p, 5432)["to"].is_null(), "{}", rule(&p, 5432));
    let p = policy(&["--set", "postgresql.enabled=true"]);
    assert_eq!(
        rule(&p, 5432)["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "postgresql"
    );
    let p = policy(&[
        "--set",
        "networkPolicy.database.to[0].ipBlock.cidr=10.1.2.0/24",
        "--set-json",
        "networkPolicy.dns.to=[]",
    ]);
    assert_eq!(rule(&p, 5432)["to"][0]["ipBlock"]["cidr"], "10.1.2.0/24");
    assert!(rule(&p, 53)["to"].is_null(), "{}", rule(&p, 53));
    assert_refused(
        &[
            "networkPolicy.database.to[0].ipBlock.cidr=10.1.2.0/24",
            "networkPolicy.database.to[0].podSelector.matchLabels.app=db",
        ],
        "/networkPolicy/database/to/0",
    );

    // NOTES names the Job trigger makes of the template, with and without shards.
    for shards in ["1", "11"] {
        let set = format!("run.shards={shards},publicationId=p-1");
        let d = docs(&run_helm(&[
            "template",
            "pe",
            "charts/package-executor",
            "--set",
            &set,
        ]));
        let job = triggered_job(find(&d, "CronJob", "recovery"), None, "p-1", None);
        let name = job.metadata.name.unwrap();
        let text = notes(&["--set", &set]);
        assert!(
            text.contains(&format!("The recovery Job {name} ")),
            "{name}:\n{text}"
        );
    }
}

/// The migration runs when this release's objects exist (after install and after upgrade, as
/// `hook_ordering` in the rules requires) and before the release's recovery Job: Helm runs the
/// hooks of one event in ascending `helm.sh/hook-weight` (helm/pkg/action/hooks.go sorts them
/// by weight, then name) and waits for each.
#[test]
fn the_migration_runs_with_the_new_objects_before_the_recovery_job() {
    let d = docs(&run_helm(&["template", "pe", "charts/package-executor"]));
    let hook = |part: &str| {
        let j = find(&d, "Job", part);
        let a = &j["metadata"]["annotations"];
        (
            a["helm.sh/hook"].as_str().unwrap().to_owned(),
            a["helm.sh/hook-weight"]
                .as_str()
                .unwrap()
                .parse::<i32>()
                .unwrap(),
        )
    };
    let (migrate, migrate_weight) = hook("-migrate");
    let (release, release_weight) = hook("-release-");
    assert_eq!(migrate, "post-install,post-upgrade");
    assert_eq!(release, "post-install,post-upgrade");
    assert!(migrate_weight < release_weight);
    // Neither retries what a retry cannot heal: a configuration (1) or usage (2) error.
    for part in ["-migrate", "-release-"] {
        let rules = &find(&d, "Job", part)["spec"]["podFailurePolicy"]["rules"];
        assert_eq!(rules[0]["action"], "FailJob", "{part}");
        assert_eq!(
            rules[0]["onExitCodes"]["values"],
            serde_json::json!([1, 2]),
            "{part}"
        );
    }
    let mut broken = Vec::new();
    k8s_rules::hook_ordering(&d, &mut broken);
    assert!(broken.is_empty(), "{broken:#?}");
}

/// The conventions a platform review expects: one dashboard uid per release, dashboard labels
/// that may be empty, `app.kubernetes.io/*` labels on the sweep's Jobs, an image pinned by
/// digest when given, a chart version with build metadata (`+`) still a valid label, and no
/// API token in pods that call no API (the migration, the development database).
#[test]
fn the_charts_conventions_hold() {
    let dashboard_uid = |release: &str| {
        let d = docs(&run_helm(&[
            "template",
            release,
            "charts/package-executor",
            "--set",
            "metrics.dashboard.enabled=true",
        ]));
        let cm = find(&d, "ConfigMap", "dashboard");
        let json: Value =
            serde_json::from_str(cm["data"]["package-executor.json"].as_str().unwrap()).unwrap();
        json["uid"].as_str().unwrap().to_owned()
    };
    let (a, b) = (dashboard_uid("alpha"), dashboard_uid("beta"));
    assert_ne!(a, b, "two releases, two dashboards");
    assert!(a.len() <= 40, "Grafana's uid limit: {a}");
    validate(
        "empty dashboard labels",
        &run_helm(&[
            "template",
            "pe",
            "charts/package-executor",
            "--kube-version",
            KUBE_VERSION,
            "--set",
            "metrics.dashboard.enabled=true",
            "--set",
            "metrics.dashboard.labels=null",
        ]),
    );

    let digest = format!("sha256:{}", "ab".repeat(32));
    let yaml = run_helm(&[
        "template",
        "pe",
        "charts/package-executor",
        "--set",
        "sweep.enabled=true",
        "--set",
        "postgresql.enabled=true",
        "--set",
        &format!("image.digest={digest}"),
    ]);
    let d = docs(&yaml);
    let sweep = find(&d, "CronJob", "sweep");
    let labels = &sweep["spec"]["jobTemplate"]["metadata"]["labels"];
    assert_eq!(labels["app.kubernetes.io/name"], "package-executor");
    assert_eq!(labels["app.kubernetes.io/component"], "sweep");
    let images: Vec<String> = yaml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .map(|i| i.trim_matches('"').to_owned())
        .filter(|i| i.starts_with("package-executor"))
        .collect();
    assert!(!images.is_empty());
    for image in images {
        assert_eq!(image, format!("package-executor:0.1.0@{digest}"));
    }
    let migrate = find(&d, "Job", "-migrate");
    assert_eq!(
        migrate["spec"]["template"]["spec"]["automountServiceAccountToken"],
        false
    );

    // A version with build metadata: `+` is not allowed in a label value.
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("package-executor");
    copy_dir(&root().join("charts/package-executor"), &chart);
    let meta = std::fs::read_to_string(chart.join("Chart.yaml")).unwrap();
    let meta: String = meta
        .lines()
        .map(|l| {
            if l.starts_with("version:") {
                "version: 0.1.0+build.7".to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(chart.join("Chart.yaml"), meta).unwrap();
    let yaml = run_helm(&[
        "template",
        "pe",
        chart.to_str().unwrap(),
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "postgresql.enabled=true",
    ]);
    validate("build metadata", &yaml);
    assert!(yaml.contains("helm.sh/chart: package-executor-0.1.0_build.7"));
}

/// checkov (PyPI, pinned in scripts/test.sh) over every kind of render: no check fails. Each
/// check the chart does not meet is skipped in the template it concerns, with its reason
/// (`pe.checkovSkips`), so a new failure is a finding, never noise. Rendered into a namespace
/// of its own, as a release is installed (`helm template` defaults to `default`).
#[test]
fn checkov_passes_every_render() {
    let digest = format!("image.digest=sha256:{}", "cd".repeat(32));
    let mut renders: Vec<(&str, Vec<&str>)> = vec![
        ("default", vec![]),
        ("all on", ALL_ON.to_vec()),
        ("tls", TLS_ON.to_vec()),
        (
            "no network policy",
            vec![
                "--set",
                "networkPolicy.enabled=false",
                "--set",
                "postgresql.enabled=true",
                "--set",
                "sweep.enabled=true",
            ],
        ),
        (
            "pinned",
            vec!["--set", &digest, "--set", "sweep.enabled=true"],
        ),
        (
            "no accounts",
            vec![
                "--set",
                "serviceAccount.create=false",
                "--set",
                "rbac.create=false",
            ],
        ),
    ];
    let mut report = Vec::new();
    for (label, values) in renders.drain(..) {
        let mut args = vec![
            "template",
            "pe",
            "charts/package-executor",
            "--namespace",
            "pe",
        ];
        args.extend(values);
        let yaml = run_helm(&args);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("render.yaml");
        std::fs::write(&file, &yaml).unwrap();
        let (summary, failed) = helm::checkov(&file);
        assert!(failed.is_empty(), "{label}: {failed:#?}");
        report.push(format!(
            "{label}: passed {}, failed {}, skipped {}",
            summary["passed"], summary["failed"], summary["skipped"]
        ));
    }
    println!("checkov {}", report.join("; "));
}

/// Issue 51, defect 13: Argo CD renders with `helm template` and made both hooks PostSync
/// hooks, which it starts only once every object is Healthy; a sweep whose last Job failed is
/// Degraded (argo-cd's CronJob health check), so the migration and every publication's trigger
/// waited on it for ever. Now both are Sync-phase hooks in waves ahead of every CronJob but the
/// recovery template the trigger reads (`k8s_rules::argo_cd_order`, which every render here
/// passes through `run_helm`): migration 1, template 2, trigger 3, sweep 4.
#[test]
fn under_argo_cd_no_hook_waits_on_a_cronjobs_health() {
    let d = docs_of(&["sweep.enabled=true", "postgresql.enabled=true"]);
    let step = |kind: &str, part: &str| k8s_rules::argo_cd_step(find(&d, kind, part));
    assert_eq!(step("Job", "-migrate"), (1, 1));
    assert_eq!(step("CronJob", "-recovery"), (1, 2));
    assert_eq!(step("Job", "-release-"), (1, 3));
    assert_eq!(step("CronJob", "-sweep"), (1, 4));
    // Every other object is in wave 0 of the Sync phase, before the migration needs it (but
    // the pre-rollback check, which Argo CD never runs).
    for x in &d {
        let annotations = &x["metadata"]["annotations"];
        let step = k8s_rules::argo_cd_step(x);
        if annotations["argocd.argoproj.io/sync-wave"].is_null()
            && step.0 != k8s_rules::ARGO_CD_NEVER
        {
            assert_eq!(step, (1, 0), "{}", x["metadata"]["name"]);
        }
    }
    // Helm ignores Argo CD's annotations: its own hooks and weights are as they were.
    let mut broken = Vec::new();
    k8s_rules::argo_cd_order(&d, &mut broken);
    assert!(broken.is_empty(), "{broken:#?}");
}

/// The wrong-but-harmless list of issue 51, each as the chart now has it:
/// - the Job-wide deadline counts the Job controller's real delay before each retry (10 s
///   doubled, at most 10 minutes), not 6 minutes each;
/// - the development database's StatefulSet is governed by a headless Service, and its
///   readiness probe asks over TCP, which the image's temporary first-start server never
///   answers;
/// - podLabels or podAnnotations that repeat one of the chart's keys are refused, not written
///   twice;
/// - the development password is random per install unless given, the same in every object of
///   a render.
#[test]
fn the_harmless_list_is_mended() {
    // 10 retries: 10, 20, 40, 80, 160, 320, then 600 four times.
    let d = docs_of(&["run.backoffLimit=10"]);
    let spec = recovery_template(&d);
    assert_eq!(
        spec.active_deadline_seconds,
        Some(11 * 1800 + 10 + 20 + 40 + 80 + 160 + 320 + 4 * 600)
    );

    let d = docs_of(&["postgresql.enabled=true"]);
    let set = find(&d, "StatefulSet", "postgresql");
    let governing = set["spec"]["serviceName"].as_str().unwrap();
    let headless = named(&d, "Service", governing);
    assert_eq!(headless["spec"]["clusterIP"], "None");
    let probe =
        &set["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["exec"]["command"];
    assert!(
        probe.as_array().unwrap().iter().any(|a| a == "127.0.0.1"),
        "{probe}"
    );

    assert_refused(
        &["podLabels.app\\.kubernetes\\.io/component=mine"],
        "podLabels.app.kubernetes.io/component: the chart sets this label on its pods",
    );
    assert_refused(
        &[
            "postgresql.enabled=true",
            "podAnnotations.checksum/password=x",
        ],
        "podAnnotations.checksum/password: the chart sets this annotation",
    );

    let password = |d: &[Value]| {
        let secret = find(d, "Secret", "-postgresql");
        secret["stringData"]["password"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (a, b) = (
        docs_of(&["postgresql.enabled=true"]),
        docs_of(&["postgresql.enabled=true"]),
    );
    let (pa, pb) = (password(&a), password(&b));
    assert_ne!(pa, pb, "a random password per install");
    assert!(pa.len() >= 32, "{pa}");
    let urls = &find(&a, "Secret", "-db")["stringData"];
    for key in ["migrate-url", "executor-url"] {
        assert!(urls[key].as_str().unwrap().contains(&pa), "{key}");
    }
    let given = docs_of(&["postgresql.enabled=true", "postgresql.password=given"]);
    assert_eq!(password(&given), "given");
}

/// The knobs the best-kept charts give, each where a platform team looks for it: a registry
/// and pull secrets from `global`, extra environment for every executor container, annotations
/// on the accounts, and scheduling per workload over the chart-wide values.
/// Each workload's pod spec (the Jobs', the StatefulSet's, the CronJobs'), by object name.
fn workload_pods(d: &[Value]) -> Vec<(&str, &Value)> {
    d.iter()
        .filter_map(|x| {
            let name = x["metadata"]["name"].as_str()?;
            let spec = match x["kind"].as_str()? {
                "Job" | "StatefulSet" => &x["spec"]["template"]["spec"],
                "CronJob" => &x["spec"]["jobTemplate"]["spec"]["template"]["spec"],
                _ => return None,
            };
            Some((name, spec))
        })
        .collect()
}

#[test]
fn the_usual_knobs_reach_their_objects() {
    let d = docs_of(&[
        "postgresql.enabled=true",
        "global.imageRegistry=mirror.example:5000/hub",
        "global.imagePullSecrets[0]=from-global",
        "imagePullSecrets[0].name=own",
        "extraEnv[0].name=HTTPS_PROXY",
        "extraEnv[0].value=http://proxy:3128",
        "extraEnv[1].name=POD_NAME",
        "extraEnv[1].valueFrom.fieldRef.fieldPath=metadata.name",
        "serviceAccount.annotations.iam\\.example/role=pe",
        "nodeSelector.pool=general",
        "run.nodeSelector.pool=batch",
        "postgresql.tolerations[0].key=db",
        "postgresql.tolerations[0].operator=Exists",
    ]);
    let pods = workload_pods(&d);
    assert_eq!(
        pods.len(),
        5,
        "recovery, migration, rollback check, trigger, database"
    );
    for (name, pod) in &pods {
        let image = pod["containers"][0]["image"].as_str().unwrap();
        assert!(
            image.starts_with("mirror.example:5000/hub/"),
            "{name}: {image}"
        );
        assert_eq!(
            pod["imagePullSecrets"],
            serde_json::json!([{"name": "own"}, {"name": "from-global"}]),
            "{name}"
        );
        let pool = pod["nodeSelector"]["pool"].as_str().unwrap();
        assert_eq!(
            pool,
            if name.ends_with("-recovery") {
                "batch"
            } else {
                "general"
            },
            "{name}"
        );
        let database = name.ends_with("-postgresql");
        assert_eq!(pod["tolerations"].is_array(), database, "{name}");
        let env = pod["containers"][0]["env"].as_array().unwrap();
        let proxy = env.iter().any(|e| e["name"] == "HTTPS_PROXY");
        assert_eq!(
            proxy, !database,
            "{name}: every executor container, not the database"
        );
    }
    for account in d.iter().filter(|x| x["kind"] == "ServiceAccount") {
        assert_eq!(account["metadata"]["annotations"]["iam.example/role"], "pe");
    }
    assert_refused(
        &["extraEnv[0].name=DATABASE_URL", "extraEnv[0].value=x"],
        "extraEnv: DATABASE_URL is set by the chart",
    );
}

/// Database logins from the Secrets platforms already make (issue 81): CloudNativePG's (a key
/// that holds a whole URL) and Bitnami's (a password key, the rest as values), each login on
/// its own; every executor pod and the NOTES' command read the login they are given, and no
/// password is ever a value in the render.
#[test]
fn database_logins_come_from_the_secrets_platforms_make() {
    let env_of = |d: &[Value], part: &str| -> Vec<Value> {
        let x = d
            .iter()
            .find(|x| {
                ["CronJob", "Job", "Pod"].contains(&x["kind"].as_str().unwrap_or(""))
                    && x["metadata"]["name"].as_str().unwrap_or("").ends_with(part)
            })
            .unwrap_or_else(|| panic!("no pod of *{part}"));
        let spec = match x["kind"].as_str().unwrap() {
            "CronJob" => &x["spec"]["jobTemplate"]["spec"]["template"]["spec"],
            "Pod" => &x["spec"],
            _ => &x["spec"]["template"]["spec"],
        };
        spec["containers"][0]["env"].as_array().unwrap().clone()
    };
    let var = |env: &[Value], name: &str| -> Value {
        env.iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let values = [
        "--set",
        "database.executorLogin.secret=cluster-app,database.executorLogin.urlKey=uri",
        "--set",
        "database.migrateLogin.secret=db-postgresql,database.migrateLogin.host=db-postgresql.data,database.migrateLogin.port=5432,database.migrateLogin.dbname=app,database.migrateLogin.user=postgres,database.migrateLogin.keys.password=postgres-password",
    ];
    let yaml = render(&values);
    let d = docs(&yaml);
    for part in ["-recovery", "-rollback-check", "-test"] {
        let env = env_of(&d, part);
        assert_eq!(
            var(&env, "DATABASE_URL")["valueFrom"]["secretKeyRef"],
            serde_json::json!({"name": "cluster-app", "key": "uri"}),
            "{part}: {env:?}"
        );
        assert!(var(&env, "PGPASSWORD").is_null(), "{part}");
    }
    let env = env_of(&d, "-migrate");
    assert_eq!(var(&env, "DATABASE_URL")["value"], "postgres://");
    assert_eq!(var(&env, "PGHOST")["value"], "db-postgresql.data");
    assert_eq!(var(&env, "PGPORT")["value"], "5432");
    assert_eq!(var(&env, "PGDATABASE")["value"], "app");
    assert_eq!(var(&env, "PGUSER")["value"], "postgres");
    assert_eq!(
        var(&env, "PGPASSWORD")["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "db-postgresql", "key": "postgres-password"})
    );
    // The parts a value does not give come from the Secret's keys (CloudNativePG's names).
    let d = docs(&render(&[
        "--set",
        "database.migrateLogin.secret=cluster-superuser",
    ]));
    let env = env_of(&d, "-migrate");
    for (name, key) in [
        ("PGHOST", "host"),
        ("PGPORT", "port"),
        ("PGDATABASE", "dbname"),
        ("PGUSER", "user"),
        ("PGPASSWORD", "password"),
    ] {
        assert_eq!(
            var(&env, name)["valueFrom"]["secretKeyRef"],
            serde_json::json!({"name": "cluster-superuser", "key": key}),
            "{name}"
        );
    }
    // The NOTES' explain command takes the executor's login too.
    let text = notes(&values);
    assert!(
        text.contains(r#""env":[{"name":"DATABASE_URL","valueFrom":{"secretKeyRef":{"key":"uri","name":"cluster-app"}}}]"#),
        "{text}"
    );
    // The chart sets these; extraEnv may not.
    assert_refused(
        &["extraEnv[0].name=PGPASSWORD", "extraEnv[0].value=x"],
        "extraEnv: PGPASSWORD is set by the chart",
    );
}

/// A platform's overlay (issue 81): environment from ConfigMaps and Secrets, a volume and its
/// mount, an init container, spread constraints and priority classes reach every executor pod
/// (the run pods, the migration, the rollback check, the trigger hook) and not the development
/// database, a workload's own scheduling over the chart-wide; the TLS volumes stay beside the
/// user's. The renders go to the API server with the rest (`tests/cluster/renders.rs`).
#[test]
fn the_extension_points_reach_every_executor_pod() {
    let init = r#"[{"name":"wait","image":"example.local/busybox:1","command":["true"],"resources":{"requests":{"cpu":"10m","memory":"8Mi"},"limits":{"memory":"16Mi"}},"securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]},"readOnlyRootFilesystem":true,"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}}}]"#;
    let spread = r#"[{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"ScheduleAnyway","labelSelector":{"matchLabels":{"app.kubernetes.io/instance":"pe"}}}]"#;
    let d = docs(&render(&[
        "--set",
        "postgresql.enabled=true",
        "--set",
        "database.tls.ca.configMap=db-ca",
        "--set-json",
        r#"envFrom=[{"configMapRef":{"name":"proxy"}},{"secretRef":{"name":"extra","optional":true},"prefix":"X_"}]"#,
        "--set-json",
        r#"extraVolumes=[{"name":"scratch","emptyDir":{"sizeLimit":"16Mi"}}]"#,
        "--set-json",
        r#"extraVolumeMounts=[{"name":"scratch","mountPath":"/scratch"}]"#,
        "--set-json",
        &format!("initContainers={init}"),
        "--set-json",
        &format!("topologySpreadConstraints={spread}"),
        "--set",
        "priorityClassName=general",
        "--set",
        "run.priorityClassName=batch",
        "--set",
        "recovery.hookPriorityClassName=hooks",
    ]));
    let pods = workload_pods(&d);
    assert_eq!(
        pods.len(),
        5,
        "recovery, migration, rollback check, trigger, database"
    );
    for (name, pod) in &pods {
        let database = name.ends_with("-postgresql");
        let container = &pod["containers"][0];
        let hook = container["name"] == "trigger";
        let volumes: Vec<&str> = pod["volumes"]
            .as_array()
            .map(|v| v.iter().filter_map(|v| v["name"].as_str()).collect())
            .unwrap_or_default();
        let mounts: Vec<&str> = container["volumeMounts"]
            .as_array()
            .map(|v| v.iter().filter_map(|v| v["name"].as_str()).collect())
            .unwrap_or_default();
        if database {
            assert!(container["envFrom"].is_null(), "{name}");
            assert!(pod["initContainers"].is_null(), "{name}");
            assert!(!volumes.contains(&"scratch"), "{name}: {volumes:?}");
        } else {
            assert_eq!(
                container["envFrom"].as_array().map(Vec::len),
                Some(2),
                "{name}"
            );
            assert_eq!(pod["initContainers"][0]["name"], "wait", "{name}");
            assert!(volumes.contains(&"scratch"), "{name}: {volumes:?}");
            assert!(mounts.contains(&"scratch"), "{name}: {mounts:?}");
            // The hook calls no database: no TLS material; the others keep theirs.
            assert_eq!(volumes.contains(&"tls-ca"), !hook, "{name}: {volumes:?}");
            assert_eq!(mounts.contains(&"tls-ca"), !hook, "{name}: {mounts:?}");
        }
        assert_eq!(
            pod["topologySpreadConstraints"][0]["topologyKey"], "kubernetes.io/hostname",
            "{name}"
        );
        let class = if name.ends_with("-recovery") {
            "batch"
        } else if hook {
            "hooks"
        } else {
            "general"
        };
        assert_eq!(pod["priorityClassName"], class, "{name}");
    }
    assert_refused(
        &[
            "extraVolumes[0].name=tls-ca",
            "extraVolumes[0].emptyDir.medium=Memory",
        ],
        "extraVolumes: tls-ca is the name of the chart's own TLS volume",
    );
    // The schema, before any template: a source missing, two sources, a container without an
    // image, an EnvFromSource with two sources.
    for (values, says) in [
        (&["extraVolumes[0].name=scratch"][..], "/extraVolumes/0"),
        (
            &[
                "extraVolumes[0].name=scratch",
                "extraVolumes[0].emptyDir.medium=Memory",
                "extraVolumes[0].configMap.name=x",
            ][..],
            "/extraVolumes/0",
        ),
        (&["initContainers[0].name=wait"][..], "/initContainers/0"),
        (
            &[
                "envFrom[0].configMapRef.name=a",
                "envFrom[0].secretRef.name=b",
            ][..],
            "/envFrom/0",
        ),
    ] {
        assert_refused(values, says);
    }
}

/// Issue 51, defect 11: `helm upgrade --atomic` (and Flux's rollback remediation) after a
/// migration committed rolled the image back onto the newer schema. Helm runs the hooks of the
/// release it rolls back to, so each release carries a pre-rollback hook in which its own
/// image asks whether it can run on the database's schema (`migrate --check`, as the executor,
/// read only): a newer schema fails the hook and the rollback. The end-to-end tier rolls back onto
/// a newer schema for real (tests/cluster/upgrade.rs).
#[test]
fn a_rollback_first_checks_the_schema_with_the_image_it_rolls_back_to() {
    let d = docs_of(&["image.tag=1.2.3"]);
    let check = find(&d, "Job", "-rollback-check");
    let a = &check["metadata"]["annotations"];
    assert_eq!(a["helm.sh/hook"], "pre-rollback");
    let pod: PodSpec = serde_json::from_value(check["spec"]["template"]["spec"].clone()).unwrap();
    let container = &pod.containers[0];
    assert_eq!(container.image.as_deref(), Some("package-executor:1.2.3"));
    assert_eq!(
        container.args.as_deref(),
        Some(&["migrate".to_owned(), "--check".to_owned()][..])
    );
    assert_eq!(
        database_url_key(&pod),
        "executor-url",
        "read only, as the executor"
    );
    assert_hardened(&pod, "128Mi");
    // Argo CD has no pre-rollback phase and never runs it.
    assert_eq!(k8s_rules::argo_cd_step(check).0, k8s_rules::ARGO_CD_NEVER);
    let off = docs_of(&["migration.checkOnRollback=false"]);
    assert!(!off.iter().any(|x| {
        x["metadata"]["name"]
            .as_str()
            .unwrap()
            .ends_with("-rollback-check")
    }));
}

/// Publishers (issue 81): each identity in `trigger.publishers` is bound to trigger's Role in the
/// release's namespace (even with the release's own hook and in-cluster trigger off) and held
/// by the admission policy, beside trigger's own account when there is one.
#[test]
fn publishers_are_bound_to_triggers_role_and_held_by_its_policy() {
    let d = docs_of(&[
        "recovery.onRelease=false",
        "trigger.publishers[0].namespace=publishing",
        "trigger.publishers[0].serviceAccount=publisher",
        "trigger.publishers[1].namespace=ci",
        "trigger.publishers[1].serviceAccount=deploy",
    ]);
    let binding = find(&d, "RoleBinding", "-trigger");
    assert_eq!(
        binding["subjects"],
        serde_json::json!([
            {"kind": "ServiceAccount", "name": "publisher", "namespace": "publishing"},
            {"kind": "ServiceAccount", "name": "deploy", "namespace": "ci"}
        ])
    );
    let role = find(&d, "Role", "-trigger");
    assert_eq!(
        role["rules"][0]["resourceNames"][0],
        "pe-package-executor-recovery"
    );
    let policy = find(&d, "ValidatingAdmissionPolicy", "-trigger-jobs");
    assert_eq!(
        policy["spec"]["matchConditions"][0]["expression"],
        r#"request.userInfo.username in ["system:serviceaccount:publishing:publisher","system:serviceaccount:ci:deploy"]"#
    );
    assert_eq!(
        policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"],
        serde_json::json!(["CREATE", "DELETE"])
    );
    // No trigger account of the release's own is made for publishers alone.
    assert!(
        !d.iter().any(|x| x["kind"] == "ServiceAccount"
            && x["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with("-trigger")),
        "a trigger account without the hook or in-cluster trigger"
    );
}

/// The wrong-but-harmless item "the trigger account able to mount any Secret": an account that
/// may create Jobs may run any pod. With `rbac.triggerJobPolicy` the chart adds an admission
/// policy (the API server's ValidatingAdmissionPolicy) that lets trigger's account create only
/// Jobs whose pod is the recovery template's, the CronJob being its parameter, and delete only
/// such Jobs that failed; the end-to-end tier shows the server refusing any other
/// (tests/cluster/chart.rs). On by default since issue 81; a namespace's tenant, who may not
/// install a cluster-scoped object, turns it off.
#[test]
fn trigger_may_create_only_the_templates_jobs_with_the_policy() {
    let yaml = render(&["--set", "rbac.triggerJobPolicy=true", "--namespace", "pe"]);
    validate("trigger job policy", &yaml);
    let d = docs(&yaml);
    let policy = find(&d, "ValidatingAdmissionPolicy", "-pe-trigger-jobs");
    assert_eq!(policy["spec"]["paramKind"]["kind"], "CronJob");
    let condition = policy["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap();
    assert!(
        condition.contains("system:serviceaccount:pe:pe-package-executor-trigger"),
        "{condition}"
    );
    let binding = find(&d, "ValidatingAdmissionPolicyBinding", "-pe-trigger-jobs");
    assert_eq!(
        binding["spec"]["paramRef"]["name"],
        "pe-package-executor-recovery"
    );
    assert_eq!(binding["spec"]["validationActions"][0], "Deny");
    // On by default (issue 81), off when the installer may not create cluster-scoped objects.
    assert!(
        docs_of(&[])
            .iter()
            .any(|x| x["kind"] == "ValidatingAdmissionPolicy")
    );
    let off = docs_of(&["rbac.triggerJobPolicy=false"]);
    assert!(!off.iter().any(|x| x["kind"] == "ValidatingAdmissionPolicy"));
}
