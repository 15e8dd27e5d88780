//! Upgrades of a running release to a build one migration ahead (`PE_NEXT_IMAGE`: the
//! `next-schema` feature, whose last migration changes nothing but the schema's version), as
//! `scripts/test.sh kind` builds and imports it beside the release's own image:
//!
//! - a recovery Job of the older build that is running when the newer migration commits ends
//!   promptly (it reads the schema's version as it works, and stops with exit 8), the newer
//!   release's Job publishes, and no consumer is ever served a stale snapshot (issue 48);
//! - `helm upgrade --atomic` that fails after the newer migration committed is not rolled back
//!   onto the older build: the release rolled back to checks the schema first (its
//!   pre-rollback hook, `migrate --check`), and the rollback fails instead (issue 51, defect 11).

use std::time::Instant;

use package_executor_testkit::cluster::{self, Namespace};
use serde_json::Value;

use crate::chart::{
    RELEASE, assert_converged_with, env_image, image, image_values, install_import_publish,
    newest_recovery_job, postgres_image, published, recovery_container_field, run_once_with,
    running_pod_of, summaries_of, upgrade, values,
};

/// The build one migration ahead, as `REPOSITORY:TAG`.
fn next_image() -> String {
    env_image("PE_NEXT_IMAGE")
}

/// A pod that holds `ql3.project_claims` in ACCESS EXCLUSIVE mode (as the owner) until it is
/// deleted, so that every executor's attempt waits: a run stays under way for as long as the
/// test needs. Returns once the lock is held.
fn hold_the_claims(ns: &Namespace) -> &'static str {
    let name = "claims-holder";
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": crate::chart::executor_labels()},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 70,
                "seccompProfile": {"type": "RuntimeDefault"}
            },
            "containers": [{
                "name": "main",
                "image": postgres_image(),
                "imagePullPolicy": "Never",
                // The policy enforcer admits a new pod's address a moment after it starts:
                // psql tries again until it connects (the executor retries by itself).
                "command": ["sh", "-c",
                    "psql=/usr/lib/postgresql/15/bin/psql; \
                     for _ in $(busybox seq 1 60); do \
                       $psql \"$DATABASE_URL\" -c 'SELECT 1' >/dev/null && break; busybox sleep 1; \
                     done; \
                     exec $psql \"$DATABASE_URL\" -v ON_ERROR_STOP=1 \
                     -c BEGIN -c 'LOCK TABLE ql3.project_claims IN ACCESS EXCLUSIVE MODE' \
                     -c 'SELECT pg_sleep(1800)'"],
                "resources": {
                    "requests": {"cpu": "50m", "memory": "32Mi"},
                    "limits": {"cpu": "1", "memory": "64Mi"}
                },
                "env": [{"name": "DATABASE_URL", "valueFrom": {"secretKeyRef": {
                    "name": crate::chart::db_secret(ns), "key": "migrate-url"}}}],
                "securityContext": {
                    "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}
                }
            }]
        }
    });
    ns.apply(&pod.to_string());
    ns.wait(
        &format!("pod/{name}"),
        "jsonpath={.status.phase}=Running",
        "120s",
    );
    // psql prints each command's tag as it completes: LOCK TABLE once the lock is held.
    let started = Instant::now();
    loop {
        let log = ns.kubectl(&["logs", name]);
        if log.contains("LOCK TABLE") {
            return name;
        }
        assert!(
            started.elapsed().as_secs() < 120,
            "the holder did not take the lock: {log}"
        );
        std::thread::park_timeout(std::time::Duration::from_millis(500));
    }
}

