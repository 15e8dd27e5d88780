#!/usr/bin/env bash
# A one-node Kubernetes made of its own components (tools/build.sh builds them from their Go
# modules), for the cluster tier and for a person (as root):
#
#   scripts/cluster.sh up DIR            starts it; every byte of its state lives in DIR
#   scripts/cluster.sh load DIR TAR...   imports docker-archive images into its containerd
#   scripts/cluster.sh exec DIR CMD...   runs CMD inside it (KUBECONFIG and PATH set): kubectl,
#                                        helm, the tests
#   scripts/cluster.sh down DIR          stops it and leaves nothing behind
#   scripts/cluster.sh leftovers DIR     prints what a cluster in DIR left on the machine
#                                        (processes, mounts, network namespace, cgroups);
#                                        nothing when it is gone
#
# Isolation, and why:
# - Network: a namespace of its own whose only routes are its loopback (the node's address,
#   172.31.255.1, is on it) and the pods' bridge. No packet can leave the machine: there is
#   no route out, so a missing Service rule gives "Network is unreachable", never a packet on
#   the machine's interface. The API server, the pods and the tests meet there.
# - Mounts: a namespace of its own in which DIR/run and DIR/var-lib are /run and /var/lib.
#   Two writes ignore every flag (the kubelet's device-plugin socket under /var/lib/kubelet,
#   libcni's result cache under /var/lib/cni): both land in DIR. The kubelet's and containerd's
#   own mounts die with the namespace.
# - A holder process keeps both namespaces; every component is started inside them with
#   nsenter (not `ip netns exec`, which remounts /sys and hides the cgroup hierarchies).
#
# Kubernetes 1.34, the newest minor that runs on cgroup v1 without an override and with
# Debian's containerd 1.6 (docs/cluster.md says what 1.35 and later would need).
set -euo pipefail
CALLER_PWD=$PWD
cd "$(dirname "$0")/.."
REPO=$PWD
HERE=$REPO/scripts/cluster

NODE=node0
NODE_IP=172.31.255.1
SERVICE_CIDR=10.96.0.0/16
API_VIP=10.96.0.1
DNS_VIP=10.96.0.10
POD_CIDR=10.244.0.0/24
PAUSE_IMAGE=registry.k8s.io/pause:3.10
BUSYBOX_IMAGE=example.local/busybox:1
COREDNS_IMAGE=example.local/coredns:1

USAGE_LINES=12
NEEDS_ROOT="the cluster needs root (network and mount namespaces, containerd, the kubelet)"
NETNS_PREFIX=pe-k8s
source "$HERE/common.sh"

setup_names() {
  folder_names "$1"
  KUBECONFIG_ADMIN=$DIR/pki/admin.kubeconfig
}

bins() {
  local dirs
  dirs=$("$REPO/tools/build.sh" k8s coredns helm provisioner kube-router)
  BIN=$(sed -n 1p <<<"$dirs")
  COREDNS_BIN=$(sed -n 2p <<<"$dirs")
  HELM_BIN=$(sed -n 3p <<<"$dirs")
  PROVISIONER_BIN=$(sed -n 4p <<<"$dirs")
  KUBE_ROUTER_BIN=$(sed -n 5p <<<"$dirs")
  CLUSTER_PATH=$BIN:$HELM_BIN:$PATH
}

# Runs a command inside the cluster's namespaces, in the foreground, in the caller's folder.
inside() {
  nsenter --target "$(holder_pid)" --mount --net --wd="$CALLER_PWD" -- \
    env PATH="$CLUSTER_PATH" KUBECONFIG="$KUBECONFIG_ADMIN" KUBECACHEDIR="$DIR/kube-cache" \
    HOME="${HOME:-/root}" "$@"
}

# Starts a component in its own session inside the namespaces; its log and PID go to DIR.
start() {
  local name=$1
  shift
  setsid nsenter --target "$(holder_pid)" --mount --net -- "$@" \
    >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
}

