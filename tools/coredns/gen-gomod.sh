#!/usr/bin/env bash
# Regenerates this module's go.mod and go.sum (CoreDNS, in a module of its own so that its
# k8s.io modules do not meet the cluster's pins); commit both. tools/build.sh builds from them.
set -euo pipefail
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
V=${V:-v1.14.7}
cd "$(dirname "$0")"
rm -f go.mod go.sum
go mod init package-executor.local/tools/coredns
go get -tool "github.com/coredns/coredns@$V"
go mod tidy
