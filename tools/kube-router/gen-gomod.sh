#!/usr/bin/env bash
# Regenerates this module's go.mod and go.sum (kube-router, whose network-policy controller
# enforces the test cluster's NetworkPolicies with iptables and ipset; a module of its own, as
# its k8s.io modules differ from the cluster's); commit both. tools/build.sh builds from them.
set -euo pipefail
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
V=${V:-v2.1.0}
cd "$(dirname "$0")"
rm -f go.mod go.sum
go mod init package-executor.local/tools/kube-router
go get -tool "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$V"
go mod tidy
