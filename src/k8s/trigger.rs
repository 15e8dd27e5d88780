//! `trigger`: create the recovery Job, attach to an existing one, optionally wait for it.
//! An API call that fails in a way that can heal by itself (the server busy or restarting, the
//! connection refused or cut: [`transient`]) is tried again with backoff; the whole command,
//! reading the template included, is bounded by `--timeout` (exit 124), which the chart's hook
//! retries. What cannot heal (403, 404, 422, a foreign Job) ends it at once (exit 1).

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{Api, DeleteParams, PostParams, Preconditions, PropagationPolicy};
use kube::runtime::wait::{self, await_condition, delete::delete_and_finalize};

use super::job::PUBLICATION_ANNOTATION;

/// What `trigger` is told beyond the Job itself.
#[derive(Clone, Debug)]
pub struct TriggerOptions {
    /// Re-create an existing Job that has failed.
    pub replace_failed: bool,
    /// Wait until the Job completes or fails.
    pub wait: bool,
    /// Bounds the whole command.
    pub timeout: Duration,
}

/// Why `trigger` could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum TriggerError {
    /// A Job of that name belongs to another publication.
    #[error(
        "Job {name} already exists for publication {found:?}, not {wanted:?}; delete it or use another publication id"
    )]
    ForeignJob {
        /// Job name.
        name: String,
        /// Its annotation.
        found: Option<String>,
        /// Ours.
        wanted: String,
    },
    /// The API refused or failed.
    #[error(
        "Kubernetes API error: {0}; check the namespace, RBAC (create/get/watch/delete jobs) and the cluster"
    )]
    Api(#[from] kube::Error),
    /// Following the Job (kube's watcher) failed.
    #[error(
        "cannot follow the Job: {0}; check RBAC (list/watch jobs) and the API server, or run without --wait"
    )]
    Wait(#[from] wait::Error),
    /// Deleting a failed Job and waiting for it to be gone failed.
    #[error(
        "cannot replace the failed Job: {0}; check RBAC (delete/list/watch jobs), or delete it by hand"
    )]
    Delete(#[from] wait::delete::Error),
    /// The template CronJob is missing or unusable.
    #[error("{0}")]
    Template(String),
    /// The Job has no name (a bug).
    #[error("the Job has no name")]
    Unnamed,
}

/// How the Job ended, as far as `trigger` followed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Still running (or not yet started).
    Running,
    /// `Complete`.
    Complete,
    /// `Failed`.
    Failed,
}

/// The state of a Job from its conditions.
pub fn state(job: &Job) -> JobState {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    let has = |t: &str| {
        conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"))
    };
    if has("Failed") {
        JobState::Failed
    } else if has("Complete") {
        JobState::Complete
    } else {
        JobState::Running
    }
}

fn annotation(job: &Job) -> Option<String> {
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PUBLICATION_ANNOTATION))
        .cloned()
}

/// Whether an API call's failure may heal by itself: the server overloaded or restarting (429,
/// 5xx) or the connection (refused, reset, timed out). A refusal (403, 404, 409, 422) will not.
pub fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// Runs an API call until it succeeds or fails for good, waiting between tries (200 ms doubling
/// to 10 s, with jitter). Unbounded here: the caller's `--timeout` bounds it.
async fn retried<T, F, Fut>(what: &str, mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut delays = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(10))
        .with_jitter()
        .without_max_times()
        .build();
    loop {
        match call().await {
            Err(e) if transient(&e) => {
                let delay = delays.next().unwrap_or(Duration::from_secs(10));
                tracing::warn!(call = what, error = %e, retry_in = ?delay,
                    "the Kubernetes API failed for now: trying again within --timeout");
                tokio::time::sleep(delay).await;
            }
            result => return result,
        }
    }
}

