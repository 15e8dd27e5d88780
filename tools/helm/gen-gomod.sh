#!/usr/bin/env bash
# Regenerates this module's go.mod and go.sum (Helm 3, in a module of its own: it brings newer
# k8s.io modules than the cluster's); commit both. tools/build.sh builds from them.
set -euo pipefail
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
V=${V:-v3.21.4}
cd "$(dirname "$0")"
rm -f go.mod go.sum
go mod init package-executor.local/tools/helm
go get -tool "helm.sh/helm/v3/cmd/helm@$V"
go mod tidy
