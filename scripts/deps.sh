#!/usr/bin/env bash
# Installs what the test suite needs beyond Go: Debian's nats-server for the
# e2e tests that need an external server, Debian's python3-torch for the
# PyTorch worker and python3-tqdm for its load progress bars, openssl for
# the multi-node test's certificates (scripts/nats-certs.sh), qemu-user-static to run the byte-level and numeric
# packages' tests on s390x (big-endian), systemd-analyze, rpm and nfpm for
# the package test, buildah, podman and runc for the container test, the
# pinned golangci-lint (see lint.sh) and Jaeger (see jaeger.sh) for the
# tracing e2e tests, Node.js with the openai npm client for its e2e test.
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
# Debian's tqdm: the worker's per-shard load bars (it works without; the
# test of the bars needs it).
/usr/bin/python3 -c 'import tqdm' >/dev/null 2>&1 || missing+=(python3-tqdm)
# openssl: scripts/nats-certs.sh makes the multi-node e2e test's TLS files.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# The package test (e2e/package_test.go): systemd-analyze verifies the
# packaged units and rpm reads the .rpm (dpkg-deb comes with dpkg).
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v rpm >/dev/null 2>&1 || missing+=(rpm)
# The container image test (e2e/container_test.go): buildah builds the image
# (scripts/image.sh), podman runs it with runc (crun cannot on these hosts).
for tool in buildah podman runc; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
# Node.js and npm for the official openai npm client's e2e test
# (e2e/openainode_test.go); the client itself is pinned in
# e2e/testdata/openai-js/package-lock.json and installed below.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

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

# nfpm for scripts/package.sh (pinned in scripts/package/go.mod) and the
# packaged binary's compiled dependencies (-trimpath, CGO_ENABLED=0: no
# other build shares them), built here rather than inside the package e2e
# test, where they would compete with the other tests for the cores: about
# 160 and 210 CPU-seconds with empty caches, nothing once cached.
goarch=$(go env GOARCH)
case "$goarch" in # the architectures package.sh (and so the test) packages for
  amd64|arm64|s390x|ppc64le) "$here/package.sh" --prepare --arch "$goarch" ;;
esac

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

# The openai npm client, at the version and hash package-lock.json pins.
npm ci --prefix "$here/../e2e/testdata/openai-js" --no-audit --no-fund --loglevel=error >/dev/null
