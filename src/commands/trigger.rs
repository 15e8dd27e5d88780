//! `trigger`: the recovery Job from the command line.

use anyhow::Context as _;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::Api;

use crate::cli::TriggerArgs;
use crate::exit::Exit;
use crate::k8s::job;
use crate::k8s::trigger::{TriggerOptions, Triggered, trigger as run_trigger};

/// The Job `trigger` would create from a template file.
pub(super) fn job_for(args: &TriggerArgs, namespace: Option<&str>) -> anyhow::Result<Job> {
    let path = args
        .job_template
        .as_ref()
        .context("a template is required: --from-cronjob NAME or --job-template FILE")?;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let template = job::template_from_yaml(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}; give a batch/v1 Job or CronJob", path.display()))?;
    Ok(job::finalize(template, &args.publication_id, namespace))
}

/// `trigger`.
pub(super) async fn trigger(args: &TriggerArgs) -> anyhow::Result<Exit> {
    if args.dry_run {
        let job = job_for(args, args.namespace.as_deref())?;
        // k8s-openapi writes apiVersion and kind itself.
        print!("{}", serde_norway::to_string(&job)?);
        return Ok(Exit::Ok);
    }
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "error: cannot reach Kubernetes: {e}; set KUBECONFIG or run inside a pod with a service account"
            );
            return Ok(Exit::Error);
        }
    };
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    // --timeout bounds the whole command: reading the template counts.
    let started = tokio::time::Instant::now();
    let job = match &args.from_cronjob {
        Some(name) => {
            let crons: Api<CronJob> = Api::namespaced(client.clone(), &namespace);
            let read = crate::k8s::trigger::template_from_cluster(&crons, name);
            match tokio::time::timeout(args.timeout, read).await {
                Ok(Ok(template)) => job::finalize(template, &args.publication_id, Some(&namespace)),
                Ok(Err(e)) => {
                    eprintln!("error: {e}");
                    return Ok(Exit::Error);
                }
                Err(_) => {
                    eprintln!(
                        "error: the template CronJob {name} could not be read within --timeout \
                         ({:?}): the Kubernetes API did not answer; run again (or raise --timeout)",
                        args.timeout
                    );
                    return Ok(Exit::Timeout);
                }
            }
        }
        None => job_for(args, Some(&namespace))?,
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
            eprintln!("error: {e}");
            Ok(Exit::Error)
        }
    }
}
