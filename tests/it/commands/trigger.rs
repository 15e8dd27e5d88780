//! `trigger` against kube's mock service (tower_test): the request paths, methods and bodies,
//! and the exit codes.

use package_executor_testkit::helm;

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::batch::v1::{CronJob, Job, JobCondition, JobStatus};
use kube::client::Body;
use kube::{Api, Client};
use package_executor::k8s::job::{self, PUBLICATION_ANNOTATION};
use package_executor::k8s::trigger::{TriggerOptions, Triggered, trigger};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

const JOBS: &str = "/apis/batch/v1/namespaces/ns/jobs";

fn setup() -> (Api<Job>, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Api::namespaced(Client::new(service, "ns"), "ns"), handle)
}

/// The Job `trigger` makes of the chart's recovery template for a publication.
fn the_job(publication: &str) -> Job {
    let cron: CronJob = serde_json::from_value(rendered_recovery_cron_job()).unwrap();
    job::finalize(job::from_cron_job(&cron).unwrap(), publication, Some("ns"))
}

fn with_condition(mut j: Job, kind: &str) -> Job {
    j.metadata.resource_version = Some("7".into());
    j.status = Some(JobStatus {
        conditions: Some(vec![JobCondition {
            type_: kind.into(),
            status: "True".into(),
            ..JobCondition::default()
        }]),
        ..JobStatus::default()
    });
    j
}

fn running(mut j: Job) -> Job {
    j.metadata.resource_version = Some("5".into());
    j
}

fn json(status: StatusCode, body: &impl serde::Serialize) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

/// A `JobList` at a resource version.
fn job_list(version: &str, items: &[Job]) -> serde_json::Value {
    serde_json::json!({"apiVersion": "batch/v1", "kind": "JobList",
        "metadata": {"resourceVersion": version}, "items": items})
}

fn already_exists() -> Response<Body> {
    json(
        StatusCode::CONFLICT,
        &serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "jobs.batch already exists", "reason": "AlreadyExists", "code": 409}),
    )
}

fn not_found() -> Response<Body> {
    json(
        StatusCode::NOT_FOUND,
        &serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "not found", "reason": "NotFound", "code": 404}),
    )
}

/// Takes the next request, checks method and path, returns its body as JSON.
async fn expect(
    handle: &mut Handle,
    method: Method,
    path: &str,
) -> (
    serde_json::Value,
    String,
    tower_test::mock::SendResponse<Response<Body>>,
) {
    let (request, send) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
        .await
        .expect("a request")
        .expect("service alive");
    assert_eq!(request.method(), method);
    assert_eq!(request.uri().path(), path);
    let query = request.uri().query().unwrap_or("").to_owned();
    record(&method, path, &query);
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (body, query, send)
}

