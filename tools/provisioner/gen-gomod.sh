#!/usr/bin/env bash
# Regenerates this module's go.mod and go.sum (the test cluster's volume provisioner, on
# sigs.k8s.io/sig-storage-lib-external-provisioner); commit both. tools/build.sh builds it.
set -euo pipefail
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
cd "$(dirname "$0")"
rm -f go.mod go.sum
go mod init package-executor.local/tools/provisioner
go get sigs.k8s.io/sig-storage-lib-external-provisioner/v13@v13.1.0
go mod tidy
