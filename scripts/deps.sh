#!/usr/bin/env bash
# Installs what the test suite needs beyond Go: Debian's nats-server for the
# e2e tests that need an external server, Debian's python3-torch for the
# PyTorch worker, openssl for the multi-node test's certificates
# (scripts/nats-certs.sh), qemu-user-static to run the byte-level and numeric
# packages' tests on s390x (big-endian), the pinned golangci-lint (see
# lint.sh) and Jaeger (see jaeger.sh) for the tracing e2e tests.
# Idempotent; needs root (or sudo) only when a package is missing. The
# packages download while the two Go builds compile (the builds are
# CPU-bound, the downloads are not).
set -euo pipefail
here=$(dirname "$0")

missing=()
command -v qemu-s390x-static >/dev/null 2>&1 || missing+=(qemu-user-static)
# A real, external NATS server for the restart, permissions and multi-node e2e tests.
[ -x /usr/sbin/nats-server ] || command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
# Debian's PyTorch (CPU, gloo) for the tensor-parallel model worker's tests
# (examples/torch-worker) and the e2e tests that run it under tpcoord.
/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1 || missing+=(python3-torch python3-numpy)
# openssl: scripts/nats-certs.sh makes the multi-node e2e test's TLS files.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)

apt_pid=""
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "deps.sh: need root to install ${missing[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  echo "deps.sh: installing ${missing[*]}" >&2
  { $sudo apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } &
  apt_pid=$!
fi

# golangci-lint, built from the Go module proxy when the pinned version is
# not installed yet, so the lint step of test.sh only runs it.
"$here/lint.sh" --install

# The Jaeger e2e tests' all-in-one binary: built from the Go module proxy
# once (about 7 minutes on 2 cores), then cached under $HOME/.cache/tpcoord.
# Bounded so a slow machine cannot push CI past its budget: a build cut
# short leaves no binary (jaeger.sh moves it into place only when done), and
# the tests then skip saying why; the Go build cache keeps the work done.
timeout "${TPC_JAEGER_BUILD_TIMEOUT:-900}" "$here/jaeger.sh" --build >/dev/null ||
  echo "deps.sh: could not build Jaeger in time; the Jaeger e2e tests will be skipped" >&2

if [ -n "$apt_pid" ] && ! wait "$apt_pid"; then
  echo "deps.sh: installing ${missing[*]} failed" >&2
  exit 1
fi
