//! The rules the Kubernetes API server, its admission plugins, the Job and CronJob controllers
//! and Helm enforce at install time, which no schema states and no render shows: each one with
//! its source, checked over every render of the manifests test (`tests/it/chart/manifests.rs`) and
//! every Job `trigger` builds from a rendered template.
//!
//! Sources are kubernetes/kubernetes and helm/helm at their current main; the rule is quoted in
//! the doc comment of the function that checks it.
//!
//! This is the fast tier's model, for a machine without a cluster. The end-to-end tier judges every
//! render with the real API server instead (`tests/cluster/renders.rs`), and holds each rule
//! here that the server enforces to what the server says on the same objects
//! (`tests/cluster/rules.rs`: the name and label rules, [`job_name`], [`cron_job`]'s name, and
//! [`owner_references`]' `blockOwnerDeletion` under OwnerReferencesPermissionEnforcement). What
//! no server checks stays model only, with its source: Helm's hook semantics
//! ([`hook_deadlines`], [`hook_ordering`]), what the controllers do later (the CronJob
//! controller's pruning of Jobs it controls, the names of the Jobs a CronJob schedules), and the
//! accounts a render expects to exist ([`service_accounts`]).

use serde_json::Value;

/// What one render broke: `kind name: rule`.
pub type Broken = Vec<String>;

/// Helm's default `--timeout` for `install` and `upgrade` (helm/cmd/helm/install.go in Helm 3:
/// `f.DurationVar(&client.Timeout, "timeout", 300*time.Second, "time to wait for any individual
/// Kubernetes operation (like Jobs for hooks)")`): how long Helm waits for a hook Job before it
/// fails the release.
pub const HELM_TIMEOUT_SECONDS: i64 = 300;

/// The CronJob controller names a Job `<cronjob>-<scheduled time in minutes since the epoch>`
/// (`getJobName` in pkg/controller/cronjob/utils.go); minutes stay 8 digits until the 2160s.
pub const CRON_JOB_SUFFIX: &str = "-99999999";

