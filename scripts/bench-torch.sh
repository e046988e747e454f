#!/usr/bin/env bash
# The real-model benchmark: a seeded random Llama checkpoint run, at each TP
# size, by tpcoord in its full configuration (pool+logspace+rank0), by
# tpcoord in the baseline configuration (sync+softmax+all: softmax with
# exponential noise on every rank) — both `tpcoord bench e2e --executor
# worker` with examples/torch-worker — and by a plain PyTorch loop over the
# same model code (scripts/torch_tp_loop.py). Within each TP size the three
# setups alternate over --rounds rounds (their order rotating), so that a
# change in the shared machine's load falls on all three. A greedy check
# (temperature 0) first compares tpcoord's tokens with the loop's.
#
# Results (torch.jsonl, greedy.txt and the greedy runs' tokens,
# commands.txt, machine.txt, the runs' stderr) go to
# docs/bench/results/<date>/torch/; benchplot writes docs/bench/torch*.png
# and the section between the bench.sh markers of docs/benchmarks-torch.md.
# --quick: a small model and few tokens, everything into --out (a temp dir
# by default), docs/ left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

usage() {
  cat <<'USAGE'
Usage: scripts/bench-torch.sh [--quick] [--out DIR] [--no-docs] [--docs]
                              [--rounds N] [--batch N] [--tokens N] [--tp LIST]
                              [--model DIR] [--wait-load L] [--wait-max SECONDS]

  --quick          a small model (hidden 256, 2 layers, vocab 8192), batch 4,
                   8 tokens, 1 round; implies --no-docs
  --out DIR        results directory (default docs/bench/results/<date>/torch,
                   or a temp dir with --quick)
  --no-docs        PNGs and section.md go to the --out dir, docs/ untouched
  --docs           update docs/benchmarks-torch.md and docs/bench/torch*.png
  --rounds N       rounds per TP size (default 5)
  --batch N        concurrent requests (default 16)
  --tokens N       output tokens per request (default 32)
  --tp LIST        TP sizes (default 1,2,4)
  --model DIR      use (or write, if it has no config.json) the checkpoint here
                   instead of a temporary one
  --wait-load L    before measuring, wait until the 1-minute load average is
                   at most L (default: do not wait)
  --wait-max S     give up waiting after S seconds and run anyway (default 2400)
  -h, --help       this text

PYTHON (default /usr/bin/python3) must import torch.
USAGE
}

quick=0 out="" docs="" rounds=5 batch=16 tokens=32 tps=1,2,4 model="" wait_load="" wait_max=2400
need() { [ $# -ge 2 ] || { echo "bench-torch.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --out) need "$@"; out=$2; shift ;;
    --no-docs) docs=0 ;;
    --docs) docs=1 ;;
    --rounds) need "$@"; rounds=$2; shift ;;
    --batch) need "$@"; batch=$2; shift ;;
    --tokens) need "$@"; tokens=$2; shift ;;
    --tp) need "$@"; tps=$2; shift ;;
    --model) need "$@"; model=$2; shift ;;
    --wait-load) need "$@"; wait_load=$2; shift ;;
    --wait-max) need "$@"; wait_max=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench-torch.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for v in "$rounds" "$batch" "$tokens" "$wait_max"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench-torch.sh: --rounds, --batch, --tokens and --wait-max take positive integers, got $v" >&2; exit 2; }
