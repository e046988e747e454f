#!/usr/bin/env bash
# Builds the tpcoord .deb and .rpm packages into dist/ with nfpm, pinned in
# scripts/package/go.mod (a module of its own, so nfpm's dependencies stay
# out of tpcoord's). What they install: scripts/package/nfpm.yaml and
# docs/operations.md ("Packages").
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/package.sh [--version V] [--arch ARCH] [--out DIR]
       scripts/package.sh --print-version [--version V]
       scripts/package.sh --prepare [--arch ARCH]
       scripts/package.sh --binary FILE [--version V] [--arch ARCH]

Builds tpcoord for linux/ARCH (-trimpath, CGO_ENABLED=0, the version and
commit stamped with -ldflags -X) and packages it as
  DIR/tpcoord_VERSION-1_DEBARCH.deb and DIR/tpcoord-VERSION-1.RPMARCH.rpm

Options:
  --version V      the version (default: git describe --tags --always --dirty),
                   mapped to a deb/rpm version (see below); the binary's
                   `tpcoord version` prints the mapped one
  --arch ARCH      amd64 (default), arm64, s390x or ppc64le (Go's names; the
                   deb/rpm names x86_64, aarch64, ppc64el are accepted too)
  --out DIR        where the packages go (default: dist/ in the repository)
  --print-version  print the package version and exit
  --prepare        only build nfpm and compile what the binary needs for ARCH,
                   so that a later run only links and packages (scripts/deps.sh)
  --binary FILE    only build the packages' tpcoord binary, stamped, to FILE
                   (scripts/image.sh puts it in the container image)
  -h, --help       show this help

Versions (V with or without a leading v; deb and rpm allow no "-" in it):
  v1.2.3                   1.2.3
  v1.2.3-rc.1              1.2.3~rc.1                (~ sorts before 1.2.3)
  v1.2.3-4-gabc1234        1.2.3+git4.abc1234        (4 commits after the tag)
  v1.2.3-4-gabc1234-dirty  1.2.3+git4.abc1234.dirty  (uncommitted changes)
  abc1234 (no tag yet)     0.0.0~git20261201210104.abc1234  (UTC commit time)
EOF
}

