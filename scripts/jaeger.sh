#!/usr/bin/env bash
# Builds (once) and runs a local Jaeger all-in-one for tpcoord's traces.
#
#   scripts/jaeger.sh            build if missing, then run Jaeger in the
#                                foreground: OTLP gRPC :4317, OTLP HTTP
#                                :4318, UI and query API :16686 (in memory)
#   scripts/jaeger.sh --build    build if missing, print the binary's path
#
# Jaeger v1.76.0's all-in-one (the v2 binary, cmd/jaeger) is built from the
# Go module proxy: about 7 minutes on 2 cores, then cached in
# $TPCOORD_CACHE (default $HOME/.cache/tpcoord). `go install …@v1.76.0`
# refuses the module (its go.mod has replace directives), so this builds
# from a copy of the module source. JAEGER_LISTEN_HOST (default localhost)
# is the interface Jaeger listens on.
#
# Then run the agents with --otlp-endpoint 127.0.0.1:4317 --otlp-insecure
# (or OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317).
set -euo pipefail

version=v1.76.0
cache=${TPCOORD_CACHE:-$HOME/.cache/tpcoord}/jaeger-$version
bin=$cache/jaeger

build() {
  [ -x "$bin" ] && return 0
  command -v go >/dev/null 2>&1 || { echo "jaeger.sh: go is not installed" >&2; return 1; }
  echo "jaeger.sh: building Jaeger $version into $cache (about 7 minutes on 2 cores)" >&2
  local start=$SECONDS src dir
  export GOWORK=off
  dir=$(cd / && go mod download -json "github.com/jaegertracing/jaeger@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] && [ -d "$dir" ] || { echo "jaeger.sh: cannot download github.com/jaegertracing/jaeger@$version" >&2; return 1; }
  src=$(mktemp -d)
  trap 'rm -rf "$src"' RETURN
  cp -r "$dir/." "$src/"
  chmod -R u+w "$src"
  mkdir -p "$cache"
  (cd "$src" && go build -trimpath -o "$bin.tmp.$$" ./cmd/jaeger)
  mv "$bin.tmp.$$" "$bin"
  echo "jaeger.sh: built $bin in $((SECONDS - start))s" >&2
}

case "${1:-}" in
  --build)
    build
    echo "$bin"
    ;;
  "")
    build
    host=${JAEGER_LISTEN_HOST:-localhost}
    echo "jaeger.sh: Jaeger UI at http://$host:16686 (service \"tpcoord\"); OTLP gRPC $host:4317, HTTP $host:4318" >&2
    exec "$bin"
    ;;
  *)
    echo "usage: $0 [--build]" >&2
    exit 2
    ;;
esac