/// The Job template of CronJob `name` in the cluster ([`super::job::from_cron_job`]).
pub async fn template_from_cluster(api: &Api<CronJob>, name: &str) -> Result<Job, TriggerError> {
    match retried("get the template CronJob", || api.get_opt(name)).await? {
        Some(cron) => super::job::from_cron_job(&cron).map_err(TriggerError::Template),
        None => Err(TriggerError::Template(format!(
            "no CronJob {name} in this namespace: give the chart's recovery template \
             (<release>-package-executor-recovery; `kubectl get cronjobs`), or --namespace"
        ))),
    }
}

/// How a trigger ended; the command maps it to its exit code (contract section 10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Triggered {
    /// The Job completed (or runs, and nobody asked to wait).
    Complete,
    /// The Job failed, or was deleted while waited for.
    Failed,
    /// `--timeout` passed first.
    TimedOut,
}

/// Runs `trigger` against an API.
pub async fn trigger(
    api: &Api<Job>,
    job: &Job,
    opts: &TriggerOptions,
) -> Result<Triggered, TriggerError> {
    match tokio::time::timeout(opts.timeout, trigger_inner(api, job, opts)).await {
        Ok(result) => result,
        Err(_) => {
            tracing::error!(timeout = ?opts.timeout, "trigger timed out");
            Ok(Triggered::TimedOut)
        }
    }
}

async fn trigger_inner(
    api: &Api<Job>,
    job: &Job,
    opts: &TriggerOptions,
) -> Result<Triggered, TriggerError> {
    let name = job.metadata.name.clone().ok_or(TriggerError::Unnamed)?;
    let wanted = annotation(job).unwrap_or_default();
    let current = loop {
        let post = PostParams::default();
        match retried("create the Job", || api.create(&post, job)).await {
            Ok(created) => {
                tracing::info!(job = %name, "created the recovery Job");
                break created;
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                let existing = retried("read the existing Job", || api.get(&name)).await?;
                let found = annotation(&existing);
                if found.as_deref() != Some(wanted.as_str()) {
                    return Err(TriggerError::ForeignJob {
                        name,
                        found,
                        wanted,
                    });
                }
                if state(&existing) == JobState::Failed && opts.replace_failed {
                    tracing::warn!(job = %name, "the existing Job failed: deleting it to run again");
                    // Only the Job seen failed (its uid as a precondition): one that another
                    // trigger has meanwhile replaced is left alone (409) and attached to.
                    let dp = DeleteParams {
                        propagation_policy: Some(PropagationPolicy::Background),
                        preconditions: Some(Preconditions {
                            uid: existing.metadata.uid.clone(),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    // Deletes and waits until it is gone (finalizers included) before creating
                    // it again; one that is already gone is fine.
                    match delete_and_finalize(api.clone(), &name, &dp).await {
                        Ok(()) => {}
                        Err(wait::delete::Error::Delete(kube::Error::Api(s)))
                            if s.is_not_found() || s.code == 409 => {}
                        Err(e) => return Err(e.into()),
                    }
                    continue;
                }
                tracing::info!(job = %name, "attached to the existing recovery Job");
                break existing;
            }
            Err(e) => return Err(e.into()),
        }
    };
    match state(&current) {
        JobState::Complete => return Ok(Triggered::Complete),
        JobState::Failed => return Ok(Triggered::Failed),
        JobState::Running if !opts.wait => return Ok(Triggered::Complete),
        JobState::Running => {}
    }
    // kube's watcher: a list, then a watch from its version, resumed (and re-listed on 410
    // Gone) by the runtime. `None` is a Job deleted while waiting.
    let ended = |j: Option<&Job>| j.is_none_or(|j| state(j) != JobState::Running);
    match await_condition(api.clone(), &name, ended).await? {
        None => {
            tracing::error!(job = %name, "the Job was deleted while waiting");
            Ok(Triggered::Failed)
        }
        Some(j) if state(&j) == JobState::Complete => Ok(Triggered::Complete),
        Some(_) => Ok(Triggered::Failed),
    }
}