/// `current demo-1` with IMAGE: its exit code (0 a snapshot proven current, 4 none).
fn current_demo_1(ns: &Namespace, image: &str, label: &str) -> i64 {
    let (code, log) = run_once_with(
        ns,
        image,
        &format!("current-{label}"),
        "executor-url",
        &["current", "demo-1", "--json"],
    );
    assert!(code == 0 || code == 4, "current demo-1 ({label}): {log}");
    code
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn an_older_builds_job_ends_when_a_newer_migration_commits_and_nothing_stale_is_served() {
    let ns = Namespace::new("e2e-upgrade");
    let (older, next) = (image(), next_image());
    install_import_publish(&ns, &[]);
    let mut answers = Vec::new();
    // A publication changes demo-1's package set: its snapshot is stale from now on, and the
    // consumer must get none (4) until one of the new set is built.
    let (code, log) = run_once_with(
        &ns,
        &older,
        "activate",
        "migrate-url",
        &[
            "sources",
            "activate",
            "--installation",
            "demo-1-github",
            "--generation",
            "3",
        ],
    );
    assert_eq!(code, 0, "{log}");
    answers.push((
        "published, before the upgrade",
        current_demo_1(&ns, &older, "before"),
    ));

    // The older build's recovery Job for that publication, held under way.
    let holder = hold_the_claims(&ns);
    upgrade(&ns, &["--set", "publicationId=older-build"]);
    let older_job = newest_recovery_job(&ns);
    running_pod_of(&ns, &older_job);

    // The upgrade to the newer build: its migration commits while that Job runs.
    let mut args: Vec<String> = vec!["--set".into(), "publicationId=newer-build".into()];
    args.extend(image_values(&next));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    upgrade(&ns, &args);
    let migrated = Instant::now();
    let newer_job = newest_recovery_job(&ns);
    assert_ne!(newer_job, older_job);
    answers.push(("during the upgrade", current_demo_1(&ns, &next, "during")));

    // The older build's pod stops (exit 8) once it reads the newer version.
    ns.wait(
        &format!("job/{older_job}"),
        "jsonpath={.status.failed}=1",
        "120s",
    );
    let pod_ended = migrated.elapsed();
    ns.kubectl(&["delete", "pod", holder, "--wait=false"]);
    ns.wait(&format!("job/{older_job}"), "condition=Failed", "300s");
    let job_ended = migrated.elapsed();
    for summary in summaries_of(&ns, &older_job) {
        assert_eq!(summary["exitCode"], 8, "{summary}");
    }
    let pods = cluster::get_json(&[
        "-n",
        &ns.name,
        "pods",
        "-l",
        &format!("job-name={older_job}"),
    ]);
    let first = &pods["items"][0]["metadata"]["name"];
    let log = ns.kubectl(&["logs", first.as_str().unwrap()]);
    assert!(log.contains(&newer_schema()), "{log}");

    // The newer release's Job publishes demo-1's new set.
    ns.wait(&format!("job/{newer_job}"), "condition=Complete", "300s");
    let summaries = summaries_of(&ns, &newer_job);
    assert!(published(&summaries) >= 1, "{summaries:?}");
    answers.push(("after", current_demo_1(&ns, &next, "after")));
    assert_converged_with(&ns, &next);

    // Stale answers: a snapshot served while demo-1's newest set had none built.
    let stale = answers[..2].iter().filter(|(_, code)| *code == 0).count();
    println!(
        "older build's pod ended {:.1} s and its Job {:.1} s after the migration; answers {answers:?}; stale answers: {stale}",
        pod_ended.as_secs_f64(),
        job_ended.as_secs_f64()
    );
    assert_eq!(stale, 0, "{answers:?}");
    assert_eq!(answers[2].1, 0, "the new set's snapshot is served");
}

/// `helm upgrade --atomic` to the newer build, which fails after its migration committed (here
/// its trigger hook is refused: no RBAC). Helm rolls back, running the pre-rollback hook of the
/// release it rolls back to: that release's (older) image refuses the newer schema, the hook
/// fails, and so does the rollback, so the newer build's objects stay in place. On the chart
/// before this check the rollback succeeded and put the older build back (its recovery
/// template's image), whose every run then exited 8.
#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn an_atomic_upgrade_is_not_rolled_back_onto_a_build_older_than_the_schema() {
    let ns = Namespace::new("e2e-atomic");
    let (older, next) = (image(), next_image());
    upgrade(&ns, &[]);
    let template_image = || recovery_container_field(&ns, "image");
    assert_eq!(template_image(), older);

    let mut args: Vec<String> = ["upgrade", RELEASE, "charts/package-executor"]
        .map(str::to_owned)
        .to_vec();
    let mut extra = image_values(&next);
    extra.extend(["--set".to_owned(), "rbac.create=false".to_owned()]);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    args.extend(values(&extra));
    args.extend(["--atomic", "--timeout", "4m"].map(str::to_owned));
    let out = crate::chart::helm_output(&ns, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the failing upgrade succeeded");
    assert!(
        err.contains("an error occurred while rolling back the release")
            && err.contains("-rollback-check failed"),
        "{err}"
    );
    // The newer build stays: its migration committed, and the older build cannot run on it.
    assert_eq!(template_image(), next, "{err}");
    let check = crate::chart::named(&ns, "job", "rollback-check");
    let log = ns.kubectl(&["logs", &format!("job/{check}")]);
    assert!(log.contains(&newer_schema()), "{log}");
    let history: Value = serde_json::from_str(&crate::chart::helm(
        &ns,
        &["history", RELEASE, "-o", "json"],
    ))
    .unwrap();
    println!("helm history after the refused rollback: {history}");
    // Helm leaves the refused rollback's revision pending, which blocks an upgrade: rolling back
    // to the newer release's revision (2) passes its own check, and clears it.
    let last = &history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["status"], "pending-rollback", "{history}");
    crate::chart::helm(
        &ns,
        &["rollback", RELEASE, "2", "--wait", "--timeout", "5m"],
    );
    assert_eq!(template_image(), next);

    // Mended (RBAC back), the newer release upgrades and runs.
    let next_args = image_values(&next);
    let next_args: Vec<&str> = next_args.iter().map(String::as_str).collect();
    upgrade(&ns, &next_args);
    let job = newest_recovery_job(&ns);
    ns.wait(&format!("job/{job}"), "condition=Complete", "300s");
    for summary in summaries_of(&ns, &job) {
        assert_eq!(summary["exitCode"], 0, "{summary}");
    }
}

/// What an older build says of the next schema: one migration ahead of this release's.
fn newer_schema() -> String {
    let release = package_executor::store::migrate::POSTGRES.len();
    format!(
        "is version {}, newer than this build's {release}",
        release + 1
    )
}
