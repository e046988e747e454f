#!/usr/bin/env bash
# Lists the longest functions (scripts/funclen): one line per function,
# "<lines> <file>:<line> <name>", longest first; test and generated files
# are left out (pass -tests to include tests).
#
# usage: scripts/funclen.sh [-max N] [-tests] [dir ...]
#
# dir is relative to the repository root (default: the whole repository).
# With -max N the exit status is 1 if any function is longer than N lines;
# the project's limit is 80 (aim for 60):
#
#   scripts/funclen.sh -max 80 | head
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d -t tpc-funclen.XXXXXX)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/funclen" ./scripts/funclen
"$bin/funclen" "$@"
