#!/usr/bin/env bash
# Regenerates this module's go.mod and go.sum: run once per kind or cri-tools bump (needs the
# Go module proxy), then commit both. The test command only builds from them (build.sh).
#
# kind (its CLI, and the node image's base files: images/base/files in its module) and crictl
# (cri-tools, the node's CRI client), pinned to the versions the kind tier was proven with.
set -euo pipefail
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
KIND=${KIND:-v0.33.0}
CRI_TOOLS=${CRI_TOOLS:-v1.37.0}
cd "$(dirname "$0")"
rm -f go.mod go.sum
go mod init package-executor.local/tools/kind
go get -tool "sigs.k8s.io/kind@$KIND" "sigs.k8s.io/cri-tools/cmd/crictl@$CRI_TOOLS"
go mod tidy