root=$(cd "$(dirname "$0")/.." && pwd)
say() { printf 'package.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }

# pkgversion RAW: RAW (a tag, or git describe of one) as a deb/rpm version.
pkgversion() {
  local v=${1#v} pre="" meta=()
  if [[ $v == *-dirty ]]; then v=${v%-dirty}; meta+=(dirty); fi
  if [[ $v =~ ^(.+)-([0-9]+)-g([0-9a-f]+)$ ]]; then
    v=${BASH_REMATCH[1]}
    meta=("git${BASH_REMATCH[2]}.${BASH_REMATCH[3]}" "${meta[@]}")
  fi
  if [[ $v =~ ^([0-9]+(\.[0-9]+)*)-(.+)$ ]]; then
    v=${BASH_REMATCH[1]} pre=${BASH_REMATCH[3]//-/.}
  fi
  local out=$v
  [ -z "$pre" ] || out+="~$pre"
  [ ${#meta[@]} -eq 0 ] || out+="+$(IFS=.; echo "${meta[*]}")"
  [[ $v =~ ^[0-9]+(\.[0-9]+)*$ && $out =~ ^[0-9][0-9A-Za-z.+~]*$ ]] ||
    die "version: \"$1\" is not X.Y.Z, X.Y.Z-PRERELEASE (with or without a leading v) or git describe of such a tag"
  echo "$out"
}

# gitversion: the package version of the checkout; $dirty must be set.
gitversion() {
  local desc
  desc=$(git -C "$root" describe --tags --always)
  if git -C "$root" describe --tags >/dev/null 2>&1; then
    pkgversion "$desc$([ "$dirty" = false ] || echo -dirty)"
    return
  fi
  # No tag yet: a snapshot that sorts by commit time, before any release.
  local ts
  ts=$(TZ=UTC git -C "$root" log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S)
  echo "0.0.0~git$ts.$desc$([ "$dirty" = false ] || echo .dirty)"
}

# build DEST [TAG]: tpcoord for linux/$goarch, stamped (internal/buildinfo);
# with TAG agentonly, its agent-only build (tpcoord-agent, which launch
# starts for its ranks).
build() {
  local bi=github.com/tpcoord/tpcoord/internal/buildinfo
  local ldflags="-X $bi.version=$pkgver"
  [ -z "$commit" ] || ldflags+=" -X $bi.commit=$commit -X $bi.modified=$dirty"
  say "building $(basename "$1") $pkgver for linux/$goarch"
  # CGO_ENABLED=0: a static binary, the same whatever the distribution's
  # libc; -buildvcs=false: the commit is stamped above, and a checkout git
  # refuses to read (safe.directory) must not fail the build; grpcnotrace:
  # gRPC without golang.org/x/net/trace, which tpcoord never turns on and
  # whose templates keep the linker from pruning unused methods (the
  # agent-only build is 6 MB smaller for it: docs/operations.md).
  (cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH=$goarch \
    go build -trimpath -buildvcs=false -tags "grpcnotrace${2:+,$2}" -ldflags "$ldflags" -o "$1" ./cmd/tpcoord)
}

# tracked DIR: the files of DIR to ship (git's list in a checkout).
tracked() {
  if [ -n "$commit" ]; then
    git -C "$root" ls-files -- "$1"
  else
    (cd "$root" && find "$1" -type f ! -path '*/__pycache__/*' ! -name '*.pyc')
  fi
}

# runtime_only: the paths on stdin, less the workers' tests (test_*.py)
# and the helpers only they import (testlib.py, agentlib.py), as
# package/not-shipped.ere lists them (scripts/image.sh reads it too): the
# package ships what worker.py runs, and its README.
runtime_only() {
  grep -v -E -f "$root/scripts/package/not-shipped.ere" || true
}

# stage S: lay out under S what the packages install, as on the host.
stage() {
  local s=$1 u f
  build "$s/usr/bin/tpcoord"
  build "$s/usr/bin/tpcoord-agent" agentonly
  # The units name the binary where scripts/install.sh puts it.
  mkdir -p "$s/usr/lib/systemd/system"
  for u in tpcoord@.service tpcoord.target tpcoord-nats.service tpcoord-gateway.service tpcoord-model@.service; do
    sed 's#/usr/local/bin/tpcoord#/usr/bin/tpcoord#g' "$root/configs/systemd/$u" >"$s/usr/lib/systemd/system/$u"
  done
  install -D -m 0640 "$root/configs/agent.example.yaml" "$s/etc/tpcoord/agent.yaml"
  install -D -m 0640 "$root/configs/systemd/tpcoord.env" "$s/etc/tpcoord/tpcoord.env"
  install -D -m 0640 "$root/configs/systemd/gateway.env" "$s/etc/tpcoord/gateway.env"
  install -D -m 0640 "$root/configs/nats/nats-server.conf" "$s/etc/tpcoord/nats-server.conf"
  install -D -m 0644 "$root/configs/systemd/README.md" "$s/usr/share/tpcoord/README.md"
  tracked configs/systemd/examples | while read -r f; do
    install -D -m 0644 "$root/$f" "$s/usr/share/tpcoord/${f#configs/systemd/}"
  done
  { tracked examples/worker; tracked examples/torch-worker; } | runtime_only | while read -r f; do
    install -D -m 0644 "$root/$f" "$s/usr/share/tpcoord/${f#examples/}"
  done
  chmod 0755 "$s/usr/share/tpcoord/worker/worker.py" "$s/usr/share/tpcoord/torch-worker/worker.py"
  # A cluster's CA and per-host certificates (the three-node example's TLS).
  install -D -m 0755 "$root/scripts/nats-certs.sh" "$s/usr/share/tpcoord/nats-certs.sh"
  install -D -m 0644 "$root/README.md" "$s/usr/share/doc/tpcoord/README.md"
  install -D -m 0644 "$root/docs/operations.md" "$s/usr/share/doc/tpcoord/operations.md"
}

# nfpm runs the pinned nfpm (built once, then cached by the go command).
nfpm() { (cd "$root/scripts/package" && go tool nfpm "$@"); }

version="" version_set=false arch=amd64 out=$root/dist print=false prepare=false binary=""
while [ $# -gt 0 ]; do
  case "$1" in
    --version) [ $# -ge 2 ] || die "--version needs a value"; version=$2 version_set=true; shift 2 ;;
    --version=*) version=${1#*=} version_set=true; shift ;;
    --arch) [ $# -ge 2 ] || die "--arch needs a value"; arch=$2; shift 2 ;;
    --arch=*) arch=${1#*=}; shift ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
    --out=*) out=${1#*=}; shift ;;
    --print-version) print=true; shift ;;
    --prepare) prepare=true; shift ;;
    --binary) [ $# -ge 2 ] || die "--binary needs a file"; binary=$2; shift 2 ;;
    --binary=*) binary=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

case "$arch" in
  amd64|x86_64) goarch=amd64 ;;
  arm64|aarch64) goarch=arm64 ;;
  s390x) goarch=s390x ;;
  ppc64le|ppc64el) goarch=ppc64le ;;
  *) die "arch: \"$arch\" is not one of amd64, arm64, s390x, ppc64le" ;;
esac

if $prepare; then
  nfpm --version >/dev/null
  pkgver=prepare commit=""
  build /dev/null
  exit 0
fi

commit="" dirty=""
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  commit=$(git -C "$root" rev-parse HEAD)
  git -C "$root" update-index -q --refresh >/dev/null 2>&1 || true
  if git -C "$root" diff-index --quiet HEAD --; then dirty=false; else dirty=true; fi
fi
if $version_set; then
  pkgver=$(pkgversion "$version")
elif [ -n "$commit" ]; then
  pkgver=$(gitversion)
else
  die "$root is not a git checkout: give --version"
fi
if $print; then
  echo "$pkgver"
  exit 0
fi
if [ -n "$binary" ]; then
  build "$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")"
  exit 0
fi

# Reproducible: the packages' file times are the commit's.
if [ -z "${SOURCE_DATE_EPOCH:-}" ] && [ -n "$commit" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct)
  export SOURCE_DATE_EPOCH
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stage "$tmp"
mkdir -p "$out"
out=$(cd "$out" && pwd)
export TPC_PKG_STAGE=$tmp TPC_PKG_ARCH=$goarch TPC_PKG_VERSION=$pkgver
export TPC_PKG_MAINTAINER=${TPC_PKG_MAINTAINER:-tpcoord maintainers}
for p in deb rpm; do
  nfpm package --config nfpm.yaml --packager "$p" --target "$out/" >&2
done
