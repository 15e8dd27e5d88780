#!/usr/bin/env bash
# Regenerates this module's go.mod and go.sum: run once per Kubernetes bump (needs the Go
# module proxy), then commit both. The test command only builds from them (build.sh).
#
# `go install k8s.io/kubernetes/cmd/...@vX` cannot work: the published go.mod requires every
# staging module at v0.0.0 and replaces each with ./staging/src/... So this module requires
# k8s.io/kubernetes and replaces each staging module by its published v0.<minor>.<patch>, read
# from the downloaded go.mod rather than listed here. etcd is whatever k8s.io/kubernetes pins
# (MVS keeps it): v3.6.4 for 1.34.
set -euo pipefail
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
KV=${KV:-1.34.4}
MINOR=$(cut -d. -f2 <<<"$KV")
PATCH=$(cut -d. -f3 <<<"$KV")
SV="v0.$MINOR.$PATCH"
cd "$(dirname "$0")"
rm -f go.mod go.sum
go mod init package-executor.local/tools/k8s
GOMOD=$(go mod download -json "k8s.io/kubernetes@v$KV" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
for m in $(awk '$2=="v0.0.0"{print $1}' "$GOMOD"); do go mod edit -replace="$m=$m@$SV"; done
GODEBUG_DEFAULT=$(awk '$1=="godebug"{print $2}' "$GOMOD")
[ -z "$GODEBUG_DEFAULT" ] || go mod edit -godebug="$GODEBUG_DEFAULT"
go get "k8s.io/kubernetes@v$KV"
for t in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl kubeadm; do
  go get -tool "k8s.io/kubernetes/cmd/$t@v$KV"
done
# `go get -tool PKG` without a version would upgrade to the newest: name what k8s pins.
ETCD=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
go get -tool "go.etcd.io/etcd/server/v3@$ETCD" "go.etcd.io/etcd/etcdctl/v3@$ETCD"
go mod tidy
