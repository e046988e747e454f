#!/usr/bin/env bash
# The benchmark suite: builds tpcoord (and a -tags purego build of it), runs
# every `tpcoord bench` command (sampler, broadcast, e2e, and noise / step /
# launch / serve when this build has them) with --json, plus plain against
# greedy run after run, the purego build's sampler and e2e beside this
# build's, saves one JSON-lines file per figure, optionally runs the PyTorch
# vLLM-sampler mirror (scripts/vllm_sampler_bench.py) when torch imports
# (`bench broadcast` then also measures torch.distributed's gloo broadcast),
# then runs scripts/benchplot to write markdown tables and PNG plots.
#
# Full run (default): results in docs/bench/results/<date>/, PNGs in
# docs/bench/, and the section between <!-- bench.sh:begin --> and
# <!-- bench.sh:end --> in docs/benchmarks.md regenerated.
# --quick: tiny sizes; everything (results, PNGs, section.md) goes to --out
# (a temp dir by default) and docs/ is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

usage() {
  cat <<'USAGE'
Usage: scripts/bench.sh [--quick] [--out DIR] [--no-docs] [--docs]

  --quick     tiny sizes (smoke test); implies --no-docs and writes only to --out
  --out DIR   results directory (JSON lines, commands.txt, machine.txt);
              default docs/bench/results/<date> (full) or a temp dir (--quick)
  --no-docs   do not touch docs/: PNGs and section.md go to the --out dir
  --docs      update docs/benchmarks.md and docs/bench/*.png even with --quick
  -h, --help  this text

Environment: TPC_BENCH_NOISE_ARGS / TPC_BENCH_STEP_ARGS replace the default
arguments of `tpcoord bench noise` / `bench step` (--json is always added).
PYTHON (default /usr/bin/python3 if it imports torch, else python3) runs
scripts/vllm_sampler_bench.py if torch imports.
USAGE
}

quick=0 out="" docs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --out) [ $# -ge 2 ] || { echo "bench.sh: --out needs a directory" >&2; exit 2; }; out=$2; shift ;;
    --out=*) out=${1#--out=} ;;
    --no-docs) docs=0 ;;
    --docs) docs=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$docs" ]; then docs=$((1 - quick)); fi
date=$(date -u +%Y-%m-%d)
if [ -z "$out" ]; then
  if [ "$quick" = 1 ]; then out=$(mktemp -d -t tpc-bench.XXXXXX); else out=docs/bench/results/$date; fi
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

start=$(date +%s)
log() { printf '[bench.sh %4ds] %s\n' "$(( $(date +%s) - start ))" "$*" >&2; }

bin=$(mktemp -d -t tpc-bench-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
# tpcoord is built as scripts/package.sh builds it (CGO_ENABLED=0,
# -trimpath, -tags grpcnotrace), beside its agent-only build, which
# launch starts for its ranks: the binaries operators run. A cgo build of
# this code links libc for net and os/user only, and each rank it starts
# costs more CPU: a 64-rank launch was ready 0.1-0.8 s later
# (docs/benchmarks.md).
shipped() {
  local dst=$1 tags=grpcnotrace${2:+,$2}
  CGO_ENABLED=0 go build -trimpath -tags "$tags" -o "$dst" ./cmd/tpcoord
  CGO_ENABLED=0 go build -trimpath -tags "$tags,agentonly" -o "$dst-agent" ./cmd/tpcoord
  printf 'build\tCGO_ENABLED=0 go build -trimpath -tags %s -o %s ./cmd/tpcoord\n' "$tags" "${dst##*/}" "$tags,agentonly" "${dst##*/}-agent" >>"$out_cmds"
}
out_cmds=$out/commands.txt
: >"$out_cmds"
log "building tpcoord and tpcoord-agent (as packaged: CGO_ENABLED=0, -trimpath, -tags grpcnotrace) and benchplot"
shipped "$bin/tpcoord"
# benchplot is a module of its own (scripts/benchplot/go.mod); -o is
# absolute (mktemp), as go -C builds from that directory.
go -C scripts/benchplot build -o "$bin/benchplot" .
tpc=$bin/tpcoord
log "building the portable tpcoord (-tags purego: the Go path s390x and ppc64le run)"
shipped "$bin/tpcoord-purego" purego
# build EXE: the binary of a build ("native" is the one under test).
exe_of() { if [ "$1" = purego ]; then echo "$bin/tpcoord-purego"; else echo "$tpc"; fi; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "kernel: $(uname -sr)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
  echo "cores: $(nproc)"
  echo "go: $(go env GOVERSION)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
} >"$out/machine.txt"

