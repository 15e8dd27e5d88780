//! The recovery Job of contract section 12, built purely from a template: the `jobTemplate`
//! of the chart's suspended recovery CronJob, or a file. There are no built-in defaults, so
//! the chart is the one definition of every Job's spec.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sha2::{Digest as _, Sha256};

/// `app.kubernetes.io/name`.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/component`.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// The annotation that ties a Job to its publication.
pub const PUBLICATION_ANNOTATION: &str = "qinglong.io/publication-id";

/// The name prefix of a Job made of a template file that has no name.
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

/// Applies the name, labels and annotation to the template's Job, keeping
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
    fn an_indexed_jobs_last_pod_is_a_dns_label() {
        let yaml = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: NAME}\nspec:\n  \
                    completionMode: Indexed\n  completions: 100\n  template:\n    spec:\n      \
                    containers: [{name: executor, image: img}]\n";
        let job = finalize(
            template_from_yaml(&yaml.replace("NAME", &"r".repeat(60))).unwrap(),
            "pub-1",
            None,
        );
        let name = job.metadata.name.unwrap();
        assert_eq!(format!("{name}-99").len(), 63, "{name}");
        let job = finalize(
            template_from_yaml(&yaml.replace("NAME", "pe")).unwrap(),
            "pub-1",
            None,
        );
        assert_eq!(job.metadata.name, Some(job_name_with("pe", "pub-1")));
    }
}
