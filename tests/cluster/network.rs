//! No packet leaves the machine. `scripts/kind.sh` runs kind's node, and these tests, in a
//! network namespace whose only links are its loopback, the podman bridge the node sits on and
//! the node's veth pair, and whose only routes are the bridge's range: there is no way out, so
//! a connection to an address outside every range, or to a Service that a missing rule would
//! leave un-translated, fails at once, from the node's namespace and from a pod (whose packets,
//! masqueraded by the node, reach the namespace's end of the bridge and are answered "host
//! unreachable" by its `unreachable` default route). A Service with an endpoint
//! answers, so the rules are there when they should be.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use package_executor_testkit::cluster::{Namespace, busybox_pod_spec};

/// TEST-NET-1 (RFC 5737): outside the cluster's ranges and every other.
const OUTSIDE: &str = "192.0.2.1";

/// The bridge the node sits on (`PE_CLUSTER_BRIDGE`, which `scripts/kind.sh exec` sets).
fn bridge() -> String {
    std::env::var("PE_CLUSTER_BRIDGE").unwrap_or_else(|_| {
        panic!("PE_CLUSTER_BRIDGE is not set: run these tests through `scripts/test.sh kind`")
    })
}

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip (iproute2)");
    assert!(out.status.success(), "ip {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn the_clusters_network_has_no_route_off_the_machine() {
    let bridge = bridge();
    let routes = ip(&["-4", "route", "show", "table", "all"]);
    for route in routes.lines() {
        assert!(!route.starts_with("default"), "a default route: {routes}");
        // The default the tier adds leads nowhere: it answers "host unreachable".
        if route.trim() == "unreachable default" {
            continue;
        }
        let through = format!(" dev {bridge} ");
        assert!(
            route.contains(" dev lo ") || route.contains(&through),
            "a route through another link than lo and {bridge}: {route}\n{routes}"
        );
    }
    let links = ip(&["-o", "link", "show"]);
    let mut veths = 0;
    for link in links.lines() {
        let name = link.split(": ").nth(1).unwrap().split('@').next().unwrap();
        assert!(
            name == "lo" || name == bridge || name.starts_with("veth"),
            "a link that could lead off the machine: {link}"
        );
        if name.starts_with("veth") {
            veths += 1;
            // Each veth's peer is a container's, in a namespace of the tier's own.
            assert!(
                link.contains("link-netns") || link.contains("link-netnsid"),
                "{link}"
            );
        }
    }
    assert!(veths >= 1, "no veth: where does the node sit?\n{links}");
    let six = ip(&["-6", "route", "show", "table", "main"]);
    assert!(!six.lines().any(|r| r.starts_with("default")), "{six}");
}

fn connect(address: &str) -> std::io::Result<TcpStream> {
    let to: SocketAddr = address.parse().unwrap();
    TcpStream::connect_timeout(&to, Duration::from_secs(5))
}

/// A busybox pod that runs SCRIPT once, with the label `app: APP`.
fn pod(name: &str, app: &str, script: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": busybox_pod_spec(script),
    })
    .to_string()
}

#[test]
#[ignore = "needs a cluster: scripts/test.sh kind"]
fn connections_out_of_every_range_fail_at_once_from_the_node_and_from_a_pod() {
    let ns = Namespace::new("net-egress");
    // A Service with an endpoint (the positive control), and one with none.
    ns.apply(&pod(
        "server",
        "server",
        "mkdir -p /tmp/www && echo served > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www",
    ));
    ns.apply(
        "apiVersion: v1\nkind: Service\nmetadata: {name: served}\nspec:\n  selector: {app: server}\n  ports: [{port: 80, targetPort: 8080}]\n---\napiVersion: v1\nkind: Service\nmetadata: {name: nobody}\nspec:\n  selector: {app: nobody}\n  ports: [{port: 80}]\n",
    );
    ns.wait("pod/server", "condition=Ready", "120s");
    let served = ns.kubectl(&[
        "get",
        "service",
        "served",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let nobody = ns.kubectl(&[
        "get",
        "service",
        "nobody",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);

    // From the node's namespace: no route to either, and the error comes back at once.
    for address in [format!("{OUTSIDE}:80"), format!("{nobody}:80")] {
        let err = connect(&address).expect_err(&address);
        assert!(
            matches!(
                err.kind(),
                ErrorKind::NetworkUnreachable | ErrorKind::HostUnreachable
            ),
            "{address}: {err}"
        );
    }

    // From a pod: the Service with an endpoint answers; the other two fail without a timeout.
    ns.apply(&pod(
        "client",
        "client",
        &format!(
            "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 10 {served} 80 2>/dev/null; echo SERVED; \
             nc -w 5 {nobody} 80 </dev/null 2>/tmp/nobody; echo NOBODY=$?; \
             sed 's/^/NOBODY: /' /tmp/nobody; \
             nc -w 5 {OUTSIDE} 80 </dev/null 2>/tmp/outside; echo OUTSIDE=$?; \
             sed 's/^/OUTSIDE: /' /tmp/outside"
        ),
    ));
    ns.wait("pod/client", "jsonpath={.status.phase}=Succeeded", "120s");
    let log = ns.kubectl(&["logs", "client"]);
    assert!(
        log.contains("200 OK") && log.contains("served\nSERVED"),
        "{log}"
    );
    assert!(log.contains("NOBODY=1"), "{log}");
    assert!(log.contains("OUTSIDE=1"), "{log}");
    // Refused or unreachable, never a timeout: a packet that found a way out would wait.
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("NOBODY: ") || l.starts_with("OUTSIDE: "))
        .collect();
    assert_eq!(errors.len(), 2, "{log}");
    for line in errors {
        assert!(
            line.contains("refused") || line.contains("unreachable") || line.contains("No route"),
            "{line}\n{log}"
        );
    }
}