make_namespaces() {
  mkdir -p "$DIR/run" "$DIR/var-lib" "$PIDS" "$LOGS"
  ip netns add "$NETNS"
  ip -n "$NETNS" link set lo up
  ip -n "$NETNS" addr add "$NODE_IP/32" dev lo
  # Forwarding for the pods, and the bridge's packets through netfilter for Services: both are
  # settings of this namespace only.
  nsenter --net="/run/netns/$NETNS" sysctl -q -w net.ipv4.ip_forward=1
  # Every unreachable destination answered at once, not one ICMP error a second per peer: a
  # connection that goes nowhere fails fast, and a test tells it from one that waits.
  nsenter --net="/run/netns/$NETNS" sysctl -q -w net.ipv4.icmp_ratelimit=0
  modprobe br_netfilter 2>/dev/null || true
  nsenter --net="/run/netns/$NETNS" sysctl -q -w net.bridge.bridge-nf-call-iptables=1 || true
  # The holder: a private copy of the mount table whose mounts (made shared inside, for the
  # kubelet's propagation) never reach the machine's.
  start_holder 'mount --make-rshared /
      mount --bind "$1/run" /run
      mount --bind "$1/var-lib" /var/lib'
}

make_pki() {
  local pki=$DIR/pki
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl genrsa -out ca.key 2048 2>/dev/null
    openssl req -x509 -new -key ca.key -subj "/CN=package-executor-test-ca" -days 30 \
      -out ca.crt 2>/dev/null
    sign() { # name CN O SANs EKU
      openssl genrsa -out "$1.key" 2048 2>/dev/null
      openssl req -new -key "$1.key" -subj "/CN=$2${3:+/O=$3}" -out "$1.csr" 2>/dev/null
      {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=${5:-clientAuth}"
        [ -z "${4:-}" ] || echo "subjectAltName=$4"
      } >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    sign apiserver kube-apiserver "" \
      "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$API_VIP,IP:$NODE_IP" \
      serverAuth
    sign apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
    sign admin kubernetes-admin system:masters
    sign controller-manager system:kube-controller-manager
    sign scheduler system:kube-scheduler
    sign kubelet "system:node:$NODE" system:nodes "DNS:$NODE,IP:$NODE_IP" serverAuth,clientAuth
    sign kube-proxy system:kube-proxy
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    for user in admin controller-manager scheduler kubelet kube-proxy; do
      cat >"$user.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://$NODE_IP:6443", certificate-authority: $pki/ca.crt}}]
users: [{name: $user, user: {client-certificate: $pki/$user.crt, client-key: $pki/$user.key}}]
contexts: [{name: test, context: {cluster: test, user: $user}}]
current-context: test
EOF
    done
  )
}

start_control_plane() {
  local pki=$DIR/pki
  mkdir -p "$DIR/etcd"
  start etcd "$BIN/etcd" --name "$NODE" --data-dir "$DIR/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster "$NODE=http://127.0.0.1:2380" --initial-cluster-state new \
    --listen-metrics-urls "" --log-level warn --unsafe-no-fsync
  wait_for etcd 30 "$LOGS/etcd.log" inside "$BIN/etcdctl" --endpoints http://127.0.0.1:2379 \
    endpoint health

  # The admission plugins a production cluster runs (the defaults of 1.34 and the three that
  # are off by default: NodeRestriction, OwnerReferencesPermissionEnforcement and
  # AlwaysPullImages is left out, since the images are imported, never pulled).
  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --bind-address="$NODE_IP" --secure-port=6443 --advertise-address="$NODE_IP" \
    --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
    --client-ca-file="$pki/ca.crt" --tls-cert-file="$pki/apiserver.crt" \
    --tls-private-key-file="$pki/apiserver.key" \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,PodSecurity,ResourceQuota,OwnerReferencesPermissionEnforcement,NodeRestriction,DefaultStorageClass,DefaultTolerationSeconds,Priority,StorageObjectInUseProtection,PersistentVolumeClaimResize,RuntimeClass,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook \
    --cert-dir="$pki/apiserver-generated" --v=1
  wait_for kube-apiserver 90 "$LOGS/kube-apiserver.log" \
    inside "$BIN/kubectl" get --raw /readyz

  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$pki/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$pki/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$pki/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --leader-elect=false --controllers='*' \
    --use-service-account-credentials=true --service-account-private-key-file="$pki/sa.key" \
    --root-ca-file="$pki/ca.crt" --cluster-signing-cert-file="$pki/ca.crt" \
    --cluster-signing-key-file="$pki/ca.key" --service-cluster-ip-range="$SERVICE_CIDR" \
    --allocate-node-cidrs=false \
    --cert-dir="$pki/controller-manager-generated" --v=1
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$pki/scheduler.kubeconfig" \
    --authentication-kubeconfig="$pki/scheduler.kubeconfig" \
    --authorization-kubeconfig="$pki/scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --v=1
}