# run NAME ARGS...: tpcoord bench ARGS... --json, appending to NAME.jsonl.
run() {
  local name=$1; shift
  printf '%s\ttpcoord bench %s\n' "$name" "$*" >>"$out/commands.txt"
  log "tpcoord bench $*"
  if ! "$tpc" bench "$@" >>"$out/$name.jsonl" 2>"$out/$name.stderr"; then
    echo "bench.sh: 'tpcoord bench $*' failed; its stderr:" >&2
    tail -n 20 "$out/$name.stderr" >&2
    exit 1
  fi
}

# run_tagged NAME FIELDS EXE ARGS...: EXE bench ARGS... --json, each line
# prefixed with the JSON members FIELDS (its build, run or round), appended
# to NAME.jsonl. The command is listed once however many rounds run it.
run_tagged() {
  local name=$1 fields=$2 exe=$3; shift 3
  local line
  line=$(printf '%s\t%s bench %s' "$name" "$(basename "$exe")" "$*")
  grep -qxF -- "$line" "$out/commands.txt" || printf '%s\n' "$line" >>"$out/commands.txt"
  log "$(basename "$exe") bench $* [$fields]"
  if ! "$exe" bench "$@" 2>>"$out/$name.stderr" | sed "s/^{/{$fields,/" >>"$out/$name.jsonl"; then
    echo "bench.sh: '$(basename "$exe") bench $*' failed; its stderr:" >&2
    tail -n 20 "$out/$name.stderr" >&2
    exit 1
  fi
}

has_command() { "$tpc" bench --help 2>&1 | grep -qE "^[[:space:]]+$1[[:space:]]"; }
has_flag() { "$tpc" bench "$1" --help 2>&1 | grep -qE -- "[[:space:]]--$2[[:space:]=]"; }