/// Every (resource, verb) `trigger` was seen to use, across the tests: what its Role must grant.
static USED: std::sync::Mutex<std::collections::BTreeSet<(String, String)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Notes the RBAC verb of a request: GET of a named object is `get`, of a collection `list`
/// (or `watch` with `watch=true`), POST `create`, DELETE `delete`.
fn record(method: &Method, path: &str, query: &str) {
    // The Event test's requests are the run pods', not trigger's.
    if !path.starts_with("/apis/batch/") {
        return;
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // apis/batch/v1/namespaces/ns/<resource>[/<name>]
    let resource = parts[5].to_owned();
    let named = parts.len() > 6;
    let verb = match (method.as_str(), named) {
        ("GET", true) => "get",
        ("GET", false) if query.contains("watch=true") => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("DELETE", _) => "delete",
        (other, _) => panic!("trigger sent {other} {path}"),
    };
    USED.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert((resource, verb.to_owned()));
}

fn opts(wait: bool, replace_failed: bool) -> TriggerOptions {
    TriggerOptions {
        replace_failed,
        wait,
        timeout: Duration::from_secs(10),
    }
}

#[tokio::test]
async fn creates_the_job() {
    let (api, mut handle) = setup();
    let job = the_job("pub-1");
    let server = tokio::spawn(async move {
        let (body, _, send) = expect(&mut handle, Method::POST, JOBS).await;
        assert_eq!(
            body["metadata"]["name"],
            job::job_name_with("pe-package-executor-recovery", "pub-1")
        );
        assert_eq!(
            body["metadata"]["annotations"][PUBLICATION_ANNOTATION],
            "pub-1"
        );
        assert_eq!(
            body["metadata"]["labels"]["app.kubernetes.io/component"],
            "snapshot-recovery"
        );
        assert_eq!(body["spec"]["template"]["spec"]["restartPolicy"], "Never");
        let created: Job = serde_json::from_value(body).unwrap();
        send.send_response(json(StatusCode::CREATED, &running(created)));
    });
    assert_eq!(
        trigger(&api, &job, &opts(false, false)).await.unwrap(),
        Triggered::Complete
    );
    server.await.unwrap();
}

fn status(code: u16, reason: &str) -> Response<Body> {
    json(
        StatusCode::from_u16(code).unwrap(),
        &serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": reason, "reason": reason, "code": code}),
    )
}

/// Issue 51, defect 9: an API error that can heal (the server restarting: 500, 503, 429) is
/// tried again within `--timeout`, and the Job is created; before, the hook exited 1 at once,
/// which its pod failure policy ends for good.
#[tokio::test]
async fn a_transient_api_error_is_tried_again_within_the_timeout() {
    let (api, mut handle) = setup();
    let job = the_job("pub-t");
    let server = tokio::spawn(async move {
        for (code, reason) in [
            (500, "InternalError"),
            (503, "ServiceUnavailable"),
            (429, "TooManyRequests"),
        ] {
            let (_, _, send) = expect(&mut handle, Method::POST, JOBS).await;
            send.send_response(status(code, reason));
        }
        let (body, _, send) = expect(&mut handle, Method::POST, JOBS).await;
        send.send_response(json(
            StatusCode::CREATED,
            &running(serde_json::from_value(body).unwrap()),
        ));
    });
    assert_eq!(
        trigger(&api, &job, &opts(false, false)).await.unwrap(),
        Triggered::Complete
    );
    server.await.unwrap();
}

/// What cannot heal (403: RBAC) ends at once with an error (exit 1), after one request; an API
/// that keeps failing for now ends at `--timeout` (exit 124, which the hook retries).
#[tokio::test]
async fn a_refusal_ends_at_once_and_a_failing_api_at_the_timeout() {
    let (api, mut handle) = setup();
    let job = the_job("pub-r");
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let (_, _, send) = expect(&mut handle, Method::POST, JOBS).await;
        send.send_response(status(403, "Forbidden"));
        // Nothing more until the test is done with the first call.
        done_rx.await.unwrap();
        let mut tries = 0;
        while let Ok(Some((_, send))) =
            tokio::time::timeout(Duration::from_secs(5), handle.next_request()).await
        {
            tries += 1;
            send.send_response(status(503, "ServiceUnavailable"));
        }
        tries
    });
    let refused = trigger(&api, &job, &opts(false, false)).await;
    assert!(
        matches!(
            &refused,
            Err(package_executor::k8s::trigger::TriggerError::Api(_))
        ),
        "{refused:?}"
    );
    done_tx.send(()).unwrap();
    let quick = TriggerOptions {
        replace_failed: false,
        wait: false,
        timeout: Duration::from_millis(1500),
    };
    assert_eq!(
        trigger(&api, &job, &quick).await.unwrap(),
        Triggered::TimedOut
    );
    drop(api);
    let tries = tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("the mock server ends once the client is gone")
        .unwrap();
    assert!(tries >= 2, "tried {tries} times within the timeout");
}