start_node() {
  local etc=$DIR/etc pki=$DIR/pki
  mkdir -p "$etc" "$DIR/containerd/root" "$DIR/cni/net.d" "$DIR/cni/ipam" "$DIR/kubelet" \
    "$DIR/pod-logs" "$DIR/images"
  cat >"$etc/containerd.toml" <<EOF
version = 2
root = "$DIR/containerd/root"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # These machines lack CAP_SYS_RESOURCE: a negative oom_score_adj fails every sandbox.
  restrict_oom_score_adj = true
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "$DIR/cni/net.d"
EOF
  cat >"$DIR/cni/net.d/10-bridge.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  start containerd containerd --config "$etc/containerd.toml"
  wait_for containerd 30 "$LOGS/containerd.log" test -S "$DIR/run/containerd/containerd.sock"
  base_images
  import "$DIR/images/pause.tar" "$DIR/images/busybox.tar"

  # No upstream resolver: a pod with dnsPolicy Default gets none, and nothing asks outside.
  printf '# no upstream resolver: nothing leaves this cluster\n' >"$etc/resolv.conf"
  cat >"$etc/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
# cgroup v1 without systemd; containerd 1.6 cannot tell the kubelet its driver.
cgroupDriver: cgroupfs
cgroupsPerQOS: true
failSwapOn: false
# No CAP_SYS_RESOURCE on these machines: the default -999 cannot be set.
oomScoreAdj: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
clusterDomain: cluster.local
clusterDNS: [$DNS_VIP]
resolvConf: $etc/resolv.conf
readOnlyPort: 0
podLogsDir: $DIR/pod-logs
# kind's settings: the imported images are never collected, and the shared disk is not the
# node's to manage.
imageGCHighThresholdPercent: 100
evictionHard: {nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%"}
EOF
  start kubelet "$BIN/kubelet" --config="$etc/kubelet.yaml" \
    --kubeconfig="$pki/kubelet.kubeconfig" --root-dir="$DIR/kubelet" \
    --hostname-override="$NODE" --node-ip="$NODE_IP" --v=1

  cat >"$etc/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $pki/kube-proxy.kubeconfig}
hostnameOverride: $NODE
mode: nftables
clusterCIDR: $POD_CIDR
oomScoreAdj: 0
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  start kube-proxy "$BIN/kube-proxy" --config="$etc/kube-proxy.yaml" --v=1
  wait_for "node $NODE Ready" 120 "$LOGS/kubelet.log" \
    inside "$BIN/kubectl" wait --for=condition=Ready "node/$NODE" --timeout=2s
}

# The sandbox image and the tests' busybox, made here: no registry is reachable.
base_images() {
  "$HERE/base-images.sh" "$DIR/images" "$PAUSE_IMAGE" "$BUSYBOX_IMAGE"
}

import() {
  local tar
  for tar in "$@"; do
    inside ctr --address /run/containerd/containerd.sock -n k8s.io images import \
      --no-unpack=false "$(realpath "$tar")" >/dev/null
  done
}

# CoreDNS as Kubernetes ships the addon (cluster/addons/dns/coredns in the k8s.io/kubernetes
# module), with its placeholders filled as kube-up does, the image this script makes, and two
# lines less: `forward . /etc/resolv.conf` (there is no upstream, and the machine's resolver
# is an address off this machine) and `loop` (which needs forward).
coredns() {
  local images=$DIR/images addon kv
  kv=$("$BIN/kubectl" version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')
  # The module's files, from Go's module cache (downloaded again if the cache was cleaned
  # since the binaries were built).
  (cd "$REPO/tools/k8s" && GOFLAGS=-mod=readonly go mod download "k8s.io/kubernetes@$kv")
  addon="$(cd "$REPO/tools/k8s" && go env GOMODCACHE)/k8s.io/kubernetes@$kv/cluster/addons/dns/coredns/coredns.yaml.base"
  if [ ! -f "$images/coredns.tar" ]; then
    python3 "$HERE/mkimg.py" "$images/coredns.tar" "$COREDNS_IMAGE" /coredns \
      "$COREDNS_BIN/coredns:/coredns"
  fi
  import "$images/coredns.tar"
  sed -e "s/__DNS__DOMAIN__/cluster.local/g" -e "s/__DNS__SERVER__/$DNS_VIP/g" \
    -e "s/__DNS__MEMORY__LIMIT__/170Mi/g" \
    -e "s|image: registry.k8s.io/coredns/coredns:.*|image: $COREDNS_IMAGE|" \
    -e "s|imagePullPolicy: IfNotPresent|imagePullPolicy: Never|" \
    -e '/forward \. \/etc\/resolv.conf {/,/}/d' -e '/^ *loop$/d' \
    "$addon" >"$DIR/etc/coredns.yaml"
  if grep -q 'forward\|resolv.conf' "$DIR/etc/coredns.yaml"; then
    echo "the CoreDNS addon still forwards queries: $DIR/etc/coredns.yaml" >&2
    exit 1
  fi
  inside "$BIN/kubectl" apply -f "$DIR/etc/coredns.yaml" >/dev/null
}

# NetworkPolicy, enforced by kube-router's network-policy controller alone (no routing, no
# service proxy: kube-proxy has those): iptables (Debian's, on nf_tables) and ipset rules in
# the cluster's network namespace, gone with it. Not kind's kube-network-policies: it needs
# nftables' `queue` expression, which this kernel lacks (docs/cluster.md). The enforcer is
# ready when its chains hang from FORWARD, INPUT and OUTPUT.
network_policy() {
  start kube-router "$KUBE_ROUTER_BIN/kube-router" --kubeconfig="$KUBECONFIG_ADMIN" \
    --hostname-override="$NODE" --run-firewall=true --run-router=false \
    --run-service-proxy=false --enable-cni=false --enable-ipv6=false \
    --service-cluster-ip-range="$SERVICE_CIDR" --health-port=0 --metrics-port=0 --v=1
  wait_for "kube-router's NetworkPolicy controller" 60 "$LOGS/kube-router.log" \
    inside sh -c 'for c in FORWARD INPUT OUTPUT; do
      iptables -S "$c" | grep -q "KUBE-ROUTER-$c" || exit 1; done'
}

addons() {
  # PE_CLUSTER_NETWORK_POLICY=off leaves NetworkPolicy unenforced: the control that shows the
  # tests' enforcement checks fail without the enforcer (docs/cluster.md).
  if [ "${PE_CLUSTER_NETWORK_POLICY:-on}" = off ]; then
    echo "NetworkPolicy is NOT enforced in this cluster (PE_CLUSTER_NETWORK_POLICY=off)" >&2
  else
    network_policy
  fi
  coredns
  mkdir -p "$DIR/volumes"
  start provisioner "$PROVISIONER_BIN/provisioner" --kubeconfig "$KUBECONFIG_ADMIN" \
    --root "$DIR/volumes" --node "$NODE"
  inside "$BIN/kubectl" apply -f "$HERE/storageclass.yaml" >/dev/null
  wait_for "CoreDNS" 120 "$LOGS/kubelet.log" inside "$BIN/kubectl" -n kube-system \
    rollout status deployment/coredns --timeout=2s
}

up() {
  need_root
  setup_names "$1"
  if [ -n "$(holder_pid)" ] && kill -0 "$(holder_pid)" 2>/dev/null; then
    echo "a cluster already runs in $DIR: scripts/cluster.sh down $DIR first" >&2
    exit 1
  fi
  command -v containerd >/dev/null || {
    echo "containerd is missing: scripts/test.sh install installs it (Debian's)" >&2
    exit 1
  }
  bins
  local started=$SECONDS
  trap 'echo "the cluster did not start; its logs are in $LOGS (scripts/cluster.sh down $DIR cleans up)" >&2' ERR
  make_namespaces
  make_pki
  start_control_plane
  start_node
  addons
  trap - ERR
  echo "cluster up in $((SECONDS - started)) s: scripts/cluster.sh exec $DIR kubectl get nodes" >&2
}

# Every process whose mount namespace is the cluster's, and every process in the kubelet's
# cgroups (the containers have namespaces of their own).
cluster_processes() {
  local holder mntns pid
  holder=$(holder_pid)
  [ -n "$holder" ] || return 0
  mntns=$(readlink "/proc/$holder/ns/mnt" 2>/dev/null) || return 0
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    [ "$(readlink "/proc/$pid/ns/mnt" 2>/dev/null)" = "$mntns" ] && echo "$pid"
  done
  cgroup_procs
}

kubepods_dirs() {
  local hierarchy
  for hierarchy in /sys/fs/cgroup/*/; do
    [ -d "$hierarchy/kubepods" ] && find "$hierarchy/kubepods" -depth -type d
  done
  return 0
}

cgroup_procs() {
  local dir
  kubepods_dirs | while read -r dir; do cat "$dir/cgroup.procs" 2>/dev/null; done | sort -u
}

down() {
  need_root
  setup_names "$1"
  local pid name
  # The node first (so that no pod is restarted while it goes), then the control plane.
  for name in kube-proxy kubelet; do
    pid=$(cat "$PIDS/$name.pid" 2>/dev/null) && kill "$pid" 2>/dev/null || true
  done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    pid=$(cluster_processes | grep -vx "$(holder_pid)" || true)
    [ -n "$pid" ] || break
    # shellcheck disable=SC2086
    kill -TERM $pid 2>/dev/null || true
    sleep 0.5
  done
  pid=$(cluster_processes || true)
  # shellcheck disable=SC2086
  [ -z "$pid" ] || kill -KILL $pid 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    [ -n "$(cluster_processes)" ] || break
    sleep 0.5
  done
  # The kubelet's cgroups, deepest first (empty now).
  kubepods_dirs | while read -r dir; do rmdir "$dir" 2>/dev/null || true; done
  ip netns del "$NETNS" 2>/dev/null || true
  rm -f "$PIDS"/*.pid
  local left
  left=$(leftovers_of)
  if [ -n "$left" ]; then
    echo "the cluster in $DIR left these behind:" >&2
    echo "$left" >&2
    exit 1
  fi
  echo "cluster in $DIR is down; nothing of it is left running" >&2
}

# What a cluster in DIR left on the machine: its processes (any that runs a binary of the
# cluster or holds its mount namespace), mounts of DIR in the machine's table, its network
# namespace, and the kubelet's cgroups.
leftovers_of() {
  local pid exe
  for pid in /proc/[0-9]*; do
    exe=$(readlink "$pid/exe" 2>/dev/null) || continue
    case $exe in "$DIR"/* | */package-executor/k8s-*/* | */package-executor/coredns-*/* | \
      */package-executor/provisioner-*/* | */package-executor/kube-router-*/*)
      echo "process ${pid#/proc/}: $exe" ;;
    esac
    case $(tr '\0' ' ' <"$pid/cmdline" 2>/dev/null) in *" $DIR/"* | *"=$DIR/"*)
      echo "process ${pid#/proc/}: $(tr '\0' ' ' <"$pid/cmdline")" ;;
    esac
  done | sort -u
  awk -v dir="$DIR" 'index($2, dir) == 1 { print "mount: " $2 }' /proc/self/mounts
  ip netns list 2>/dev/null | awk -v ns="$NETNS" '$1 == ns { print "network namespace: " $1 }'
  kubepods_dirs | sed 's/^/cgroup: /'
}

leftovers() {
  setup_names "$1"
  leftovers_of
}

run_inside() {
  setup_names "$1"
  shift
  [ -n "$(holder_pid)" ] && kill -0 "$(holder_pid)" 2>/dev/null || {
    echo "no cluster runs in $DIR: scripts/cluster.sh up $DIR first" >&2
    exit 1
  }
  bins
  inside "$@"
}

cmd=${1:-}
[ $# -ge 2 ] || usage
case $cmd in
  up) up "$2" ;;
  down) down "$2" ;;
  leftovers) leftovers "$2" ;;
  load)
    need_root
    setup_names "$2"
    shift 2
    bins
    import "$@"
    ;;
  exec)
    need_root
    shift
    run_inside "$@"
    ;;
  *) usage ;;
esac
