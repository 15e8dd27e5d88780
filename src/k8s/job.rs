//! The recovery Job of contract section 12, built purely from a template (the `jobTemplate` of
//! the chart's suspended recovery CronJob, or a file) or, without one, from settings.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{
    CronJob, Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, ObjectFieldSelector, PodSecurityContext,
    PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile, SecretKeySelector,
    SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sha2::{Digest as _, Sha256};

/// `app.kubernetes.io/name`.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/component`.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// The annotation that ties a Job to its publication.
pub const PUBLICATION_ANNOTATION: &str = "qinglong.io/publication-id";
/// Container name (also used by the pod failure policy).
pub const CONTAINER: &str = "executor";
/// Retries of a pod (of each index, in Indexed mode).
pub const BACKOFF_LIMIT: i32 = 3;
/// Exit codes after which retrying cannot help: error, usage, integrity, rejected.
pub const FAIL_FAST_EXIT_CODES: [i32; 4] = [1, 2, 5, 6];

/// What the default Job is built from.
#[derive(Clone, Debug)]
pub struct JobSettings {
    /// The publication that made recovery necessary.
    pub publication_id: String,
    /// Container image.
    pub image: String,
    /// Secret holding the database URLs (key `executor-url`).
    pub database_secret: String,
    /// Service account (Events on its Job).
    pub service_account: String,
    /// `--memory-budget` of the run, in bytes.
    pub memory_budget: u64,
    /// Each attempt's time (the Job-wide `activeDeadlineSeconds` is
    /// [`JobSettings::job_deadline_seconds`]).
    pub active_deadline_seconds: i64,
    /// `terminationGracePeriodSeconds`.
    pub termination_grace_seconds: i64,
    /// Indexed completion mode with this many shards.
    pub shards: Option<i32>,
}

impl JobSettings {
    /// Defaults for a publication.
    pub fn new(publication_id: impl Into<String>) -> Self {
        Self {
            publication_id: publication_id.into(),
            image: format!("package-executor:{}", env!("CARGO_PKG_VERSION")),
            database_secret: "package-executor-db".into(),
            service_account: "package-executor".into(),
            memory_budget: 96 * 1024 * 1024,
            active_deadline_seconds: 1800,
            termination_grace_seconds: 30,
            shards: None,
        }
    }

    /// The run's `--deadline`: below `activeDeadlineSeconds` minus the grace period, with a
    /// minute to spare, so the summary is always written before Kubernetes kills the pod.
    pub fn run_deadline_seconds(&self) -> i64 {
        (self.active_deadline_seconds - self.termination_grace_seconds - 60).max(60)
    }

    /// The Job-wide `activeDeadlineSeconds`: it counts across all of a Job's pods, so it
    /// leaves every attempt (the first and [`BACKOFF_LIMIT`] retries) its full
    /// [`active_deadline_seconds`](Self::active_deadline_seconds), plus Kubernetes' delay before
    /// each retry (at most 6 minutes). Before, a run that reached its deadline left its retry
    /// about 80 seconds.
    pub fn job_deadline_seconds(&self) -> i64 {
        let retries = i64::from(BACKOFF_LIMIT);
        (retries + 1) * self.active_deadline_seconds + retries * 360
    }

    /// Memory limit: the bound docs/contract.md states for this budget at the run's default
    /// concurrency (the Job's run sets no other), as the chart's is.
    pub fn memory_limit_bytes(&self) -> u64 {
        crate::coordinator::memory_bound(
            self.memory_budget,
            crate::coordinator::RunSettings::default().concurrency,
        )
    }
}

/// The name prefix of Jobs made without a named template.
pub const DEFAULT_PREFIX: &str = "package-executor";

/// `package-executor-<first 12 hex digits of sha256(ID)>`.
pub fn job_name(publication_id: &str) -> String {
    job_name_with(DEFAULT_PREFIX, publication_id)
}

/// `<prefix>-<first 12 hex digits of sha256(ID)>`, the prefix cut so that the name stays
/// within Kubernetes' 63 characters (and ends in no `-` before the hash's).
pub fn job_name_with(prefix: &str, publication_id: &str) -> String {
    job_name_within(prefix, publication_id, 0)
}

/// The characters an Indexed Job's pods add to its name: `-<completions - 1>`, the last pod's
/// hostname, which the API server requires to be a DNS label of at most 63 characters
/// (`ValidateJob` in kubernetes/pkg/apis/batch/validation/validation.go: "will not able to
/// create pod with invalid DNS label"). None for other Jobs.
pub fn pod_suffix_len(spec: Option<&JobSpec>) -> usize {
    match spec {
        Some(s) if s.completion_mode.as_deref() == Some("Indexed") => {
            let last = s.completions.unwrap_or(1).max(1) - 1;
            1 + last.to_string().len()
        }
        _ => 0,
    }
}

