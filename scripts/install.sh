#!/usr/bin/env bash
# Installs tpcoord for systemd: the binary, the units and a configuration
# skeleton, and creates the tpcoord system user. Idempotent: the binary, the
# units and the examples are replaced; files in /etc/tpcoord are never
# overwritten. See configs/systemd/README.md and docs/operations.md.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/install.sh [--binary PATH] [--prefix DIR]

Installs:
  /usr/local/bin/tpcoord                 the binary (built with go build unless --binary)
  /usr/local/bin/tpcoord-agent           its agent-only build, which launch's ranks run
                                         (with --binary: PATH-agent, if there is one)
  /etc/systemd/system/tpcoord@.service   one TP rank per instance (tpcoord@0.service, ...)
  /etc/systemd/system/tpcoord.target     every rank of this node
  /etc/systemd/system/tpcoord-nats.service
  /etc/systemd/system/tpcoord-gateway.service   the HTTP API (tpcoord serve)
  /etc/tpcoord/{agent.yaml,tpcoord.env,gateway.env,nats-server.conf}   only if missing
  /usr/local/share/tpcoord/              README.md and examples/ (the three-host layout)
and creates the tpcoord system user and group if missing, then runs
systemctl daemon-reload. Enabling and starting units is left to you.

Options:
  --binary PATH  install this tpcoord binary instead of building one (and
                 PATH-agent, its agent-only build, if there is one)
  --prefix DIR   dry install: put every file under DIR (DIR/usr/local/bin/...,
                 DIR/etc/...), create no user, leave ownership and systemd alone
  -h, --help     show this help
EOF
}

root=$(cd "$(dirname "$0")/.." && pwd)
prefix="" binary=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a directory" >&2; exit 2; }; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --binary) [ $# -ge 2 ] || { echo "install.sh: --binary needs a path" >&2; exit 2; }; binary=$2; shift 2 ;;
    --binary=*) binary=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$prefix" ]; then
  mkdir -p "$prefix"
  prefix=$(cd "$prefix" && pwd)
elif [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root, or use --prefix DIR for a dry install" >&2
  exit 1
fi

bindir=$prefix/usr/local/bin
unitdir=$prefix/etc/systemd/system
confdir=$prefix/etc/tpcoord
sharedir=$prefix/usr/local/share/tpcoord

say() { printf 'install.sh: %s\n' "$*"; }

# replace SRC DEST MODE: install SRC over DEST (atomically, so a running
# binary is not overwritten in place).
replace() {
  if [ -f "$2" ] && cmp -s "$1" "$2"; then
    say "unchanged $2"
    return
  fi
  install -D -m "$3" "$1" "$2.new"
  mv -f "$2.new" "$2"
  say "installed $2"
}

# keep SRC DEST: install SRC as DEST only if DEST does not exist. Config
# may hold secrets: 0640, group tpcoord (on a real install).
keep() {
  if [ -e "$2" ]; then
    say "kept existing $2"
    return
  fi
  install -D -m 0640 "$1" "$2"
  [ -n "$prefix" ] || chgrp tpcoord "$2"
  say "created $2"
}

# The user first: config files are given to its group.
if [ -z "$prefix" ]; then
  if getent passwd tpcoord >/dev/null; then
    say "user tpcoord exists"
  else
    useradd --system --user-group --home-dir /var/lib/tpcoord --no-create-home \
      --shell /usr/sbin/nologin --comment "tpcoord agent" tpcoord
    say "created system user tpcoord"
  fi
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$binary" ]; then
  command -v go >/dev/null 2>&1 || { echo "install.sh: go is not installed; build tpcoord elsewhere and pass --binary" >&2; exit 1; }
  ver=$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)
  # The version and commit `tpcoord version` prints (internal/buildinfo).
  bi=github.com/tpcoord/tpcoord/internal/buildinfo
  ldflags="-X $bi.version=$ver"
  if commit=$(git -C "$root" rev-parse HEAD 2>/dev/null); then
    ldflags+=" -X $bi.commit=$commit -X $bi.modified=$([[ $ver == *-dirty ]] && echo true || echo false)"
  fi
  say "building tpcoord $ver and its agent-only build, tpcoord-agent"
  # grpcnotrace: gRPC without golang.org/x/net/trace (scripts/package.sh).
  (cd "$root" && go build -trimpath -buildvcs=false -tags grpcnotrace -ldflags "$ldflags" -o "$tmp/tpcoord" ./cmd/tpcoord &&
    go build -trimpath -buildvcs=false -tags grpcnotrace,agentonly -ldflags "$ldflags" -o "$tmp/tpcoord-agent" ./cmd/tpcoord)
  binary=$tmp/tpcoord
fi
[ -x "$binary" ] || { echo "install.sh: $binary is not an executable" >&2; exit 1; }
replace "$binary" "$bindir/tpcoord" 0755
# launch's ranks run the agent-only build beside tpcoord if it is the same
# build; an older one left there would only be skipped, with a warning.
if [ -x "$binary-agent" ]; then
  replace "$binary-agent" "$bindir/tpcoord-agent" 0755
elif [ -e "$bindir/tpcoord-agent" ]; then
  rm -f "$bindir/tpcoord-agent"
  say "removed $bindir/tpcoord-agent: $binary has no agent-only build beside it"
fi

for u in tpcoord@.service tpcoord.target tpcoord-nats.service tpcoord-gateway.service; do
  replace "$root/configs/systemd/$u" "$unitdir/$u" 0644
done

install -d -m 0750 "$confdir"
[ -n "$prefix" ] || chgrp tpcoord "$confdir"
keep "$root/configs/agent.example.yaml" "$confdir/agent.yaml"
keep "$root/configs/systemd/tpcoord.env" "$confdir/tpcoord.env"
keep "$root/configs/systemd/gateway.env" "$confdir/gateway.env"
keep "$root/configs/nats/nats-server.conf" "$confdir/nats-server.conf"

(cd "$root/configs/systemd" && { echo README.md; find examples -type f | sort; }) | while read -r f; do
  replace "$root/configs/systemd/$f" "$sharedir/$f" 0644
done

if [ -z "$prefix" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  say "systemctl daemon-reload done"
fi
cat <<EOF
install.sh: done. Next: edit $confdir/tpcoord.env (and rank-N.env per rank), then
  systemctl enable --now tpcoord.target tpcoord@0.service tpcoord@1.service ...
See docs/operations.md ("Running under systemd").
EOF
