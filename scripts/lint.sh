#!/usr/bin/env bash
# Lints the repository with golangci-lint (configuration: .golangci.yml).
# The version is pinned: a binary of another version in $(go env GOPATH)/bin
# is replaced by this one, built with `go install` (a few minutes on 2 cores
# the first time; deps.sh does it ahead with --install). Idempotent.
#
# usage: scripts/lint.sh [--install]   (--install: install only, do not lint)
set -euo pipefail
cd "$(dirname "$0")/.."

version=2.15.0
gopath=$(go env GOPATH)
bindir=${gopath%%:*}/bin
bin=$bindir/golangci-lint

if [ "$("$bin" version --short 2>/dev/null || true)" != "$version" ]; then
  echo "lint.sh: installing golangci-lint v$version into $bindir" >&2
  rm -f "$bin" # go install will not replace a file that is not a Go binary
  GOBIN=$bindir go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$version"
fi
[ "${1:-}" = "--install" ] && exit 0
"$bin" run ./...
# The shipped builds' tags: tpcoord-agent (agentonly) leaves out commands
# and the embedded NATS server; grpcnotrace only drops a dependency.
"$bin" run --build-tags agentonly,grpcnotrace ./cmd/... ./broadcast/... ./coordinator/...
# benchplot, a module of its own (scripts/benchplot/go.mod), with the same
# configuration (golangci-lint finds .golangci.yml in a parent directory).
(cd scripts/benchplot && "$bin" run ./...)
# The Kubernetes base's test, a module of its own too (scripts/k8stest).
(cd scripts/k8stest && "$bin" run ./...)
