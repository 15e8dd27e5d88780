#!/usr/bin/env bash
# kind with podman as its provider, on a node image built here from the Kubernetes components
# tools/build.sh makes (no registry is reachable), for the kind tier and for a person (as root):
#
#   scripts/kind.sh up DIR          makes the tier's namespaces, podman's configuration and the
#                                   node image (cached); every byte of run state lives in DIR
#   scripts/kind.sh exec DIR CMD... runs CMD inside them, with kind, kubectl, helm and podman
#                                   on PATH and KIND_EXPERIMENTAL_PROVIDER=podman: kind itself,
#                                   tests/e2e/kind.sh
#   scripts/kind.sh create DIR      a cluster for a person: kind's cluster `pe` on the node
#                                   image with the tier's configuration and addons, and
#                                   DIR/kubeconfig (what `exec` uses) at its API server
#   scripts/kind.sh env DIR         prints the variables tests/e2e/kind.sh takes here
#   scripts/kind.sh down DIR        deletes every kind cluster and container in it, and the rest
#   scripts/kind.sh leftovers DIR   prints what DIR's tier left on the machine (processes,
#                                   mounts, network namespace, containers, cgroups); nothing
#                                   when it is gone
#
# Isolation, and why:
# - Network: a namespace of its own with only its loopback and the podman bridge that kind's
#   node sits on (10.89.77.0/24): no route out (the default route is `unreachable`), so no
#   packet leaves the machine.
# - Mounts: a namespace of its own in which DIR's folders are /run, /var/lib/containers and
#   /var/tmp: podman's run state, its networks, its blob cache and its temporary files never
#   touch the machine's. Its image store lives outside the clone, in the cache folder beside
#   Go's (keyed by what each image is made of), so a second run builds nothing.
# - podman here is a wrapper (DIR/bin/podman) that refuses to run outside the namespaces and
#   maps kind's `/lib/modules` mount to an empty folder of DIR (some machines have none).
set -euo pipefail
CALLER_PWD=$PWD
cd "$(dirname "$0")/.."
REPO=$PWD
HERE=$REPO/scripts/kind
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/package-executor
# The podman bridge kind's node sits on, made before kind runs so that kind reuses it: a
# plain bridge (an `--internal` one gets no port forwarding), in a namespace with no uplink.
KIND_SUBNET=10.89.77.0/24
NODE_IMAGE_NAME=localhost/pe-kind-node

USAGE_LINES=18
NEEDS_ROOT="the kind tier needs root (network and mount namespaces, rootful podman)"
NETNS_PREFIX=pe-kind