/// [`job_name_with`], cut `reserve` characters shorter still (for [`pod_suffix_len`]).
pub fn job_name_within(prefix: &str, publication_id: &str, reserve: usize) -> String {
    let hash = hex::encode(Sha256::digest(publication_id.as_bytes()));
    let room = (63 - 13usize).saturating_sub(reserve).max(1);
    let cut = prefix
        .char_indices()
        .nth(room)
        .map_or(prefix, |(i, _)| &prefix[..i]);
    format!("{}-{}", cut.trim_end_matches('-'), &hash[..12])
}

/// The Job a CronJob's `jobTemplate` describes, as `kubectl create job --from=cronjob/NAME`
/// makes it: the template's labels, annotations and spec as given, named after the CronJob (the
/// prefix of the Jobs made from it), owned by it when it comes from the cluster (its `uid` is
/// known), and marked as instantiated by hand.
pub fn from_cron_job(cron: &CronJob) -> Result<Job, String> {
    let name = cron
        .metadata
        .name
        .clone()
        .ok_or("the CronJob has no name")?;
    let template = cron
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .ok_or_else(|| format!("CronJob {name} has no spec"))?;
    let spec = template
        .spec
        .ok_or_else(|| format!("CronJob {name} has no jobTemplate.spec"))?;
    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert("cronjob.kubernetes.io/instantiate".into(), "manual".into());
    let owner = cron.metadata.uid.clone().map(|uid| OwnerReference {
        api_version: "batch/v1".into(),
        kind: "CronJob".into(),
        name: name.clone(),
        uid,
        // Not the controller: the CronJob controller reconciles only the Jobs whose controller
        // reference names it (getJobsToBeReconciled in
        // kubernetes/pkg/controller/cronjob/cronjob_controllerv2.go), pruning finished ones
        // past its history limits even while suspended and warning `UnexpectedJob` about
        // running ones it did not start; a plain owner reference still has the garbage
        // collector remove the Job with its CronJob. And no blockOwnerDeletion: under the
        // OwnerReferencesPermissionEnforcement admission plugin setting it needs `update` on
        // `cronjobs/finalizers` (kubernetes/plugin/pkg/admission/gc/gc_admission.go).
        controller: None,
        block_owner_deletion: None,
    });
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(name),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// A template file: a `batch/v1` Job, or a CronJob whose `jobTemplate` is used
/// ([`from_cron_job`]).
pub fn template_from_yaml(text: &str) -> Result<Job, String> {
    let value: serde_json::Value =
        serde_norway::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    match value["kind"].as_str() {
        Some("CronJob") => {
            let cron: CronJob = serde_json::from_value(value)
                .map_err(|e| format!("not a batch/v1 CronJob: {e}"))?;
            from_cron_job(&cron)
        }
        Some("Job") | None => {
            serde_json::from_value(value).map_err(|e| format!("not a batch/v1 Job: {e}"))
        }
        Some(other) => Err(format!("a {other}, not a Job or a CronJob")),
    }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..EnvVar::default()
    }
}

/// The default Job spec (before name, labels and annotation are applied).
pub fn default_job(s: &JobSettings) -> Job {
    let mut env_vars = vec![
        EnvVar {
            name: "DATABASE_URL".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: s.database_secret.clone(),
                    key: "executor-url".into(),
                    optional: Some(false),
                }),
                ..Default::default()
            }),
            ..EnvVar::default()
        },
        env("PACKAGE_EXECUTOR_LOG_FORMAT", "json"),
        env(
            "PACKAGE_EXECUTOR_DEADLINE",
            format!("{}s", s.run_deadline_seconds()),
        ),
        env(
            "PACKAGE_EXECUTOR_MEMORY_BUDGET",
            s.memory_budget.to_string(),
        ),
        field_env(
            "PACKAGE_EXECUTOR_JOB_NAME",
            "metadata.labels['batch.kubernetes.io/job-name']",
        ),
        field_env("PACKAGE_EXECUTOR_POD_NAMESPACE", "metadata.namespace"),
    ];
    if let Some(n) = s.shards {
        env_vars.push(env("PACKAGE_EXECUTOR_SHARD_COUNT", n.to_string()));
    }
    let limit = Quantity(format!(
        "{}Mi",
        s.memory_limit_bytes().div_ceil(1024 * 1024)
    ));
    let container = Container {
        name: CONTAINER.into(),
        image: Some(s.image.clone()),
        args: Some(vec!["run".into()]),
        env: Some(env_vars),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("250m".into())),
                ("memory".to_owned(), limit.clone()),
            ])),
            limits: Some(BTreeMap::from([("memory".to_owned(), limit)])),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            ..Default::default()
        }),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Container::default()
    };
    let pod = PodSpec {
        restart_policy: Some("Never".into()),
        service_account_name: Some(s.service_account.clone()),
        termination_grace_period_seconds: Some(s.termination_grace_seconds),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(65532),
            run_as_group: Some(65532),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        containers: vec![container],
        ..PodSpec::default()
    };
    let failure_policy = PodFailurePolicy {
        rules: vec![
            // Retrying cannot help; in Indexed mode only that shard stops.
            PodFailurePolicyRule {
                action: if s.shards.is_some() {
                    "FailIndex".into()
                } else {
                    "FailJob".into()
                },
                on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                    container_name: Some(CONTAINER.into()),
                    operator: "In".into(),
                    values: FAIL_FAST_EXIT_CODES.to_vec(),
                }),
                on_pod_conditions: None,
            },
            PodFailurePolicyRule {
                action: "Ignore".into(),
                on_exit_codes: None,
                on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                    type_: "DisruptionTarget".into(),
                    status: "True".into(),
                }]),
            },
        ],
    };
    let mut spec = JobSpec {
        active_deadline_seconds: Some(s.job_deadline_seconds()),
        ttl_seconds_after_finished: Some(86_400),
        pod_failure_policy: Some(failure_policy),
        template: PodTemplateSpec {
            metadata: None,
            spec: Some(pod),
        },
        ..JobSpec::default()
    };
    match s.shards {
        Some(n) => {
            spec.completion_mode = Some("Indexed".into());
            spec.completions = Some(n);
            spec.parallelism = Some(n);
            spec.backoff_limit_per_index = Some(BACKOFF_LIMIT);
        }
        None => spec.backoff_limit = Some(BACKOFF_LIMIT),
    }
    Job {
        metadata: ObjectMeta::default(),
        spec: Some(spec),
        status: None,
    }
}

