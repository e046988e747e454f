#!/usr/bin/env bash
# A soak run: a 4-rank job started by hand (Debian's nats-server with the
# shipped configuration, one `tpcoord agent` per rank under --on-peer-loss
# wait, a `tpcoord serve` gateway) serves a steady mix of requests, half
# through the Go client and half through the gateway, while followers and
# rank 0 are killed and restarted, the NATS server is restarted, a
# follower is frozen, and hostile and forged messages flood the job's
# subjects. Then every request that finished with a seed (the soak's or
# the gateway's) is replayed on a fresh, fault-free job and its tokens
# compared. See docs/reliability.md.
#
# Everything (binaries, configuration, logs, reports) lives in one
# directory, a new temporary one unless --out names one; it is kept, and
# summary.md in it is also printed. Ctrl-C stops every process and writes
# the report of the run so far. Too long for CI: not part of test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'USAGE'
Usage: scripts/soak.sh [--duration D] [--out DIR] [soak flags...]

  --duration D  how long the load and the faults run (Go duration; default 10m)
  --out DIR     the run's directory (default: a new one under $TMPDIR)
  -h, --help    this text; `go run ./scripts/soak --help` lists the other flags
                (--rate, --fault-gap, --faults, --job-key, --seed, ...)

Quick check: scripts/soak.sh --duration 90s --fault-gap 15s
USAGE
}

duration=10m out="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) [ $# -ge 2 ] || { echo "soak.sh: --duration needs a value" >&2; exit 2; }; duration=$2; shift ;;
    --duration=*) duration=${1#--duration=} ;;
    --out) [ $# -ge 2 ] || { echo "soak.sh: --out needs a directory" >&2; exit 2; }; out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    -h|--help) usage; exit 0 ;;
    *) extra+=("$1") ;;
  esac
  shift
done

if [ ! -x /usr/sbin/nats-server ]; then
  echo "soak.sh: /usr/sbin/nats-server is missing (Debian's nats-server; scripts/deps.sh installs it)" >&2
  exit 1
fi
if [ -z "$out" ]; then out=$(mktemp -d -t tpc-soak.XXXXXX); fi
mkdir -p "$out/bin"
echo "soak.sh: building into $out/bin" >&2
go build -o "$out/bin/tpcoord" ./cmd/tpcoord
go build -o "$out/bin/soak" ./scripts/soak
# exec: Ctrl-C reaches the soak itself, which stops its processes (they
# run in their own process groups) and writes the report.
exec "$out/bin/soak" --bin "$out/bin/tpcoord" --dir "$out" --duration "$duration" "${extra[@]}"
