#!/usr/bin/env bash
# The test suite: formatting, vet, golangci-lint (function lengths
# included: funlen in .golangci.yml), no citations of files outside the
# repository, unit and e2e tests under the race detector (benchplot's and
# the Kubernetes base's, modules of their own, too; the container image's
# built and run), brief fuzzing of every wire decoder, cross-builds for
# the Spyre hosts (s390x, ppc64le), the byte-level and numeric
# packages' tests on big-endian s390x under qemu-user, and the ppc64le
# vector kernel's (with the sampler's exactness tests) under qemu-user.
# Installs qemu-user-static if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "dependencies"
scripts/deps.sh

step "gofmt"
unformatted=$(gofmt -l $(find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go vet (and of the agent-only and shipped builds' tags)"
go vet ./...
go vet -tags agentonly,grpcnotrace ./cmd/... ./broadcast/... ./coordinator/... ./internal/telemetry

step "benchplot, a module of its own (scripts/benchplot/go.mod): vet and tests (race detector)"
go -C scripts/benchplot vet ./...
go -C scripts/benchplot test -race -count=1 ./...

step "the Kubernetes base (configs/k8s), a module of its own (scripts/k8stest/go.mod): rendered with kustomize, decoded strictly, run as local processes (race detector)"
go -C scripts/k8stest vet ./...
go -C scripts/k8stest test -race -count=1 ./...

step "golangci-lint"
scripts/lint.sh

step "no citations of files outside the repository"
# The docs and code stand alone: a design brief or a sibling directory
# outside this repository is not something a reader can open.
if git grep -n -I -E 'DESIGN\.md|\.\./shared'; then
  echo "the lines above cite files outside the repository"; exit 1
fi

step "unit and e2e tests (race detector)"
# The PyTorch worker's e2e tests run, not skip: deps.sh installed PyTorch.
export TPC_REQUIRE_TORCH=1
# The container image test runs, not skips: deps.sh installed buildah,
# podman and runc.
export TPC_REQUIRE_CONTAINER=1
# The openai npm client's test runs, not skips: deps.sh installed it.
export TPC_REQUIRE_NODE=1
go test -race -shuffle=on -count=1 -timeout 20m ./...

step "the PyTorch worker's own tests"
/usr/bin/python3 -m unittest discover -s examples/torch-worker

step "fuzz every decoder briefly"
# A count, not a duration: a duration-based -fuzztime can fail with a
# spurious "context deadline exceeded" on a loaded machine (golang/go#75804).
fuzztime=${FUZZTIME:-30000x}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    echo "-- $pkg $target ($fuzztime)"
    go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg"
  done
done

step "the noise generator on all 2^32 inputs: monotone, kernels equal, bounds above values"
# About 20 s on 2 cores: the sampler's exactness with bound rows and its
# noise-bound pruning rest on these properties holding for every input.
TPC_NOISE_EXHAUSTIVE=1 go test -count=1 -run '^TestMonotoneExhaustive$' ./noisepool/

step "cross-build linux/s390x and linux/ppc64le"
GOOS=linux GOARCH=s390x go build ./...
GOOS=linux GOARCH=ppc64le go build ./...

# The ppc64le vector kernel's tests run beside the s390x ones: that step
# is long on one package (the sampler's), and leaves a core idle.
# In a session of its own (setsid), so that a failure elsewhere stops the
# whole group, qemu included.
ppc_log=$(mktemp)
setsid --wait bash -c '
  ppc() { GOOS=linux GOARCH=ppc64le go test -short -count=1 -exec qemu-ppc64le-static "$@"; }
  ppc ./internal/blockmax/ &&
    ppc -run "^(TestGoldenDraws|TestMatchesFullRow|TestPrunedArgmaxMatchesFullRow)\$" ./sampler/
' > "$ppc_log" 2>&1 &
ppc_pid=$!
trap 'kill -- -"$ppc_pid" 2>/dev/null || true; rm -f "$ppc_log"' EXIT

step "byte-level and numeric packages on s390x (big-endian) under qemu"
GOOS=linux GOARCH=s390x go test -short -count=1 -exec qemu-s390x-static ./broadcast/... ./noisepool/... ./sampler/... ./internal/...

step "the block-max kernel and the sampler's exactness on ppc64le (VMX) under qemu"
ppc_rc=0
wait "$ppc_pid" || ppc_rc=$?
cat "$ppc_log"
[ "$ppc_rc" -eq 0 ] || exit "$ppc_rc"

echo
echo "all checks passed"