#[tokio::test]
async fn conflict_attaches_to_our_job() {
    let (api, mut handle) = setup();
    let job = the_job("pub-2");
    let name = job.metadata.name.clone().unwrap();
    let existing = running(job.clone());
    let server = tokio::spawn(async move {
        let (_, _, send) = expect(&mut handle, Method::POST, JOBS).await;
        send.send_response(already_exists());
        let (_, _, send) = expect(&mut handle, Method::GET, &format!("{JOBS}/{name}")).await;
        send.send_response(json(StatusCode::OK, &existing));
    });
    assert_eq!(
        trigger(&api, &job, &opts(false, false)).await.unwrap(),
        Triggered::Complete
    );
    server.await.unwrap();
}

#[tokio::test]
async fn conflict_with_a_foreign_annotation_is_refused() {
    let (api, mut handle) = setup();
    let job = the_job("pub-3");
    let name = job.metadata.name.clone().unwrap();
    let mut foreign = running(job.clone());
    foreign
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(PUBLICATION_ANNOTATION.into(), "someone-else".into());
    let server = tokio::spawn(async move {
        let (_, _, send) = expect(&mut handle, Method::POST, JOBS).await;
        send.send_response(already_exists());
        let (_, _, send) = expect(&mut handle, Method::GET, &format!("{JOBS}/{name}")).await;
        send.send_response(json(StatusCode::OK, &foreign));
    });
    let err = trigger(&api, &job, &opts(false, false)).await.unwrap_err();
    assert!(err.to_string().contains("someone-else"), "{err}");
    server.await.unwrap();
}

#[tokio::test]
async fn failed_job_is_replaced_only_with_replace_failed() {
    // Without --replace-failed: attach, report the failure (7), delete nothing.
    let (api, mut handle) = setup();
    let job = the_job("pub-4");
    let name = job.metadata.name.clone().unwrap();
    let mut failed = with_condition(job.clone(), "Failed");
    failed.metadata.uid = Some("uid-failed".into());
    let server = {
        let (name, failed) = (name.clone(), failed.clone());
        tokio::spawn(async move {
            let (_, _, send) = expect(&mut handle, Method::POST, JOBS).await;
            send.send_response(already_exists());
            let (_, _, send) = expect(&mut handle, Method::GET, &format!("{JOBS}/{name}")).await;
            send.send_response(json(StatusCode::OK, &failed));
            handle
        })
    };
    assert_eq!(
        trigger(&api, &job, &opts(false, false)).await.unwrap(),
        Triggered::Failed
    );
    let mut handle = server.await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(100), handle.next_request())
            .await
            .is_err(),
        "no further request"
    );

    // With --replace-failed: delete (background propagation), wait until gone, create again.
    let (api, mut handle) = setup();
    let server = tokio::spawn(async move {
        let (_, _, send) = expect(&mut handle, Method::POST, JOBS).await;
        send.send_response(already_exists());
        let (_, _, send) = expect(&mut handle, Method::GET, &format!("{JOBS}/{name}")).await;
        send.send_response(json(StatusCode::OK, &failed));
        let (body, _, send) = expect(&mut handle, Method::DELETE, &format!("{JOBS}/{name}")).await;
        assert_eq!(body["propagationPolicy"], "Background");
        // Only the Job seen failed: its uid is the delete's precondition.
        assert_eq!(body["preconditions"]["uid"], "uid-failed", "{body}");
        let mut deleting = failed.clone();
        deleting.metadata.uid = Some("uid-1".into());
        send.send_response(json(StatusCode::OK, &deleting));
        // kube's watcher lists it by name until it is gone (finalizers included).
        let (_, query, send) = expect(&mut handle, Method::GET, JOBS).await;
        assert!(
            query.contains(&format!("fieldSelector=metadata.name%3D{name}")),
            "{query}"
        );
        send.send_response(json(StatusCode::OK, &job_list("9", &[])));
        let (body, _, send) = expect(&mut handle, Method::POST, JOBS).await;
        assert_eq!(body["metadata"]["name"], name);
        send.send_response(json(
            StatusCode::CREATED,
            &running(serde_json::from_value(body).unwrap()),
        ));
    });
    assert_eq!(
        trigger(&api, &job, &opts(false, true)).await.unwrap(),
        Triggered::Complete
    );
    server.await.unwrap();
}