/// Applies the name, labels and annotation to a Job (default or template), keeping
/// `restartPolicy: Never`.
pub fn finalize(mut job: Job, publication_id: &str, namespace: Option<&str>) -> Job {
    let prefix = job.metadata.name.as_deref().unwrap_or(DEFAULT_PREFIX);
    let reserve = pod_suffix_len(job.spec.as_ref());
    job.metadata.name = Some(job_name_within(prefix, publication_id, reserve));
    job.metadata.generate_name = None;
    if let Some(ns) = namespace {
        job.metadata.namespace = Some(ns.to_owned());
    }
    let labels = job.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(NAME_LABEL.into(), "package-executor".into());
    labels.insert(COMPONENT_LABEL.into(), "snapshot-recovery".into());
    job.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(PUBLICATION_ANNOTATION.into(), publication_id.into());
    let spec = job.spec.get_or_insert_with(JobSpec::default);
    let pod = spec.template.spec.get_or_insert_with(PodSpec::default);
    pod.restart_policy = Some("Never".into());
    job.status = None;
    job
}

/// The Job to create: the template's spec as given, or the defaults.
pub fn build(settings: &JobSettings, template: Option<Job>, namespace: Option<&str>) -> Job {
    let base = template.unwrap_or_else(|| default_job(settings));
    finalize(base, &settings.publication_id, namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_take_the_templates_prefix_within_63_characters() {
        assert_eq!(job_name("pub-1"), job_name_with(DEFAULT_PREFIX, "pub-1"));
        let long = "x".repeat(70);
        let name = job_name_with(&long, "pub-1");
        assert_eq!(name.len(), 63, "{name}");
        let name = job_name_with(&format!("{}-", "y".repeat(49)), "pub-1");
        assert!(!name.contains("--"), "{name}");
    }

    #[test]
    fn a_cron_jobs_template_becomes_the_job() {
        let yaml = "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: pe-recovery, uid: u-1}\n\
                    spec:\n  schedule: '0 0 31 2 *'\n  suspend: true\n  jobTemplate:\n    \
                    metadata: {labels: {team: a}}\n    spec:\n      backoffLimit: 2\n      \
                    template:\n        spec:\n          serviceAccountName: pe-run\n          \
                    containers: [{name: executor, image: img}]\n";
        let job = finalize(template_from_yaml(yaml).unwrap(), "pub-1", Some("ns"));
        assert_eq!(
            job.metadata.name.as_deref(),
            Some(job_name_with("pe-recovery", "pub-1").as_str())
        );
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(labels[COMPONENT_LABEL], "snapshot-recovery");
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.backoff_limit, Some(2), "the template's spec as given");
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.service_account_name.as_deref(), Some("pe-run"));
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        assert_eq!(
            job.metadata.owner_references.as_ref().unwrap()[0].kind,
            "CronJob"
        );
        assert!(template_from_yaml("kind: Pod\n").is_err());
    }

    #[test]
    fn names_and_deadlines() {
        let name = job_name("pub-1");
        assert_eq!(name.len(), "package-executor-".len() + 12);
        let s = JobSettings::new("pub-1");
        assert!(s.run_deadline_seconds() < s.active_deadline_seconds - s.termination_grace_seconds);
        let job = build(&s, None, Some("ns"));
        let spec = job.spec.as_ref().map(|s| s.backoff_limit);
        assert_eq!(spec, Some(Some(3)));
    }
}
