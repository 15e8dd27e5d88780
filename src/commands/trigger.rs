//! `trigger`: the recovery Job from the command line.

use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::Api;

use crate::cli::TriggerArgs;
use crate::exit::Exit;
use crate::k8s::job;
use crate::k8s::trigger::{TriggerOptions, Triggered, trigger as run_trigger};

/// The largest template file read: the API server stores no object larger than 1.5 MiB (etcd's
/// default request limit), so a larger file cannot be a Job it would take, and reading one
/// (`/dev/zero`) must not grow without bound.
const MAX_TEMPLATE_BYTES: u64 = 1536 * 1024;

/// Why a template file gave no template.
#[derive(Debug, thiserror::Error)]
enum TemplateError {
    #[error("{path}: {source}; give a readable batch/v1 Job or CronJob file")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is larger than {MAX_TEMPLATE_BYTES} bytes, more than the API server stores in one \
         object; give the Job or CronJob's own YAML"
    )]
    TooLarge { path: String },
    #[error(
        "{path} could not be read within --timeout ({timeout:?}): nothing wrote it (a FIFO or \
         a stalled mount?); give a regular file, or raise --timeout"
    )]
    TimedOut {
        path: String,
        timeout: std::time::Duration,
    },
}

/// Reads the template file within `timeout` and [`MAX_TEMPLATE_BYTES`]. The read runs on a
/// thread of its own, not the runtime's blocking pool: a FIFO nobody writes blocks its
/// `open` for ever, and a thread left behind that way must not hold up the runtime's shutdown.
async fn read_template(
    path: &std::path::Path,
    timeout: std::time::Duration,
) -> Result<String, TemplateError> {
    use std::io::Read as _;
    let shown = path.display().to_string();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let owned = path.to_path_buf();
    std::thread::spawn(move || {
        let read = std::fs::File::open(&owned).and_then(|f| {
            let mut bytes = Vec::new();
            f.take(MAX_TEMPLATE_BYTES + 1).read_to_end(&mut bytes)?;
            Ok(bytes)
        });
        let _ = tx.send(read);
    });
    let bytes = match tokio::time::timeout(timeout, rx).await {
        Err(_) => {
            return Err(TemplateError::TimedOut {
                path: shown,
                timeout,
            });
        }
        Ok(Err(_)) => {
            return Err(TemplateError::Read {
                path: shown,
                source: std::io::Error::other("the reading thread ended without an answer"),
            });
        }
        Ok(Ok(read)) => read.map_err(|source| TemplateError::Read {
            path: shown.clone(),
            source,
        })?,
    };
    if bytes.len() as u64 > MAX_TEMPLATE_BYTES {
        return Err(TemplateError::TooLarge { path: shown });
    }
    String::from_utf8(bytes).map_err(|e| TemplateError::Read {
        path: shown,
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
    })
}

/// The Job `trigger` would create from a template file, read within `timeout`.
async fn job_for(
    args: &TriggerArgs,
    namespace: Option<&str>,
    timeout: std::time::Duration,
) -> Result<Job, (Exit, anyhow::Error)> {
    let path = args.job_template.as_ref().ok_or_else(|| {
        (
            Exit::Error,
            anyhow::anyhow!("a template is required: --from-cronjob NAME or --job-template FILE"),
        )
    })?;
    let text = read_template(path, timeout).await.map_err(|e| {
        let code = match e {
            TemplateError::TimedOut { .. } => Exit::Timeout,
            _ => Exit::Error,
        };
        (code, anyhow::Error::new(e))
    })?;
    let template = job::template_from_yaml(&text).map_err(|e| {
        (
            Exit::Error,
            anyhow::anyhow!("{}: {e}; give a batch/v1 Job or CronJob", path.display()),
        )
    })?;
    Ok(job::finalize(template, &args.publication_id, namespace))
}

/// `trigger`.
pub(super) async fn trigger(args: &TriggerArgs) -> anyhow::Result<Exit> {
    // --timeout bounds the whole command: reading the template counts.
    let started = tokio::time::Instant::now();
    if args.dry_run {
        let job = match job_for(args, args.namespace.as_deref(), args.timeout).await {
            Ok(job) => job,
            Err((code, e)) => {
                errln!("error: {e:#}");
                return Ok(code);
            }
        };
        // k8s-openapi writes apiVersion and kind itself.
        let yaml = serde_norway::to_string(&job)?;
        outln!("{}", yaml.trim_end_matches('\n'));
        return Ok(Exit::Ok);
    }
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            errln!(
                "error: cannot reach Kubernetes: {e}; set KUBECONFIG or run inside a pod with a service account"
            );
            return Ok(Exit::Error);
        }
    };
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let job = match &args.from_cronjob {
        Some(name) => {
            let crons: Api<CronJob> = Api::namespaced(client.clone(), &namespace);
            let read = crate::k8s::trigger::template_from_cluster(&crons, name);
            match tokio::time::timeout(args.timeout, read).await {
                Ok(Ok(template)) => job::finalize(template, &args.publication_id, Some(&namespace)),
                Ok(Err(e)) => {
                    errln!("error: {e}");
                    return Ok(Exit::Error);
                }
                Err(_) => {
                    errln!(
                        "error: the template CronJob {name} could not be read within --timeout \
                         ({:?}): the Kubernetes API did not answer; run again (or raise --timeout)",
                        args.timeout
                    );
                    return Ok(Exit::Timeout);
                }
            }
        }
        None => {
            let left = args.timeout.saturating_sub(started.elapsed());
            match job_for(args, Some(&namespace), left).await {
                Ok(job) => job,
                Err((code, e)) => {
                    errln!("error: {e:#}");
                    return Ok(code);
                }
            }
        }
    };
    let api: Api<Job> = Api::namespaced(client, &namespace);
    let opts = TriggerOptions {
        replace_failed: args.replace_failed,
        wait: args.wait,
        timeout: args.timeout.saturating_sub(started.elapsed()),
    };
    match run_trigger(&api, &job, &opts).await {
        Ok(Triggered::Complete) => Ok(Exit::Ok),
        Ok(Triggered::Failed) => Ok(Exit::JobFailed),
        Ok(Triggered::TimedOut) => Ok(Exit::Timeout),
        Err(e) => {
            errln!("error: {e}");
            Ok(Exit::Error)
        }
    }
}
