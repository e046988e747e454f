#!/usr/bin/env bash
# Makes the tokenizer conformance test's reference encodings:
# coordinator/gateway/tokenizer/testdata/conformance/*/reference.json, from
# the texts and tokenizers that `go test ./coordinator/gateway/tokenizer
# -run TestConformanceFilesAreGenerated -update` writes. The reference is
# Hugging Face's tokenizers.js (npm @huggingface/tokenizers, the version
# package-lock.json pins), run with Node.js (Debian's nodejs). Only this
# script needs them: the test reads the checked-in results.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
command -v node >/dev/null || { echo "reference.sh: needs node (apt-get install nodejs npm)" >&2; exit 1; }
cd "$here"
npm ci --no-audit --no-fund --silent
node reference.mjs "$root/coordinator/gateway/tokenizer"