usage() {
  sed -n "2,${USAGE_LINES}p" "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

need_root() {
  [ "$(id -u)" = 0 ] || {
    echo "$NEEDS_ROOT" >&2
    exit 1
  }
}

# The names follow from the folder, so that two folders are two tiers: DIR, ID, NETNS
# (NETNS_PREFIX-ID), PIDS and LOGS.
folder_names() {
  DIR=$(realpath -m "$1")
  ID=$(printf '%s' "$DIR" | sha256sum | cut -c1-8)
  NETNS=$NETNS_PREFIX-$ID
  PIDS=$DIR/pids
  LOGS=$DIR/logs
}

holder_pid() { cat "$PIDS/holder.pid" 2>/dev/null || true; }

# Waits for a command to succeed, or fails naming what it waited for and its log.
wait_for() {
  local what=$1 seconds=$2 log=$3
  shift 3
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "$what: not ready after ${seconds} s; the last lines of $log:" >&2
      tail -n 30 "$log" >&2 || true
      exit 1
    fi
    sleep 0.5
  done
}

# The holder: a process in the tier's network namespace that keeps a private copy of the
# mount table, whose mounts never reach the machine's. MOUNTS is the shell that makes them ($1
# is DIR); every component is later started inside with nsenter.
start_holder() {
  setsid nsenter --net="/run/netns/$NETNS" unshare --mount --propagation private -- \
    bash -c "set -e
      $1
      touch /run/.namespaces-ready
      exec sleep infinity" _ "$DIR" >"$LOGS/holder.log" 2>&1 </dev/null &
  echo $! >"$PIDS/holder.pid"
  wait_for "the namespaces" 10 "$LOGS/holder.log" test -f "$DIR/run/.namespaces-ready"
}

setup_names() {
  folder_names "$1"
  STORE=$CACHE/kind-podman
}

bins() {
  local dirs
  dirs=$("$REPO/tools/build.sh" k8s coredns helm provisioner kube-router kind)
  BIN=$(sed -n 1p <<<"$dirs")
  COREDNS_BIN=$(sed -n 2p <<<"$dirs")
  HELM_BIN=$(sed -n 3p <<<"$dirs")
  PROVISIONER_BIN=$(sed -n 4p <<<"$dirs")
  KUBE_ROUTER_BIN=$(sed -n 5p <<<"$dirs")
  KIND_BIN=$(sed -n 6p <<<"$dirs")
  KV=$("$BIN/kubectl" version --client -o json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')
}

# Runs a command inside the tier's namespaces, in the foreground, in the caller's folder.
inside() {
  nsenter --target "$(holder_pid)" --mount --net --wd="$CALLER_PWD" -- \
    env PATH="$DIR/bin:$KIND_BIN:$BIN:$HELM_BIN:$PATH" \
    CONTAINERS_CONF="$DIR/containers.conf" CONTAINERS_STORAGE_CONF="$DIR/storage.conf" \
    KIND_EXPERIMENTAL_PROVIDER=podman KUBECONFIG="$DIR/kubeconfig" KUBECACHEDIR="$DIR/kube-cache" \
    PE_CLUSTER_BRIDGE="$(cat "$DIR/bridge" 2>/dev/null || true)" TMPDIR=/var/tmp "$@"
}

make_namespaces() {
  mkdir -p "$DIR/run" "$DIR/var-lib-containers" "$DIR/var-tmp" "$DIR/networks" \
    "$DIR/modules" "$DIR/bin" "$PIDS" "$LOGS" "$STORE"
  ip netns add "$NETNS"
  ip -n "$NETNS" link set lo up
  # No way out, said at once: a packet for an address outside the bridge's range is answered
  # "host unreachable" (an error a connection takes at once), not dropped for want of a route
  # (whose "net unreachable" TCP keeps retrying until it times out). The node masquerades its
  # pods' packets (the CNI bridge's ipMasq), so the answer finds its way back to them.
  ip -n "$NETNS" route add unreachable default
  nsenter --net="/run/netns/$NETNS" sysctl -q -w net.ipv4.ip_forward=1
  nsenter --net="/run/netns/$NETNS" sysctl -q -w net.ipv4.icmp_ratelimit=0
  # The holder: a private copy of the mount table, DIR's folders bound over podman's.
  start_holder 'mount --bind "$1/run" /run
      mkdir -p /run/lock /run/netns /run/user
      mount --bind "$1/var-lib-containers" /var/lib/containers
      mount --bind "$1/var-tmp" /var/tmp'
}

# podman's configuration: DIR's networks and events, the image store in the cache, runc
# (crun fails on hybrid cgroups), cgroupfs (no systemd), and ulimits no higher than the
# machine's hard ones (podman's defaults exceed what a container without CAP_SYS_RESOURCE
# may set, and kind passes none of its own).
podman_config() {
  local nofile nproc
  nofile=$(ulimit -Hn)
  [ "$nofile" = unlimited ] && nofile=1048576
  nproc=$(ulimit -Hu)
  [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
  cat >"$DIR/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[network]
network_config_dir = "$DIR/networks"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$LOGS/podman-events.log"
image_copy_tmp_dir = "/var/tmp"
EOF
  cat >"$DIR/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$STORE"
runroot = "/run/containers/storage"
EOF
  # The wrapper kind runs as `podman`.
  cat >"$DIR/bin/podman" <<EOF
#!/bin/bash
# podman for the kind tier only: refuses to run outside its namespaces, and gives kind's node
# an empty folder of the tier for /lib/modules, which some machines lack.
[ "\$(readlink /proc/self/ns/net)" != "$(readlink /proc/1/ns/net)" ] ||
  { echo "podman (kind tier): not in the tier's network namespace" >&2; exit 99; }
grep -q ' /var/lib/containers ' /proc/self/mountinfo ||
  { echo "podman (kind tier): /var/lib/containers is not the tier's" >&2; exit 98; }
args=()
for a in "\$@"; do
  case \$a in /lib/modules:/lib/modules:ro) a=$DIR/modules:/lib/modules:ro ;; esac
  args+=("\$a")
done
echo "\$(date +%T) podman \${args[*]}" >>"$LOGS/podman-calls.log"
exec /usr/bin/podman "\${args[@]}"
EOF
  chmod +x "$DIR/bin/podman"
}

# The Debian root the node image and the kube-proxy image are made from: debootstrap from the
# machine's own mirror, keyed by the release and the package list.
ROOTFS_RELEASE=bookworm
ROOTFS_PACKAGES=systemd,systemd-sysv,dbus,iptables,nftables,ipset,conntrack,iproute2,ethtool,kmod,procps,ca-certificates,containerd,runc,containernetworking-plugins,socat,libseccomp2,util-linux,mount,pigz
rootfs_image() {
  local key image work mirror started=$SECONDS
  key=$(echo "$ROOTFS_RELEASE minbase $ROOTFS_PACKAGES" | sha256sum | cut -c1-12)
  image=localhost/pe-kind-rootfs:$key
  if ! inside podman image exists "$image"; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/pe-kind-rootfs.XXXXXX")
    # The machine's own mirror, from its apt sources (deb822 or one-line), the first one that
    # serves the main archive (not the security one).
    mirror=$( { sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n'
      sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) .*/\2/p' /etc/apt/sources.list \
        /etc/apt/sources.list.d/*.list 2>/dev/null; } | grep -v -- '-security' | grep '^http' | head -n 1)
    mirror=${mirror:-http://deb.debian.org/debian}
    echo "debootstrap of the kind node's root from $mirror (a few minutes, once)" >&2
    if ! nice -n 19 debootstrap --variant=minbase --include="$ROOTFS_PACKAGES" \
      "$ROOTFS_RELEASE" "$work/root" "$mirror" >"$LOGS/debootstrap.log" 2>&1; then
      tail -n 20 "$LOGS/debootstrap.log" >&2
      rm -rf "$work"
      exit 1
    fi
    rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/usr/share/doc" "$work/root/usr/share/man"
    tar -C "$work/root" -c . | inside podman import --quiet - "$image" >/dev/null
    rm -rf "$work"
    echo "made the kind node's root in $((SECONDS - started)) s" >&2
  fi
  echo "$image"
}

# The node image: kind's base files from its module, the changed files of scripts/kind/files,
# kubeadm, the kubelet and kubectl, and every image the node runs as a docker-archive that the
# node imports at boot. Keyed by everything it is made from.
node_image() {
  local rootfs key image ctx kind_files
  rootfs=$(rootfs_image)
  kind_files=$(cd "$REPO/tools/kind" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go mod download -json sigs.k8s.io/kind |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')/images/base/files
  key=$( (echo "$rootfs $BIN $COREDNS_BIN $PROVISIONER_BIN $KUBE_ROUTER_BIN $KIND_BIN"
    declare -f node_image
    cd "$REPO/scripts" && find kind/files kind/Containerfile cluster/mkimg.py cluster/pause.c \
      cluster/base-images.sh -type f -print0 | sort -z | xargs -0 cat) | sha256sum | cut -c1-12)
  image=$NODE_IMAGE_NAME:$KV-$key
  if inside podman image exists "$image"; then
    echo "$image"
    return
  fi
  local started=$SECONDS
  echo "building the kind node image $image" >&2
  ctx=$DIR/node-image
  rm -rf "$ctx"
  mkdir -p "$ctx/files" "$ctx/bin" "$ctx/images"
  cp -r "$kind_files/." "$ctx/files/"
  chmod -R u+w "$ctx/files"
  cp -r "$HERE/files/." "$ctx/files/"
  echo "$KV" >"$ctx/files/kind/version"
  # kind's containerd unit, run as Debian installs containerd, without the negative
  # oom_score_adj that a container without CAP_SYS_RESOURCE may not set.
  sed -e 's|^ExecStart=/usr/local/bin/containerd|ExecStart=/usr/bin/containerd|' \
    -e '/^OOMScoreAdjust=/d' "$kind_files/etc/systemd/system/containerd.service" \
    >"$ctx/files/etc/systemd/system/containerd.service"
  cp "$BIN/kubeadm" "$BIN/kubelet" "$BIN/kubectl" "$KIND_BIN/crictl" "$ctx/bin/"

  # The images, named as kubeadm names them for this version.
  local images=$ctx/images mkimg="$REPO/scripts/cluster/mkimg.py" path=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  local name pause="" coredns="" etcd="" proxy=""
  while read -r name; do
    case $name in
      */kube-apiserver:* | */kube-controller-manager:* | */kube-scheduler:*)
        local bin=${name##*/}
        bin=${bin%%:*}
        python3 "$mkimg" "$images/$bin.tar" "$name" "" "--env=$path" "$BIN/$bin:/usr/local/bin/$bin"
        ;;
      */etcd:*) etcd=$name ;;
      */coredns:*) coredns=$name ;;
      */pause:*) pause=$name ;;
      */kube-proxy:*) proxy=$name ;;
    esac
  done < <("$BIN/kubeadm" config images list --kubernetes-version "$KV")
  python3 "$mkimg" "$images/etcd.tar" "$etcd" "" "--env=$path" \
    "$BIN/etcd:/usr/local/bin/etcd" "$BIN/etcdctl:/usr/local/bin/etcdctl"
  python3 "$mkimg" "$images/coredns.tar" "$coredns" /coredns "$COREDNS_BIN/coredns:/coredns"
  python3 "$mkimg" "$images/provisioner.tar" example.local/provisioner:1 /provisioner \
    "$PROVISIONER_BIN/provisioner:/provisioner"
  "$REPO/scripts/cluster/base-images.sh" "$DIR/base-images" "$pause" example.local/busybox:1
  cp "$DIR/base-images/pause.tar" "$DIR/base-images/busybox.tar" "$images/"
  grep -q "sandbox_image = \"$pause\"" "$HERE/files/etc/containerd/config.toml" || {
    echo "scripts/kind/files/etc/containerd/config.toml: sandbox_image is not $pause (kubeadm's)" >&2
    exit 1
  }
  # kube-proxy (and kube-router, NetworkPolicy's enforcer) need iptables, ipset and conntrack:
  # the Debian root with the two binaries.
  mkdir -p "$ctx/proxy"
  cp "$BIN/kube-proxy" "$KUBE_ROUTER_BIN/kube-router" "$ctx/proxy/"
  printf 'FROM %s\nCOPY kube-proxy kube-router /usr/local/bin/\nENV %s\n' "$rootfs" "$path" \
    >"$ctx/proxy/Containerfile"
  inside podman build --quiet --network none -t "$proxy" -t example.local/kube-router:1 \
    "$ctx/proxy" >/dev/null
  inside podman save --quiet --format docker-archive -m -o "$images/kube-proxy.tar" \
    "$proxy" example.local/kube-router:1
  inside podman rmi "$proxy" example.local/kube-router:1 >/dev/null

  inside nice -n 19 podman build --quiet --network none --build-arg "ROOTFS=$rootfs" \
    -f "$HERE/Containerfile" -t "$image" "$ctx" >/dev/null
  rm -rf "$ctx"
  # The store keeps one node image and its root: those of earlier keys go.
  local old
  for old in $(inside podman images --format '{{.Repository}}:{{.Tag}}' |
    grep "^$NODE_IMAGE_NAME:\|^localhost/pe-kind-rootfs:" | grep -vx "$image\|$rootfs"); do
    inside podman rmi "$old" >/dev/null
  done
  echo "built the kind node image in $((SECONDS - started)) s" >&2
  echo "$image"
}

up() {
  need_root
  setup_names "$1"
  if [ -n "$(holder_pid)" ] && kill -0 "$(holder_pid)" 2>/dev/null; then
    echo "the kind tier already runs in $DIR: scripts/kind.sh down $DIR first" >&2
    exit 1
  fi
  bins
  make_namespaces
  stat -L -c %i "/run/netns/$NETNS" >"$DIR.netns"
  podman_config
  inside podman network create --driver bridge --subnet "$KIND_SUBNET" --disable-dns kind >/dev/null
  # The bridge's name, for the tests that check the namespace's links (tests/cluster/network.rs).
  inside podman network inspect kind --format '{{.NetworkInterface}}' >"$DIR/bridge"
  node_image >"$DIR/node-image.name"
  echo "the kind tier is up in $DIR (node image $(cat "$DIR/node-image.name"))" >&2
}

# What tests/e2e/kind.sh takes on this machine (scripts/kind.sh env DIR).
env_of() {
  echo "KIND_NODE_IMAGE=$(cat "$DIR/node-image.name")"
  echo "KIND_CONFIG=$HERE/cluster.yaml"
  echo "KIND_ADDONS=\"$HERE/network-policy.yaml $HERE/coredns.yaml\""
  # The node's address, not the port kind publishes on the namespace's loopback.
  echo "KIND_API_SERVER=node"
}

# A cluster for a person, as tests/e2e/kind.sh makes the tier's: the node image, the tier's
# configuration and addons, and a kubeconfig that reaches the API server at the node's address
# (podman publishes no port into a namespace without an uplink).
create() {
  need_root
  setup_names "$1"
  bins
  local name=pe node_ip
  inside kind create cluster --name "$name" --image "$(cat "$DIR/node-image.name")" \
    --config "$HERE/cluster.yaml" --wait 180s
  node_ip=$(inside podman inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' \
    "$name-control-plane")
  inside kind get kubeconfig --internal --name "$name" |
    sed "s|server: https://$name-control-plane:6443|server: https://$node_ip:6443|" >"$DIR/kubeconfig.new"
  mv "$DIR/kubeconfig.new" "$DIR/kubeconfig"
  inside kubectl apply -f "$HERE/network-policy.yaml" -f "$HERE/coredns.yaml" >/dev/null
  inside kubectl -n kube-system rollout restart deployment/coredns >/dev/null
  inside kubectl -n kube-system rollout status daemonset/kube-router --timeout=180s >/dev/null
  inside kubectl -n kube-system rollout status deployment/coredns --timeout=180s >/dev/null
  echo "kind's cluster $name is up: scripts/kind.sh exec $1 kubectl get nodes" >&2
}

containers() { inside podman ps -aq 2>/dev/null || true; }

down() {
  need_root
  setup_names "$1"
  if [ -n "$(holder_pid)" ] && kill -0 "$(holder_pid)" 2>/dev/null; then
    bins >/dev/null 2>&1 || true
    local cluster
    for cluster in $(inside kind get clusters 2>/dev/null); do
      inside kind delete cluster --name "$cluster" >&2 || true
    done
    # Whatever kind did not remove (a create that failed half-way).
    [ -z "$(containers)" ] || inside podman rm --force --all --time 10 >/dev/null 2>&1 || true
    inside podman network rm --force kind >/dev/null 2>&1 || true
    # Whatever still runs in the namespace (podman's helpers) goes with it.
    local pid inode
    inode=$(stat -L -c %i "/run/netns/$NETNS")
    for pid in $(ps -e -o pid=); do
      [ "$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null)" != "$inode" ] ||
        [ "$pid" = "$(holder_pid)" ] || kill "$pid" 2>/dev/null || true
    done
    kill "$(holder_pid)" 2>/dev/null || true
    local deadline=$((SECONDS + 20))
    while kill -0 "$(holder_pid)" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
  fi
  ip netns del "$NETNS" 2>/dev/null || true
  rm -rf "$DIR"
}

leftovers_of() {
  local pid
  # Processes: any whose network namespace is the tier's, or whose command names DIR.
  local pid cmd
  for pid in $(pgrep -f -- "$DIR" 2>/dev/null || true); do
    cmd=$( { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null) || continue
    case $cmd in "" | *"kind.sh leftovers"*) continue ;; esac
    echo "process $pid: $cmd"
  done
  ip netns list 2>/dev/null | grep -q "^$NETNS\b" && echo "network namespace $NETNS"
  # Processes still in the tier's network namespace (its inode, kept beside DIR by `up`).
  if [ -f "$DIR.netns" ]; then
    local inode
    inode=$(cat "$DIR.netns")
    for pid in $(ps -e -o pid=); do
      [ "$(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null)" != "$inode" ] ||
        echo "process $pid in the tier's network namespace: $( { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null)"
    done
  fi
  { grep -F -- "$DIR" /proc/self/mountinfo || true; } | awk '{print "mount " $5}'
  { grep -F -- "$STORE" /proc/self/mountinfo || true; } | awk '{print "mount " $5}'
  # A container's cgroups (libpod-ID), or a process left in podman's (conmon's is podman's own,
  # made once and kept empty).
  find /sys/fs/cgroup -maxdepth 4 -path '*libpod_parent*' \( -name 'libpod-*' -o -name cgroup.procs \) \
    2>/dev/null | while read -r d; do
    case $d in
      */cgroup.procs) [ -z "$(cat "$d" 2>/dev/null)" ] || echo "cgroup $(dirname "$d") has processes" ;;
      *) echo "cgroup $d" ;;
    esac
  done
  # The store holds images only: a container's layer left in it is a leftover.
  [ -z "$(ls -A "$STORE/overlay-containers" 2>/dev/null | grep -v '\.json$\|\.lock$')" ] ||
    echo "containers in $STORE: $(ls "$STORE/overlay-containers")"
  true
}

leftovers() {
  setup_names "$1"
  leftovers_of
}

run_inside() {
  need_root
  setup_names "$1"
  shift
  bins
  inside "$@"
}

cmd=${1:-}
[ $# -ge 2 ] || usage
case "$cmd" in
  up) up "$2" ;;
  exec)
    shift
    run_inside "$@"
    ;;
  create) create "$2" ;;
  env) setup_names "$2" && env_of ;;
  down) down "$2" ;;
  leftovers) leftovers "$2" ;;
  *) usage ;;
esac