async fn wait_for(final_condition: &str) -> Triggered {
    wait_for_event(final_condition, "MODIFIED").await
}

/// Waits on a Job that the watch then reports with `event` and `final_condition`.
async fn wait_for_event(final_condition: &str, event: &'static str) -> Triggered {
    let (api, mut handle) = setup();
    let job = the_job("pub-5");
    let name = job.metadata.name.clone().unwrap();
    let done = with_condition(job.clone(), final_condition);
    let server = tokio::spawn(async move {
        let (body, _, send) = expect(&mut handle, Method::POST, JOBS).await;
        let running = running(serde_json::from_value(body).unwrap());
        send.send_response(json(StatusCode::CREATED, &running));
        // kube's watcher: a list of the one Job, still running...
        let (_, query, send) = expect(&mut handle, Method::GET, JOBS).await;
        assert!(!query.contains("watch=true"), "{query}");
        assert!(
            query.contains(&format!("fieldSelector=metadata.name%3D{name}")),
            "{query}"
        );
        send.send_response(json(StatusCode::OK, &job_list("5", &[running])));
        // ...then a watch from the list's version, which brings the end.
        let (_, query, send) = expect(&mut handle, Method::GET, JOBS).await;
        assert!(
            query.contains("watch=true") && query.contains("resourceVersion=5"),
            "{query}"
        );
        assert!(
            query.contains(&format!("fieldSelector=metadata.name%3D{name}")),
            "{query}"
        );
        let line = serde_json::to_vec(&serde_json::json!({"type": event, "object": done})).unwrap();
        send.send_response(
            Response::builder()
                .status(StatusCode::OK)
                .body(Body::from([line, b"\n".to_vec()].concat()))
                .unwrap(),
        );
    });
    let code = trigger(&api, &job, &opts(true, false)).await.unwrap();
    server.await.unwrap();
    code
}

#[tokio::test]
async fn wait_ends_complete_with_0() {
    assert_eq!(wait_for("Complete").await, Triggered::Complete);
}

#[tokio::test]
async fn wait_ends_failed_with_7() {
    assert_eq!(wait_for("Failed").await, Triggered::Failed);
}

#[tokio::test]
async fn a_job_deleted_while_waiting_is_a_failure() {
    assert_eq!(
        wait_for_event("Complete", "DELETED").await,
        Triggered::Failed
    );
}

#[tokio::test]
async fn wait_times_out_with_124() {
    let (api, mut handle) = setup();
    let job = the_job("pub-6");
    let (hold_tx, hold_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let (body, _, send) = expect(&mut handle, Method::POST, JOBS).await;
        send.send_response(json(
            StatusCode::CREATED,
            &running(serde_json::from_value(body).unwrap()),
        ));
        // The watch request is never answered: the command's timeout must end it.
        let (_request, _send) = handle.next_request().await.unwrap();
        hold_rx.await.ok();
    });
    let quick = TriggerOptions {
        replace_failed: false,
        wait: true,
        timeout: Duration::from_millis(300),
    };
    assert_eq!(
        trigger(&api, &job, &quick).await.unwrap(),
        Triggered::TimedOut
    );
    hold_tx.send(()).ok();
    server.await.unwrap();
}

