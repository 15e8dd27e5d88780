//! `trigger`: create the recovery Job, attach to an existing one, optionally wait for it.
//! The kube client already retries 429/503/504, so no second retry loop is stacked here; the
//! whole command is bounded by `--timeout` (exit 124).

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy, WatchEvent, WatchParams};

use super::job::PUBLICATION_ANNOTATION;
use crate::report::exit;

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

/// Runs `trigger` against an API; returns the exit code (0, 7, 124) or an error (exit 1).
pub async fn trigger(
    api: &Api<Job>,
    job: &Job,
    opts: &TriggerOptions,
) -> Result<i32, TriggerError> {
    match tokio::time::timeout(opts.timeout, trigger_inner(api, job, opts)).await {
        Ok(result) => result,
        Err(_) => {
            tracing::error!(timeout = ?opts.timeout, "trigger timed out");
            Ok(exit::TIMEOUT)
        }
    }
}

async fn trigger_inner(
    api: &Api<Job>,
    job: &Job,
    opts: &TriggerOptions,
) -> Result<i32, TriggerError> {
    let name = job.metadata.name.clone().ok_or(TriggerError::Unnamed)?;
    let wanted = annotation(job).unwrap_or_default();
    let current = loop {
        match api.create(&PostParams::default(), job).await {
            Ok(created) => {
                tracing::info!(job = %name, "created the recovery Job");
                break created;
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                let existing = api.get(&name).await?;
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
                    let dp = DeleteParams {
                        propagation_policy: Some(PropagationPolicy::Background),
                        ..DeleteParams::default()
                    };
                    match api.delete(&name, &dp).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.is_not_found() => {}
                        Err(e) => return Err(e.into()),
                    }
                    // Wait for it to be gone before creating it again.
                    while api.get_opt(&name).await?.is_some() {
                        tokio::time::sleep(Duration::from_millis(500)).await;
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
        JobState::Complete => return Ok(exit::OK),
        JobState::Failed => return Ok(exit::JOB_FAILED),
        JobState::Running if !opts.wait => return Ok(exit::OK),
        JobState::Running => {}
    }
    let mut version = current
        .metadata
        .resource_version
        .clone()
        .unwrap_or_else(|| "0".into());
    loop {
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(290);
        let mut events = api.watch(&wp, &version).await?.boxed();
        while let Some(event) = events.try_next().await? {
            match event {
                WatchEvent::Added(j) | WatchEvent::Modified(j) => {
                    version = j.metadata.resource_version.clone().unwrap_or(version);
                    match state(&j) {
                        JobState::Complete => return Ok(exit::OK),
                        JobState::Failed => return Ok(exit::JOB_FAILED),
                        JobState::Running => {}
                    }
                }
                WatchEvent::Deleted(_) => {
                    tracing::error!(job = %name, "the Job was deleted while waiting");
                    return Ok(exit::JOB_FAILED);
                }
                WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                WatchEvent::Error(e) => {
                    // 410 Gone: the version expired; start again from the Job's current state.
                    tracing::warn!(error = %e.message, "watch interrupted; resuming");
                    let j = api.get(&name).await?;
                    match state(&j) {
                        JobState::Complete => return Ok(exit::OK),
                        JobState::Failed => return Ok(exit::JOB_FAILED),
                        JobState::Running => {}
                    }
                    version = j.metadata.resource_version.unwrap_or_else(|| "0".into());
                    break;
                }
            }
        }
    }
}
