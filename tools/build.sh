#!/usr/bin/env bash
# Builds what the test cluster is made of from the Go modules of this folder (go.mod and go.sum
# committed; each module's gen-gomod.sh makes them) and prints the folders that hold them, one
# per line, for PATH:
#
#   k8s/      kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl (static),
#             kubeadm (for the kind node), kubelet (cgo, as upstream), etcd and etcdctl (the version 1.34 pins), with the
#             version ldflags Kubernetes' own build sets (hack/lib/version.sh): /version says
#             v1.34.x
#   coredns/  CoreDNS, in a module of its own (its k8s.io modules differ from the cluster's)
#   helm/     Helm 3, in a module of its own for the same reason
#   provisioner/  the cluster's volume provisioner (world-writable folders, as kind's default)
#   kube-router/  kube-router, for its NetworkPolicy enforcer (iptables and ipset)
#
#   kind/     kind and crictl, for the kind tier (scripts/kind.sh)
#
#   tools/build.sh [k8s|coredns|helm|provisioner|kube-router|kind]...   (default: all but kind)
#
# Each module's binaries live outside the clone, in a folder keyed by its go.sum, its Go files
# and the function here that builds it, beside Go's own caches: a second run, or a fresh clone on the same machine, builds
# nothing. Cold on 2 cores: about 11 minutes in all, Kubernetes 6.5 of them (see
# docs/cluster.md for the figures).
set -euo pipefail
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly
cd "$(dirname "$0")"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/package-executor"

build_k8s() {
  local out=$1 kv minor v=""
  kv=$(awk '$1=="k8s.io/kubernetes"{print substr($2,2)}' k8s/go.mod)
  minor=$(cut -d. -f2 <<<"$kv")
  for kv_pair in gitVersion=v$kv gitMajor=1 gitMinor=$minor gitTreeState=clean \
    buildDate=1970-01-01T00:00:00Z; do
    v+=" -X k8s.io/component-base/version.$kv_pair -X k8s.io/client-go/pkg/version.$kv_pair"
  done
  (
    cd k8s
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $v" -o "$out/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy \
      k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubeadm
    CGO_ENABLED=1 go build -trimpath -ldflags "-s -w $v" -o "$out/" k8s.io/kubernetes/cmd/kubelet
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/etcdctl" go.etcd.io/etcd/etcdctl/v3
  )
}

build_coredns() {
  (cd coredns && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/coredns" \
    github.com/coredns/coredns)
}

# The ldflags of Helm's own Makefile: its version, and the Kubernetes version `helm template`
# and `helm lint` assume (client-go's v0.N is Kubernetes 1.N; unset, Helm says 1.20).
build_helm() {
  local version client minor
  version=$(awk '$1=="helm.sh/helm/v3"{print $2}' helm/go.mod)
  client=$(awk '$1=="k8s.io/client-go"{print $2}' helm/go.mod)
  minor=$(cut -d. -f2 <<<"$client")
  local flags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
  for pkg in pkg/lint/rules pkg/chartutil; do
    flags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$minor"
  done
  (cd helm && CGO_ENABLED=0 go build -trimpath -ldflags "$flags" -o "$1/helm" \
    helm.sh/helm/v3/cmd/helm)
}

# Only its network-policy controller runs (docs/cluster.md says why it, and not kind's
# kube-network-policies: the kernel here has no nftables `queue`).
build_kube-router() {
  (cd kube-router && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/kube-router" \
    github.com/cloudnativelabs/kube-router/v2/cmd/kube-router)
}

# kind (the CLI that makes the kind tier's cluster) and crictl (the node image's CRI client).
build_kind() {
  (cd kind && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/" sigs.k8s.io/kind \
    sigs.k8s.io/cri-tools/cmd/crictl)
}

build_provisioner() {
  (cd provisioner && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/provisioner" .)
}

modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=(k8s coredns helm provisioner kube-router)
for module in "${modules[@]}"; do
  case $module in k8s | coredns | helm | provisioner | kube-router | kind) ;; *)
    echo "usage: tools/build.sh [k8s|coredns|helm|provisioner|kube-router|kind]..." >&2
    exit 2
    ;;
  esac
  # The key: the module's go.sum and Go files, and how this script builds it (its function).
  key=$( (find "$module" -maxdepth 1 \( -name go.sum -o -name '*.go' \) -type f -print0 |
    sort -z | xargs -0 cat && declare -f "build_$module") | sha256sum | cut -c1-12)
  out="$cache/$module-$key"
  if [ ! -f "$out/.complete" ]; then
    started=$SECONDS
    echo "building $module into $out" >&2
    mkdir -p "$out"
    "build_$module" "$out" >&2
    touch "$out/.complete"
    echo "built $module in $((SECONDS - started)) s" >&2
  fi
  echo "$out"
done