rm -f "$out"/*.jsonl "$out"/*.stderr
if [ "$quick" = 1 ]; then
  vocab=4096 batches=1,8 modes=plain,topk,greedy iters=3 refiters=2
  rounds=1 pgruns=2 pgbatch=8 portbatches=1,8 pathtokens=4 e2eargs=(--nproc 2 --batch 4 --vocab "$vocab" --forward-time 2ms --timeout 2m)
else
  vocab=100352 batches=1,8,32,64 modes=plain,topk,topp,minp,greedy iters=30 refiters=10
  rounds=3 pgruns=7 pgbatch=32 portbatches=1,32 pathtokens="128 512" e2eargs=(--nproc 4 --batch 32 --forward-time 20ms)
fi

# Sampler: fast with pool and inline noise, then the Reference (its noise is
# always its own, so one --noise value).
run sampler sampler --json --vocab "$vocab" --batch "$batches" --mode "$modes" --impl fast --noise pool,inline --iters "$iters"
run sampler sampler --json --vocab "$vocab" --batch "$batches" --mode "$modes" --impl reference --noise inline --iters "$refiters"

# Plain sampling against greedy argmax (one pass over the logits), run
# after run: the AVX-512 target is plain within 1.5x of greedy.
for r in $(seq 1 "$pgruns"); do
  run_tagged plain-greedy "\"bench\":\"plain-greedy\",\"run\":$r" "$tpc" sampler --json --vocab "$vocab" --batch "$pgbatch" --mode plain,greedy --impl fast --noise pool --iters 60
done

# The portable path: the purego build and this one, rounds interleaved.
for r in $(seq 1 "$rounds"); do
  for b in native purego; do
    run_tagged portable "\"bench\":\"portable\",\"build\":\"$b\",\"round\":$r" "$(exe_of "$b")" sampler --json --vocab "$vocab" --batch "$portbatches" --mode plain,topk,topp,greedy --impl fast --noise pool --iters "$iters"
  done
done

if has_command noise; then
  # shellcheck disable=SC2206
  nargs=(${TPC_BENCH_NOISE_ARGS-})
  if [ "$quick" = 1 ] && [ -z "${TPC_BENCH_NOISE_ARGS-}" ]; then
    has_flag noise iters && nargs+=(--iters 3)
    has_flag noise producers && nargs+=(--producers 1)
    has_flag noise vocab && nargs+=(--vocab "$vocab")
  fi
  run noise noise --json "${nargs[@]}"
else
  log "this tpcoord has no 'bench noise': skipped"
fi

if [ "$quick" = 1 ]; then
  run broadcast broadcast --json --followers 1,2 --messages 200
else
  run broadcast broadcast --json --followers 1,4,8
fi

if has_command step; then
  # shellcheck disable=SC2206
  sargs=(${TPC_BENCH_STEP_ARGS-})
  if [ "$quick" = 1 ] && [ -z "${TPC_BENCH_STEP_ARGS-}" ]; then
    has_flag step nproc && sargs+=(--nproc 2)
    has_flag step tokens && sargs+=(--tokens 8)
    has_flag step floor-messages && sargs+=(--floor-messages 200)
  elif [ -z "${TPC_BENCH_STEP_ARGS-}" ]; then
    sargs+=(--nproc 8,16,32,64)
  fi
  run step step --json "${sargs[@]}"
else
  log "this tpcoord has no 'bench step': skipped"
fi

if has_command launch; then
  if [ "$quick" = 1 ]; then
    run launch launch --json --nproc 2 --runs 1
  else
    run launch launch --json --nproc 16,32,64 --runs 3
  fi
else
  log "this tpcoord has no 'bench launch': skipped"
fi

cpus=()
if command -v taskset >/dev/null 2>&1; then cpus=(--cpus 0-1); else log "no taskset: e2e runs unpinned"; fi
if [ "$quick" = 1 ]; then
  run e2e e2e --json --combos sync+softmax+all,pool+logspace+rank0 --nproc 2 --batch 4 --tokens 4 --vocab "$vocab" --forward-time 2ms --timeout 2m "${cpus[@]}"
else
  run e2e e2e --json --combos all --nproc 4 --batch 32 --tokens 64 --forward-time 20ms "${cpus[@]}"
fi

# Rank 0's critical path in the full combination, on both builds, rounds
# interleaved: tokens/s against the forward-bound ceiling, and the phases.
for r in $(seq 1 "$rounds"); do
  for tok in $pathtokens; do
    for b in native purego; do
      run_tagged e2e-path "\"bench\":\"e2e-path\",\"variant\":\"$b\",\"round\":$r" "$(exe_of "$b")" e2e --json --combos pool+logspace+rank0 --tokens "$tok" "${e2eargs[@]}" "${cpus[@]}"
    done
  done
done

if has_command serve; then
  if [ "$quick" = 1 ]; then
    run serve serve --json --rounds 1 --duration 1s --clients 4 --vocab "$vocab"
  else
    run serve serve --json --rounds 8
  fi
else
  log "this tpcoord has no 'bench serve': skipped"
fi

# Debian's python3-torch installs into /usr/bin/python3, which a python3
# earlier in PATH (pyenv, a venv) may shadow: as bench broadcast's gloo
# transport does, try it first.
py=${PYTHON:-}
if [ -z "$py" ]; then
  py=python3
  if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch' >/dev/null 2>&1; then py=/usr/bin/python3; fi
fi
if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import torch' >/dev/null 2>&1; then
  ptmodes=plain,topk,topp
  pargs=(--vocab "$vocab" --batch "$batches" --mode "$ptmodes" --iters "$refiters")
  printf 'pytorch\t%s scripts/vllm_sampler_bench.py %s\n' "$py" "${pargs[*]}" >>"$out/commands.txt"
  log "PyTorch: scripts/vllm_sampler_bench.py ${pargs[*]}"
  "$py" scripts/vllm_sampler_bench.py "${pargs[@]}" >"$out/pytorch.jsonl" 2>"$out/pytorch.stderr" \
    || { echo "bench.sh: vllm_sampler_bench.py failed:" >&2; tail -n 20 "$out/pytorch.stderr" >&2; exit 1; }
else
  log "PyTorch not importable with $py: no PyTorch run; the docs quote PyTorch 1.13 figures measured earlier on this machine"
fi

if [ "$docs" = 1 ]; then
  log "benchplot -> docs/benchmarks.md, docs/bench/*.png"
  "$bin/benchplot" --results "$out" --png-dir docs/bench --docs docs/benchmarks.md --date "$date"
else
  log "benchplot -> $out"
  "$bin/benchplot" --results "$out" --png-dir "$out" --md-out "$out/section.md" --date "$date"
fi
log "done; results in ${out#"$root"/}"