done
[[ $tps =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "bench-torch.sh: --tp takes a list such as 1,2,4, got $tps" >&2; exit 2; }
if [ -n "$wait_load" ] && ! [[ $wait_load =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
  echo "bench-torch.sh: --wait-load takes a number, got $wait_load" >&2; exit 2
fi

# The model: the issue's (hidden 1024, 8 layers, vocab 100352), with 16
# query heads over 4 KV heads (TP 4: one KV head per rank) and a Llama-like
# MLP of 2816. BF16 weights, bfloat16 compute: see docs/benchmarks-torch.md.
ckpt_flags=(--seed 7 --vocab 100352 --hidden 1024 --layers 8 --heads 16 --kv-heads 4 --intermediate 2816 --dtype bf16 --eos 2)
vocab=100352 eos=2
if [ "$quick" = 1 ]; then
  ckpt_flags=(--seed 7 --vocab 8192 --hidden 256 --layers 2 --heads 8 --kv-heads 4 --intermediate 512 --dtype bf16 --eos 2)
  vocab=8192 rounds=1 batch=4 tokens=8
fi
compute=bfloat16
[ -n "$docs" ] || docs=$((1 - quick))
date=$(date -u +%Y-%m-%d)
if [ -z "$out" ]; then
  if [ "$quick" = 1 ]; then out=$(mktemp -d -t tpc-bench-torch.XXXXXX); else out=docs/bench/results/$date/torch; fi
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

start=$(date +%s)
log() { printf '[bench-torch.sh %4ds] %s\n' "$(( $(date +%s) - start ))" "$*" >&2; }
load1() { cut -d' ' -f1 /proc/loadavg; }

py=${PYTHON:-/usr/bin/python3}
"$py" -c 'import torch' 2>/dev/null || { echo "bench-torch.sh: $py cannot import torch (Debian: apt-get install python3-torch)" >&2; exit 1; }

tmp=$(mktemp -d -t tpc-bench-torch-bin.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
log "building tpcoord and benchplot"
go build -o "$tmp/tpcoord" ./cmd/tpcoord
# benchplot is a module of its own (scripts/benchplot/go.mod); -o is
# absolute (mktemp), as go -C builds from that directory.
go -C scripts/benchplot build -o "$tmp/benchplot" .
tpc=$tmp/tpcoord

if [ -z "$model" ]; then model=$tmp/model; fi
if [ ! -f "$model/config.json" ]; then
  log "writing the checkpoint: ${ckpt_flags[*]}"
  "$py" scripts/make-checkpoint.py --out "$model" "${ckpt_flags[@]}" >/dev/null
fi
model=$(cd "$model" && pwd)

# Both sides' collectives go over loopback; the workers inherit this from
# launch and its agents.
export GLOO_SOCKET_IFNAME=lo

worker="$py $root/examples/torch-worker/worker.py --socket {socket} --model $model --compute-dtype $compute"
e2e_args=(--json --executor worker --worker-cmd "$worker" --vocab "$vocab" --eos "$eos" --batch "$batch" --tokens "$tokens" --timeout 15m)
loop_args=(--model "$model" --batch "$batch" --tokens "$tokens" --compute-dtype "$compute")

rm -f "$out"/torch.jsonl "$out"/*.stderr "$out"/greedy*
: >"$out/commands.txt"
# commands.txt shows the commands with the checkpoint as MODEL and the
# worker command quoted.
{
  printf 'checkpoint\t%s scripts/make-checkpoint.py --out MODEL %s\n' "$py" "${ckpt_flags[*]}"
  printf 'tpcoord\ttpcoord bench e2e %s --nproc TP --combos pool+logspace+rank0 (full) or sync+softmax+all (baseline)\n' \
    "$(printf '%s ' "${e2e_args[@]}" | sed "s|$worker |\"$worker\" |")"
  printf 'loop\t%s scripts/torch_tp_loop.py %s --nproc TP\n' "$py" "${loop_args[*]}"
} | sed "s|$model|MODEL|g; s|$root/||g" >>"$out/commands.txt"

# e2e DEST TP COMBO [ARGS...]: one tpcoord run, its lines appended to DEST.
e2e() {
  local dest=$1 tp=$2 combo=$3; shift 3
  log "TP $tp: tpcoord $combo $*"
  if ! "$tpc" bench e2e "${e2e_args[@]}" --nproc "$tp" --combos "$combo" "$@" >>"$dest" 2>>"$out/tpcoord.stderr"; then
    echo "bench-torch.sh: tpcoord bench e2e (TP $tp, $combo) failed; its stderr:" >&2
    tail -n 30 "$out/tpcoord.stderr" >&2
    exit 1
  fi
}

# loop DEST TP [ARGS...]: one plain-loop run, its line appended to DEST.
loop() {
  local dest=$1 tp=$2; shift 2
  log "TP $tp: plain PyTorch loop $*"
  if ! "$py" scripts/torch_tp_loop.py "${loop_args[@]}" --nproc "$tp" "$@" >>"$dest" 2>>"$out/loop.stderr"; then
    echo "bench-torch.sh: torch_tp_loop.py (TP $tp) failed; its stderr:" >&2
    tail -n 30 "$out/loop.stderr" >&2
    exit 1
  fi
}

if [ -n "$wait_load" ]; then
  deadline=$(( $(date +%s) + wait_max ))
  while awk -v l="$(load1)" -v max="$wait_load" 'BEGIN { exit !(l > max) }' && [ "$(date +%s)" -lt "$deadline" ]; do
    log "load $(load1) > $wait_load: waiting (until $(date -u -d "@$deadline" +%H:%M:%S) UTC at most)"
    sleep 30
  done
fi
load_before=$(uptime)
log "load before: $load_before"

# The greedy check: the full configuration and the loop at temperature 0,
# at every TP size. Their tokens go to greedy-tokens.ndjson (not *.jsonl:
# benchplot reads those), their timings to greedy-runs.ndjson: not part of
# the measurement.
greedy=$out/greedy-tokens.ndjson
: >"$greedy"
: >"$out/greedy-runs.ndjson"
IFS=, read -r -a tp_list <<<"$tps"
for tp in "${tp_list[@]}"; do
  e2e "$out/greedy-runs.ndjson" "$tp" pool+logspace+rank0 --temperature 0 --tokens-out "$greedy"
  loop "$out/greedy-runs.ndjson" "$tp" --temperature 0 --tokens-out "$greedy"
done
"$py" - "$greedy" >"$out/greedy.txt" <<'PY'
import json, sys
runs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs.setdefault((r["nproc"], r["impl"]), {})[r["request"]] = r["tokens"]
for tp in sorted({k[0] for k in runs}):
    a, b = runs.get((tp, "tpcoord"), {}), runs.get((tp, "pytorch-loop"), {})
    same = sum(1 for i in a if a[i] == b.get(i))
    first = [i for i in sorted(a) if a[i] != b.get(i)]
    note = ""
    if first:
        i = first[0]
        k = next((j for j, (x, y) in enumerate(zip(a[i], b.get(i, []))) if x != y), None)
        note = "; request %d first differs at token %s" % (i, k)
    print("TP %d: %d of %d requests give the same greedy tokens (tpcoord full vs plain loop)%s" % (tp, same, len(a), note))
PY
sed 's/^/greedy check: /' "$out/greedy.txt" >&2

# The measurement: per TP size, --rounds rounds of the three setups, the
# order rotating by one each round.
setups=(full baseline loop)
for tp in "${tp_list[@]}"; do
  for ((r = 0; r < rounds; r++)); do
    for ((k = 0; k < 3; k++)); do
      case ${setups[$(( (r + k) % 3 ))]} in
        full) e2e "$out/torch.jsonl" "$tp" pool+logspace+rank0 ;;
        baseline) e2e "$out/torch.jsonl" "$tp" sync+softmax+all ;;
        loop) loop "$out/torch.jsonl" "$tp" ;;
      esac
    done
  done
done
load_after=$(uptime)
log "load after: $load_after"

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "kernel: $(uname -sr)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
  echo "cores: $(nproc)"
  echo "memory: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
  echo "go: $(go env GOVERSION)"
  echo "python: $("$py" -c 'import platform, torch; print(platform.python_version(), "torch", torch.__version__)')"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
  echo "model: make-checkpoint.py ${ckpt_flags[*]}; compute $compute"
  echo "workload: TP $tps, batch $batch, $tokens tokens per request, temperature 0.8; rounds: $rounds"
  echo "threads per rank: cores / TP, at least 1 (the worker's default; the loop takes the same)"
  echo "load before: $load_before"
  echo "load after: $load_after"
  sed 's/^/greedy check: /' "$out/greedy.txt"
} >"$out/machine.txt"

if [ "$docs" = 1 ]; then
  log "benchplot -> docs/benchmarks-torch.md, docs/bench/torch*.png"
  "$tmp/benchplot" --results "$out" --png-dir docs/bench --docs docs/benchmarks-torch.md --date "$date" --script scripts/bench-torch.sh
else
  log "benchplot -> $out"
  "$tmp/benchplot" --results "$out" --png-dir "$out" --md-out "$out/section.md" --date "$date" --script scripts/bench-torch.sh
fi
log "done; results in ${out#"$root"/}"