/// RFC 1123 label (apimachinery/pkg/util/validation: `IsDNS1123Label`): at most 63 characters
/// of `[a-z0-9-]`, starting and ending alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && label_shape(s)
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, of any length.
fn label_shape(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain (`IsDNS1123Subdomain`): at most 253 characters of dot-separated parts of
/// a label's shape. The parts have no cap of their own: `dns1123SubdomainFmt` is
/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*` and only the whole is
/// measured (a 64-character ConfigMap name is valid; the API server says so in
/// `tests/cluster/rules.rs`, where this rule once said otherwise).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(label_shape)
}

/// A label value (`IsValidLabelValue`): empty, or at most 63 characters of `[A-Za-z0-9._-]`
/// starting and ending alphanumeric.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

fn labels_ok(what: &str, labels: &Value, out: &mut Broken) {
    for (key, value) in labels.as_object().into_iter().flatten() {
        let value = value.as_str().unwrap_or("<not a string>");
        if !is_label_value(value) {
            out.push(format!(
                "{what}: label {key}={value:?} is not a label value"
            ));
        }
    }
}

/// A Job's name and what the Job controller derives from it:
/// - the controller copies the name into the pods' `batch.kubernetes.io/job-name` and
///   `job-name` labels (pkg/controller/job, `batch.JobNameLabel`), so it must be a label
///   value: at most 63 characters;
/// - an Indexed Job's pods are `<job>-<index>`, and `ValidateJob`
///   (pkg/apis/batch/validation/validation.go) refuses a Job whose last pod hostname
///   `<name>-<completions - 1>` is not a DNS label ("will not able to create pod with invalid
///   DNS label").
pub fn job_name(what: &str, name: &str, spec: &Value, out: &mut Broken) {
    if !is_dns_subdomain(name) || !is_label_value(name) {
        out.push(format!(
            "{what}: Job name {name:?} ({} characters) is not a DNS subdomain and label value",
            name.len()
        ));
    }
    if spec["completionMode"] == "Indexed" {
        let last = spec["completions"].as_i64().unwrap_or(1).max(1) - 1;
        let host = format!("{name}-{last}");
        if !is_dns_label(&host) {
            out.push(format!(
                "{what}: the last pod's hostname {host:?} ({} characters) is not a DNS label",
                host.len()
            ));
        }
    }
    labels_ok(what, &spec["template"]["metadata"]["labels"], out);
}

/// A CronJob: `ValidateCronJob` caps its name at 52 characters ("must be no more than 52
/// characters", pkg/apis/batch/validation), and each Job it schedules, `<name>-<minutes>`,
/// must pass [`job_name`]. A suspended CronJob schedules none (the recovery template: the Jobs
/// made of it are checked where they are made).
pub fn cron_job(what: &str, cron: &Value, out: &mut Broken) {
    let name = cron["metadata"]["name"].as_str().unwrap_or_default();
    if name.len() > 52 {
        out.push(format!(
            "{what}: CronJob name {name:?} is over 52 characters"
        ));
    }
    let template = &cron["spec"]["jobTemplate"];
    labels_ok(what, &template["metadata"]["labels"], out);
    if cron["spec"]["suspend"] == true {
        return;
    }
    job_name(
        &format!("{what} (a Job it schedules)"),
        &format!("{name}{CRON_JOB_SUFFIX}"),
        &template["spec"],
        out,
    );
}

/// Owner references on a Job that `trigger` makes from the recovery CronJob:
/// - `blockOwnerDeletion: true` needs `update` on the owner's `finalizers` subresource under
///   the OwnerReferencesPermissionEnforcement admission plugin ("cannot set
///   blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers
///   on", plugin/pkg/admission/gc/gc_admission.go), which `granted` must then hold;
/// - a controller reference to the CronJob makes the CronJob controller reconcile the Job
///   (`getJobsToBeReconciled` in pkg/controller/cronjob/cronjob_controllerv2.go): it deletes
///   finished ones past the history limits (3 and 1 by default), suspended or not, and warns
///   `UnexpectedJob` ("Saw a job that the controller did not create or forgot") about running
///   ones it did not start.
pub fn owner_references(what: &str, job: &Value, finalizers_granted: bool, out: &mut Broken) {
    for r in job["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if r["blockOwnerDeletion"] == true && !finalizers_granted {
            out.push(format!(
                "{what}: blockOwnerDeletion on {} {} without update on its finalizers",
                r["kind"], r["name"]
            ));
        }
        if r["controller"] == true && r["kind"] == "CronJob" {
            out.push(format!(
                "{what}: the CronJob {} is its controller, so the CronJob controller prunes it",
                r["name"]
            ));
        }
    }
}

/// Whether a Role of the render grants `update` on `cronjobs/finalizers` to `account`.
pub fn grants_cronjob_finalizers(docs: &[Value], account: &str) -> bool {
    let roles: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "RoleBinding")
        .filter(|b| {
            b["subjects"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["kind"] == "ServiceAccount" && s["name"] == account)
        })
        .filter_map(|b| b["roleRef"]["name"].as_str())
        .collect();
    docs.iter()
        .filter(|d| d["kind"] == "Role")
        .filter(|r| roles.contains(&r["metadata"]["name"].as_str().unwrap_or_default()))
        .flat_map(|r| r["rules"].as_array().cloned().unwrap_or_default())
        .any(|rule| {
            let has = |field: &str, v: &str| {
                rule[field]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x == v || x == "*"))
            };
            has("resources", "cronjobs/finalizers") && has("verbs", "update")
        })
}

/// Every pod template of the render, with where it stands.
fn pod_specs(docs: &[Value]) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    for d in docs {
        let what = format!(
            "{} {}",
            d["kind"].as_str().unwrap_or("?"),
            d["metadata"]["name"].as_str().unwrap_or("?")
        );
        for spec in [
            &d["spec"]["template"]["spec"],
            &d["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        ] {
            if spec.is_object() {
                out.push((what.clone(), spec));
            }
        }
    }
    out
}

/// Every ServiceAccount a pod names exists: one of the render's, the namespace's `default`
/// (which the ServiceAccount controller makes in every namespace), or one the values name as
/// made elsewhere (`external`). A pod naming any other is refused by the ServiceAccount
/// admission plugin ("error looking up service account",
/// plugin/pkg/admission/serviceaccount/admission.go).
pub fn service_accounts(docs: &[Value], external: &[&str], out: &mut Broken) {
    let made: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "ServiceAccount")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    for (what, spec) in pod_specs(docs) {
        let account = spec["serviceAccountName"].as_str().unwrap_or("default");
        if account != "default" && !made.contains(&account) && !external.contains(&account) {
            out.push(format!(
                "{what}: its pods' ServiceAccount {account:?} is not made by this render"
            ));
        }
    }
}

/// A Helm hook Job finishes, or fails, before Helm stops waiting for it: Helm waits for a hook
/// at most `--timeout` (helm/pkg/action/hooks.go watches each hook with that timeout), so its `activeDeadlineSeconds` (the Job's whole time, retries included) must
/// be below [`HELM_TIMEOUT_SECONDS`], with a margin for its creation.
pub fn hook_deadlines(docs: &[Value], out: &mut Broken) {
    for d in docs.iter().filter(|d| d["kind"] == "Job") {
        if d["metadata"]["annotations"]["helm.sh/hook"].is_null() {
            continue;
        }
        let name = d["metadata"]["name"].as_str().unwrap_or("?");
        match d["spec"]["activeDeadlineSeconds"].as_i64() {
            Some(s) if s <= HELM_TIMEOUT_SECONDS - 30 => {}
            other => out.push(format!(
                "hook Job {name}: activeDeadlineSeconds {other:?} is not within Helm's \
                 {HELM_TIMEOUT_SECONDS} s --timeout less 30 s"
            )),
        }
    }
}

/// The Secrets, ServiceAccounts and ConfigMaps a pod template uses.
fn pod_references(spec: &Value) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(a) = spec["serviceAccountName"].as_str() {
        out.push(("ServiceAccount", a.to_owned()));
    }
    for v in spec["volumes"].as_array().into_iter().flatten() {
        if let Some(n) = v["secret"]["secretName"].as_str() {
            out.push(("Secret", n.to_owned()));
        }
        if let Some(n) = v["configMap"]["name"].as_str() {
            out.push(("ConfigMap", n.to_owned()));
        }
    }
    for c in spec["containers"].as_array().into_iter().flatten() {
        for e in c["env"].as_array().into_iter().flatten() {
            if let Some(n) = e["valueFrom"]["secretKeyRef"]["name"].as_str() {
                out.push(("Secret", n.to_owned()));
            }
            if let Some(n) = e["valueFrom"]["configMapKeyRef"]["name"].as_str() {
                out.push(("ConfigMap", n.to_owned()));
            }
        }
    }
    out
}

/// A `pre-install` or `pre-upgrade` hook runs before Helm creates or updates the release's
/// other objects ("pre-upgrade: Executes on an upgrade request after templates are rendered,
/// but before any resources are updated", helm.sh/docs/topics/charts_hooks), so a pre-hook
/// Job that uses this render's own Secret, account or ConfigMap runs with the previous
/// release's (or none): an upgrade that changes the migration URL migrates the old database.
pub fn hook_ordering(docs: &[Value], out: &mut Broken) {
    let ordinary: Vec<(String, String)> = docs
        .iter()
        .filter(|d| d["metadata"]["annotations"]["helm.sh/hook"].is_null())
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_owned(),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    for d in docs.iter().filter(|d| d["kind"] == "Job") {
        let hooks = d["metadata"]["annotations"]["helm.sh/hook"]
            .as_str()
            .unwrap_or_default();
        // A pre-rollback hook is meant to see the objects in place (the release rolled back
        // from): it checks the database they point at.
        if !hooks
            .split(',')
            .any(|h| h.trim().starts_with("pre-") && h.trim() != "pre-rollback")
        {
            continue;
        }
        for (kind, name) in pod_references(&d["spec"]["template"]["spec"]) {
            if ordinary.contains(&(kind.to_owned(), name.clone())) {
                out.push(format!(
                    "hook Job {} ({hooks}) uses {kind} {name}, which Helm applies only after it",
                    d["metadata"]["name"]
                ));
            }
        }
    }
}

/// The phase [`argo_cd_step`] gives a Helm hook Argo CD never runs.
pub const ARGO_CD_NEVER: u8 = u8::MAX;

/// Where Argo CD runs an object in a sync: (phase, wave). Argo CD renders the chart with `helm
/// template` and orders the sync itself: by phase (PreSync, Sync, PostSync), then by wave
/// (gitops-engine pkg/sync). A hook's phase is its `argocd.argoproj.io/hook`, else Helm's hook
/// mapped (pre-install and pre-upgrade to PreSync, post-install and post-upgrade to PostSync);
/// "we ignore Helm hooks if we have Argo hook" (pkg/sync/hook/hook.go). A wave is
/// `argocd.argoproj.io/sync-wave`, else `helm.sh/hook-weight`, else 0 (pkg/sync/syncwaves).
pub fn argo_cd_step(d: &Value) -> (u8, i64) {
    let a = &d["metadata"]["annotations"];
    let csv = |key: &str| -> Vec<String> {
        a[key]
            .as_str()
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let argo = csv("argocd.argoproj.io/hook");
    let phases: Vec<u8> = if argo.is_empty() {
        csv("helm.sh/hook")
            .iter()
            .filter_map(|h| match h.as_str() {
                "pre-install" | "pre-upgrade" | "crd-install" => Some(0),
                "post-install" | "post-upgrade" => Some(2),
                _ => None,
            })
            .collect()
    } else {
        argo.iter()
            .filter_map(|h| match h.as_str() {
                "PreSync" => Some(0),
                "Sync" => Some(1),
                "PostSync" => Some(2),
                _ => None,
            })
            .collect()
    };
    if phases.is_empty() && !a["helm.sh/hook"].is_null() {
        // A Helm hook Argo CD has no phase for (pre-rollback, test): it never runs it.
        return (ARGO_CD_NEVER, 0);
    }
    let phase = phases.into_iter().min().unwrap_or(1);
    let wave = a["argocd.argoproj.io/sync-wave"]
        .as_str()
        .or(a["helm.sh/hook-weight"].as_str())
        .and_then(|w| w.trim().parse().ok())
        .unwrap_or(0);
    (phase, wave)
}

/// Argo CD starts each step of a sync only once every object of the steps before it is
/// Healthy, and fails the sync when one is Degraded (gitops-engine pkg/sync/sync_context.go:
/// a running task's health, Healthy succeeds, Degraded fails; PostSync hooks run "after ...
/// all resources in a Healthy state"). A CronJob whose last Job failed is Degraded
/// (argo-cd resource_customizations/batch/CronJob/health.lua) and a suspended one is
/// Suspended in some releases, never Healthy: so no hook Job may come after a CronJob, except
/// the release's trigger after the recovery template it reads; and the migration comes before
/// the trigger.
pub fn argo_cd_order(docs: &[Value], out: &mut Broken) {
    let name = |d: &Value| {
        d["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let hooks: Vec<&Value> = docs
        .iter()
        .filter(|d| {
            d["kind"] == "Job"
                && !d["metadata"]["annotations"]["helm.sh/hook"].is_null()
                && argo_cd_step(d).0 != ARGO_CD_NEVER
        })
        .collect();
    for hook in &hooks {
        let trigger =
            hook["metadata"]["labels"]["app.kubernetes.io/component"] == "release-trigger";
        for cron in docs.iter().filter(|d| d["kind"] == "CronJob") {
            let template = name(cron).ends_with("-recovery");
            let (h, c) = (argo_cd_step(hook), argo_cd_step(cron));
            if trigger && template {
                if c >= h {
                    out.push(format!(
                        "Job {}: under Argo CD it starts at {h:?}, not after the recovery template {} ({c:?}) it reads",
                        name(hook),
                        name(cron)
                    ));
                }
            } else if c < h {
                out.push(format!(
                    "Job {}: under Argo CD it waits at {h:?} for CronJob {} ({c:?}) to be Healthy, which a failed or suspended CronJob never is",
                    name(hook),
                    name(cron)
                ));
            }
        }
    }
    let step_of = |component: &str| {
        hooks
            .iter()
            .find(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] == component)
            .map(|d| argo_cd_step(d))
    };
    if let (Some(m), Some(t)) = (step_of("migration"), step_of("release-trigger"))
        && m >= t
    {
        out.push(format!(
            "under Argo CD the migration ({m:?}) does not come before the release's trigger ({t:?})"
        ));
    }
}

/// Every rule over one render: names and labels of every object, every Job and CronJob, the
/// ServiceAccounts its pods name, its hooks.
pub fn check_render(docs: &[Value], external_accounts: &[&str]) -> Broken {
    let mut out = check_shape(docs);
    service_accounts(docs, external_accounts, &mut out);
    out
}

/// The rules that need nothing but the render: names and labels of every object, every Job and
/// CronJob, its hooks.
pub fn check_shape(docs: &[Value]) -> Broken {
    let mut out = Vec::new();
    for d in docs {
        let kind = d["kind"].as_str().unwrap_or("?");
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        let what = format!("{kind} {name}");
        if !is_dns_subdomain(name) {
            out.push(format!("{what}: the name is not a DNS subdomain"));
        }
        labels_ok(&what, &d["metadata"]["labels"], &mut out);
        match kind {
            "Job" => job_name(&what, name, &d["spec"], &mut out),
            "CronJob" => cron_job(&what, d, &mut out),
            _ => {}
        }
    }
    hook_deadlines(docs, &mut out);
    hook_ordering(docs, &mut out);
    argo_cd_order(docs, &mut out);
    out
}

/// The rules over a Job `trigger` built, given the render it came from and the account
/// `trigger` runs as.
pub fn check_triggered(job: &Value, docs: &[Value], trigger_account: &str) -> Broken {
    let mut out = Vec::new();
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let what = format!("triggered Job {name}");
    labels_ok(&what, &job["metadata"]["labels"], &mut out);
    job_name(&what, name, &job["spec"], &mut out);
    owner_references(
        &what,
        job,
        grants_cronjob_finalizers(docs, trigger_account),
        &mut out,
    );
    out
}