/// A run's summary becomes an `events.k8s.io/v1` Event on its Job; a refusal (RBAC) is logged
/// and the run carries on.
#[tokio::test]
async fn run_summary_is_an_events_v1_event_on_the_job() {
    use package_executor::k8s::events::record_with;
    for status in [StatusCode::CREATED, StatusCode::FORBIDDEN] {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "ns");
        let summary = r#"{"schema":"package-executor/run-summary@v1","exitCode":3}"#;
        let record = tokio::spawn(async move {
            record_with(client, "ns", "package-executor-abc", true, summary).await;
        });
        let (body, _, send) = expect(
            &mut handle,
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ns/events",
        )
        .await;
        assert_eq!(body["apiVersion"], "events.k8s.io/v1");
        assert_eq!(body["kind"], "Event");
        assert_eq!(body["reason"], "RunSummary");
        assert_eq!(body["action"], "Run");
        assert_eq!(body["type"], "Warning");
        assert_eq!(body["note"], summary);
        assert_eq!(body["reportingController"], "package-executor");
        assert!(
            body["reportingInstance"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        );
        assert!(body["eventTime"].is_string());
        assert_eq!(body["regarding"]["kind"], "Job");
        assert_eq!(body["regarding"]["apiVersion"], "batch/v1");
        assert_eq!(body["regarding"]["name"], "package-executor-abc");
        send.send_response(json(status, &body));
        tokio::time::timeout(Duration::from_secs(5), record)
            .await
            .expect("recording returns")
            .expect("no panic");
    }
}

/// A failed Job that someone else deleted meanwhile (404 on our delete) is simply created again.
#[tokio::test]
async fn a_failed_job_already_gone_is_created_again() {
    let (api, mut handle) = setup();
    let job = the_job("pub-8");
    let name = job.metadata.name.clone().unwrap();
    let failed = with_condition(job.clone(), "Failed");
    let server = tokio::spawn(async move {
        let (_, _, send) = expect(&mut handle, Method::POST, JOBS).await;
        send.send_response(already_exists());
        let (_, _, send) = expect(&mut handle, Method::GET, &format!("{JOBS}/{name}")).await;
        send.send_response(json(StatusCode::OK, &failed));
        let (_, _, send) = expect(&mut handle, Method::DELETE, &format!("{JOBS}/{name}")).await;
        send.send_response(not_found());
        let (body, _, send) = expect(&mut handle, Method::POST, JOBS).await;
        send.send_response(json(
            StatusCode::CREATED,
            &running(serde_json::from_value(body).unwrap()),
        ));
    });
    assert_eq!(
        trigger(&api, &job, &opts(false, true)).await.unwrap(),
        Triggered::Complete
    );
    server.await.unwrap();
}

/// The chart's recovery template CronJob, rendered by helm with TLS and two shards, as the
/// cluster would hold it (with a uid).
fn rendered_recovery_cron_job() -> serde_json::Value {
    let mut cron = rendered(&[
        "--show-only",
        "templates/recovery-job.yaml",
        "--set",
        "run.shards=2",
        "--set",
        "database.tls.sslmode=verify-full",
        "--set",
        "database.tls.ca.configMap=db-ca",
        "--set",
        "database.tls.clientCert.executorSecret=pe-executor-cert",
    ])
    .into_iter()
    .find(|d| d["kind"] == "CronJob")
    .expect("the recovery CronJob");
    cron["metadata"]["uid"] = "uid-7".into();
    cron
}

/// The chart rendered by helm (`helm template pe charts/package-executor ARGS`), one value per
/// object.
fn rendered(args: &[&str]) -> Vec<serde_json::Value> {
    helm::objects(&helm::template(args))
}

