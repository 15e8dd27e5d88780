//! A run inside a pod records its summary as an Event on its own Job, where RBAC allows.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

/// The Event a run records on its Job (`events.k8s.io/v1`): reason `RunSummary`, action `Run`,
/// the summary line as its note (the API caps notes at 1 kB), `Warning` unless the run exited 0.
pub fn run_event(
    namespace: &str,
    job: &str,
    instance: &str,
    warning: bool,
    message: &str,
) -> Event {
    Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{job}-")),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        regarding: Some(ObjectReference {
            api_version: Some("batch/v1".into()),
            kind: Some("Job".into()),
            name: Some(job.into()),
            namespace: Some(namespace.into()),
            ..ObjectReference::default()
        }),
        reason: Some("RunSummary".into()),
        action: Some("Run".into()),
        note: Some(note(message).to_owned()),
        type_: Some(if warning { "Warning" } else { "Normal" }.into()),
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        reporting_controller: Some("package-executor".into()),
        reporting_instance: Some(instance.into()),
        ..Event::default()
    }
}

/// The API server's cap on an Event's note, in bytes (`NoteLengthLimit` in
/// kubernetes/pkg/apis/core/validation/events.go, measured with Go's `len`, which counts bytes).
pub const NOTE_LIMIT_BYTES: usize = 1024;

/// `message` cut to [`NOTE_LIMIT_BYTES`] at a character boundary, so that a note of non-ASCII
/// text (a project id, a reason) is neither refused for its bytes nor split inside a character.
pub fn note(message: &str) -> &str {
    &message[..crate::quote::floor_char_boundary(message, NOTE_LIMIT_BYTES)]
}

/// Records `message` on Job `job` in `namespace`; logs and carries on when it cannot.
pub async fn record_on_job(namespace: &str, job: &str, warning: bool, message: &str) {
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "no Kubernetes client: the run summary is not recorded as an Event");
            return;
        }
    };
    record_with(client, namespace, job, warning, message).await;
}

/// [`record_on_job`] through a given client (tests use kube's mock service).
pub async fn record_with(
    client: kube::Client,
    namespace: &str,
    job: &str,
    warning: bool,
    message: &str,
) {
    let instance = std::env::var("HOSTNAME").unwrap_or_else(|_| "package-executor".into());
    let event = run_event(namespace, job, &instance, warning, message);
    let api: Api<Event> = Api::namespaced(client, namespace);
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::warn!(error = %e, "cannot record the run summary as an Event (RBAC?); carrying on");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cap counts bytes, as the API server does: 1,000 two-byte characters are 2,000 bytes,
    /// and a note cut by characters would be refused.
    #[test]
    fn the_note_fits_the_api_servers_byte_limit_on_a_character_boundary() {
        for message in ["é".repeat(1000), "x".repeat(1023) + "€€", "a".repeat(5000)] {
            let cut = note(&message);
            assert!(cut.len() <= NOTE_LIMIT_BYTES, "{} bytes", cut.len());
            assert!(
                cut.len() > NOTE_LIMIT_BYTES - 4,
                "as much as fits: {}",
                cut.len()
            );
            assert!(message.starts_with(cut));
        }
        assert_eq!(note("short"), "short");
        let event = run_event("ns", "job", "pod", false, &"é".repeat(1000));
        assert!(event.note.unwrap().len() <= NOTE_LIMIT_BYTES);
    }
}
