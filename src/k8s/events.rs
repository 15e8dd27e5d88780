//! A run inside a pod records its summary as an Event on its own Job, where RBAC allows.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, PostParams};

/// Records `message` on Job `job` in `namespace`; logs and carries on when it cannot.
pub async fn record_on_job(namespace: &str, job: &str, warning: bool, message: &str) {
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "no Kubernetes client: the run summary is not recorded as an Event");
            return;
        }
    };
    let now = k8s_openapi::jiff::Timestamp::now();
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{job}-")),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("batch/v1".into()),
            kind: Some("Job".into()),
            name: Some(job.into()),
            namespace: Some(namespace.into()),
            ..ObjectReference::default()
        },
        reason: Some("RunSummary".into()),
        message: Some(message.chars().take(1024).collect()),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some("package-executor".into()),
            host: None,
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        reporting_component: Some("package-executor".into()),
        reporting_instance: Some(
            std::env::var("HOSTNAME").unwrap_or_else(|_| "package-executor".into()),
        ),
        action: Some("Run".into()),
        count: Some(1),
        ..Event::default()
    };
    let api: Api<Event> = Api::namespaced(client, namespace);
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::warn!(error = %e, "cannot record the run summary as an Event (RBAC?); carrying on");
    }
}