/// `--from-cronjob` through kube's mock service: the chart's template is read from the
/// cluster, and the Job submitted is the chart's recovery Job: its spec (service account,
/// Secret, environment, TLS mounts, pod labels, security context, resources, failure policy)
/// is the template's, whole, with the publication's name, labels and annotation added, owned by
/// the CronJob.
#[tokio::test]
async fn from_cronjob_reads_the_template_and_creates_the_job_of_it() {
    let cron = rendered_recovery_cron_job();
    let template_spec = cron["spec"]["jobTemplate"]["spec"].clone();
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "ns");
    let crons: Api<CronJob> = Api::namespaced(client.clone(), "ns");
    let jobs: Api<Job> = Api::namespaced(client, "ns");
    let server = tokio::spawn(async move {
        let path = "/apis/batch/v1/namespaces/ns/cronjobs/pe-package-executor-recovery";
        let (_, _, send) = expect(&mut handle, Method::GET, path).await;
        send.send_response(json(StatusCode::OK, &cron));
        let (body, _, send) = expect(&mut handle, Method::POST, JOBS).await;
        assert_eq!(body["spec"], template_spec, "the chart's Job spec, whole");
        let pod = &body["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], "pe-package-executor");
        assert_eq!(
            pod["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]["name"],
            "package-executor-db"
        );
        assert!(pod["volumes"].to_string().contains("pe-executor-cert"));
        assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "uid-7");
        assert_eq!(
            body["metadata"]["labels"]["app.kubernetes.io/instance"],
            "pe"
        );
        assert_eq!(
            body["metadata"]["labels"]["app.kubernetes.io/component"],
            "snapshot-recovery"
        );
        assert_eq!(
            body["metadata"]["annotations"][PUBLICATION_ANNOTATION],
            "pub-9"
        );
        let created: Job = serde_json::from_value(body).unwrap();
        send.send_response(json(StatusCode::CREATED, &running(created)));
    });
    let template = package_executor::k8s::trigger::template_from_cluster(
        &crons,
        "pe-package-executor-recovery",
    )
    .await
    .unwrap();
    let job = job::finalize(template, "pub-9", Some("ns"));
    assert!(
        job.metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("pe-package-executor-recovery-")
    );
    assert_eq!(
        trigger(&jobs, &job, &opts(false, false)).await.unwrap(),
        Triggered::Complete
    );
    server.await.unwrap();
}

/// The chart's Role for `trigger` grants exactly the verbs `trigger` uses, read off the requests
/// these tests see (every path `trigger` has is run here first), not written down by hand.
#[test]
fn the_charts_trigger_role_grants_exactly_what_trigger_uses() {
    creates_the_job();
    conflict_attaches_to_our_job();
    failed_job_is_replaced_only_with_replace_failed();
    a_job_deleted_while_waiting_is_a_failure();
    wait_ends_complete_with_0();
    from_cronjob_reads_the_template_and_creates_the_job_of_it();
    let used = USED.lock().unwrap().clone();
    assert_eq!(
        granted(&["--set", "rbac.triggerInCluster=true"]),
        used,
        "the trigger Role (in-cluster trigger) against the calls trigger makes"
    );
    // The release hook alone (--replace-failed: read its template, create the Job, read it back
    // after a conflict, replace a failed one of the same publication): the same calls.
    assert_eq!(granted(&[]), used, "the trigger Role (release hook)");
}

/// The (resource, verb) pairs the chart's trigger Role grants, with these values; its
/// CronJob rule names the recovery template alone.
fn granted(values: &[&str]) -> std::collections::BTreeSet<(String, String)> {
    let mut args = vec!["--show-only", "templates/rbac.yaml"];
    args.extend(values);
    let mut granted = std::collections::BTreeSet::new();
    for role in rendered(&args) {
        if role["kind"] != "Role" || role["metadata"]["name"] != "pe-package-executor-trigger" {
            continue;
        }
        for rule in role["rules"].as_array().unwrap() {
            if rule["resources"][0] == "cronjobs" {
                assert_eq!(
                    rule["resourceNames"],
                    serde_json::json!(["pe-package-executor-recovery"])
                );
            }
            for resource in rule["resources"].as_array().unwrap() {
                for verb in rule["verbs"].as_array().unwrap() {
                    granted.insert((
                        resource.as_str().unwrap().to_owned(),
                        verb.as_str().unwrap().to_owned(),
                    ));
                }
            }
        }
    }
    granted
}
