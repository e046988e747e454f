#!/usr/bin/env bash
# Installs what the test suite needs beyond Go: the pinned golangci-lint
# (see lint.sh), Jaeger (see jaeger.sh) for the tracing e2e test, Debian's
# nats-server for the e2e tests that need an external server, Debian's
# python3-torch for the PyTorch worker, and qemu-user-static, to run the
# byte-level and numeric packages' tests on s390x (big-endian). Idempotent;
# needs root (or sudo) only when something is missing.
set -euo pipefail

# golangci-lint, built from the Go module proxy when the pinned version is
# not installed yet, so the lint step of test.sh only runs it.
"$(dirname "$0")/lint.sh" --install

# The Jaeger e2e test's all-in-one binary: built from the Go module proxy
# once (about 7 minutes on 2 cores), then cached under $HOME/.cache/tpcoord.
# Bounded so a slow machine cannot push CI past its budget: a build cut
# short leaves no binary (jaeger.sh moves it into place only when done), and
# the test then skips saying why; the Go build cache keeps the work done.
timeout "${TPC_JAEGER_BUILD_TIMEOUT:-900}" "$(dirname "$0")/jaeger.sh" --build >/dev/null ||
  echo "deps.sh: could not build Jaeger in time; the Jaeger e2e test will be skipped" >&2

missing=()
command -v qemu-s390x-static >/dev/null 2>&1 || missing+=(qemu-user-static)
# A real, external NATS server for the restart, permissions and multi-node e2e tests.
[ -x /usr/sbin/nats-server ] || command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
# Debian's PyTorch (CPU, gloo) for the tensor-parallel model worker's tests
# (examples/torch-worker) and the e2e tests that run it under tpcoord.
/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1 || missing+=(python3-torch python3-numpy)
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "deps.sh: need root to install ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "deps.sh: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
