//! A Kubernetes cluster as the end-to-end tier drives it: `kubectl` and `helm` against the
//! cluster `KUBECONFIG` names (the kind cluster `scripts/test.sh kind` brings up and runs these
//! tests beside, inside its own namespaces, or any other). Each test works in a namespace of its own,
//! deleted when it ends, so the tests share one cluster.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The kubeconfig the tests drive; a missing one fails the test, saying how to get one.
pub fn kubeconfig() -> String {
    std::env::var("KUBECONFIG").unwrap_or_else(|_| {
        panic!(
            "KUBECONFIG is not set: run these tests through `scripts/test.sh kind` (which \
             starts a kind cluster with scripts/kind.sh), or point KUBECONFIG at a cluster"
        )
    })
}

/// `kubectl ARGS` as it ended.
pub fn kubectl_output(args: &[&str], stdin: Option<&str>) -> Output {
    run_output("kubectl", args, stdin)
}

/// `kubectl ARGS`, which must succeed: its standard output.
pub fn kubectl(args: &[&str]) -> String {
    succeed("kubectl", args, None)
}

/// `kubectl ARGS` with STDIN on its standard input, which must succeed.
pub fn kubectl_in(args: &[&str], stdin: &str) -> String {
    succeed("kubectl", args, Some(stdin))
}

/// `kubectl get ARGS -o json`, parsed.
pub fn get_json(args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&kubectl(&all)).expect("kubectl prints JSON")
}

fn run_output(tool: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let _ = kubeconfig();
    let mut command = Command::new(tool);
    command
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{tool}: {e}; scripts/kind.sh exec puts it on PATH"));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(input.as_bytes())
            .expect("write to kubectl");
    }
    child.wait_with_output().expect("wait for kubectl")
}

fn succeed(tool: &str, args: &[&str], stdin: Option<&str>) -> String {
    let out = run_output(tool, args, stdin);
    assert!(
        out.status.success(),
        "{tool} {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// A namespace of the test's own, deleted (without waiting) when dropped.
#[derive(Debug)]
pub struct Namespace {
    pub name: String,
}

impl Namespace {
    /// Creates `PREFIX-<pid>-<n>`, with the `restricted` Pod Security level enforced: what the
    /// chart's pods must pass on the clusters that enforce it.
    pub fn new(prefix: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        kubectl(&["create", "namespace", &name]);
        kubectl(&[
            "label",
            "namespace",
            &name,
            "pod-security.kubernetes.io/enforce=restricted",
        ]);
        Self { name }
    }

    /// `kubectl -n NAMESPACE ARGS`, which must succeed.
    pub fn kubectl(&self, args: &[&str]) -> String {
        kubectl(&self.args(args))
    }

    /// `kubectl -n NAMESPACE ARGS` as it ended.
    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        kubectl_output(&self.args(args), stdin)
    }

    /// `kubectl -n NAMESPACE apply -f -` of YAML, which must succeed.
    pub fn apply(&self, yaml: &str) -> String {
        kubectl_in(&self.args(&["apply", "-f", "-"]), yaml)
    }

    /// Waits for a condition (`kubectl wait --for=...`) for at most `timeout` (whole seconds,
    /// `"180s"`); on failure the namespace's pods, events and logs are in the panic message. An
    /// object that does not exist yet is waited for first: `kubectl wait` on a name that is not
    /// there fails at once, and a controller's object (a StatefulSet's pod deleted a moment ago,
    /// a Job's pod) may come a moment later. Both waits share the one timeout.
    pub fn wait(&self, what: &str, condition: &str, timeout: &str) {
        let total = timeout
            .strip_suffix('s')
            .and_then(|n| n.parse().ok())
            .map(Duration::from_secs)
            .unwrap_or_else(|| {
                panic!("a wait's timeout is whole seconds (\"180s\"), not {timeout:?}")
            });
        let start = Instant::now();
        if condition != "create" && condition != "delete" {
            self.wait_once(what, "create", total, timeout);
        }
        self.wait_once(
            what,
            condition,
            total.saturating_sub(start.elapsed()),
            timeout,
        );
    }

    fn wait_once(&self, what: &str, condition: &str, left: Duration, timeout: &str) {
        // At least a second, so that a condition already met is still asked for.
        let out = self.kubectl_output(
            &[
                "wait",
                &format!("--for={condition}"),
                what,
                &format!("--timeout={}s", left.as_secs().max(1)),
            ],
            None,
        );
        assert!(
            out.status.success(),
            "{what} never met {condition} in {timeout}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.describe()
        );
    }

    /// What an operator would look at: the pods, the events, the logs of every container.
    pub fn describe(&self) -> String {
        let mut text = String::new();
        for args in [
            vec!["get", "pods,jobs,pvc", "-o", "wide"],
            vec!["get", "events", "--sort-by=.lastTimestamp"],
            vec![
                "logs",
                "--all-containers",
                "--prefix",
                "-l",
                "pe-test/logs!=none",
                "--tail=40",
            ],
        ] {
            let out = self.kubectl_output(&args, None);
            text.push_str(&String::from_utf8_lossy(&out.stdout));
            text.push_str(&String::from_utf8_lossy(&out.stderr));
        }
        text
    }

    fn args<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        all
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl_output(&["delete", "namespace", &self.name, "--wait=false"], None);
    }
}

/// The image the tests' helper pods run: busybox (Debian's static build), which
/// the kind node image holds (scripts/kind.sh).
pub const BUSYBOX: &str = "example.local/busybox:1";

/// A pod spec that runs SCRIPT with busybox's `sh` once, and passes the `restricted` Pod
/// Security level (what the tests' namespaces enforce).
pub fn busybox_pod_spec(script: &str) -> Value {
    serde_json::json!({
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": 65534,
            "seccompProfile": {"type": "RuntimeDefault"}
        },
        "containers": [{
            "name": "main",
            "image": BUSYBOX,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", script],
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]}
            }
        }]
    })
}
