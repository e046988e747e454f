#!/usr/bin/env bash
# Builds tpcoord's container images offline, with Debian's buildah (or
# podman build): no registry is pulled from. What they hold:
# configs/container/ and docs/operations.md ("Containers").
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/image.sh [--tag NAME] [--arch ARCH] [--version V] [--save FILE]
       scripts/image.sh --torch-worker [--tag NAME] [--base-tar FILE] [--save FILE]

Without --torch-worker: the tpcoord image (configs/container/Containerfile),
FROM scratch: the packages' static binary (scripts/package.sh --binary),
run as user 65532; default tag localhost/tpcoord:VERSION and :latest.

With --torch-worker: tpcoord and the PyTorch worker on Debian bookworm's
python3-torch (configs/container/Containerfile.torch-worker); default tag
localhost/tpcoord-torch-worker:VERSION and :latest. Its base,
localhost/tpcoord-torch-base:bookworm, is imported from a root file system
that mmdebstrap builds from Debian's mirror (several minutes and about
1.5 GB of downloads the first time) unless the image exists already.

Options:
  --tag NAME       the image's name (the version and latest tags are added)
  --arch ARCH      amd64 (default), arm64, s390x or ppc64le (tpcoord image)
  --version V      the version stamped and tagged (default: as package.sh)
  --save FILE      also write the image to FILE as an OCI archive
                   (podman load, ctr import, kind load image-archive)
  --base-tar FILE  torch worker: import this mmdebstrap tarball as the base
                   instead of building one (kept: it is the slow part)
  -h, --help       show this help

The images' storage is buildah's and podman's default; set
CONTAINERS_STORAGE_CONF to use another (e2e/container_test.go does).
EOF
}

root=$(cd "$(dirname "$0")/.." && pwd)
say() { printf 'image.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }

# build CONTEXT CONTAINERFILE TAG...: the image, with buildah if installed.
build() {
  local ctx=$1 file=$2 tags=()
  shift 2
  for t in "$@"; do tags+=(--tag "$t"); done
  if command -v buildah >/dev/null 2>&1; then
    buildah bud --layers=false --arch "$goarch" -f "$file" "${tags[@]}" "$ctx"
  elif command -v podman >/dev/null 2>&1; then
    podman build --layers=false --arch "$goarch" -f "$file" "${tags[@]}" "$ctx"
  else
    die "neither buildah nor podman is installed (Debian: apt-get install buildah)"
  fi
}

# save TAG FILE: the image as an OCI archive.
save() {
  rm -f "$2"
  if command -v buildah >/dev/null 2>&1; then
    buildah push "$1" "oci-archive:$2:$1"
  else
    podman save --format oci-archive -o "$2" "$1"
  fi
}

# torch_base [TARBALL]: localhost/tpcoord-torch-base:bookworm, from TARBALL
# or a root file system mmdebstrap builds now.
torch_base() {
  local base=localhost/tpcoord-torch-base:bookworm tar=${1:-}
  if [ -z "$tar" ] && buildah inspect --type image "$base" >/dev/null 2>&1; then
    say "using $base"
    return
  fi
  if [ -z "$tar" ]; then
    command -v mmdebstrap >/dev/null 2>&1 || die "mmdebstrap is not installed (Debian: apt-get install mmdebstrap)"
    tar=$tmp/torch-base.tar
    say "building the base with mmdebstrap (python3-torch, python3-numpy) into $tar"
    # The user the image runs as; docs, man pages and locales left out.
    mmdebstrap --variant=essential --include=python3-torch,python3-numpy \
      --aptopt='Acquire::Check-Valid-Until "false"' \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      --customize-hook='echo "nonroot:x:65532:65532:nonroot:/tmp:/usr/sbin/nologin" >>"$1/etc/passwd"' \
      --customize-hook='echo "nonroot:x:65532:" >>"$1/etc/group"' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
      bookworm "$tar" \
      "deb http://deb.debian.org/debian bookworm main" \
      "deb http://deb.debian.org/debian bookworm-updates main" \
      "deb http://deb.debian.org/debian-security bookworm-security main"
  fi
  say "importing $tar as $base"
  local ctr
  ctr=$(buildah from scratch)
  buildah add "$ctr" "$tar" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  buildah commit --rm "$ctr" "$base" >/dev/null
}

tag="" arch=amd64 version=() savefile="" torch=false basetar=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) [ $# -ge 2 ] || die "--tag needs a name"; tag=$2; shift 2 ;;
    --arch) [ $# -ge 2 ] || die "--arch needs a value"; arch=$2; shift 2 ;;
    --version) [ $# -ge 2 ] || die "--version needs a value"; version=(--version "$2"); shift 2 ;;
    --save) [ $# -ge 2 ] || die "--save needs a file"; savefile=$2; shift 2 ;;
    --torch-worker) torch=true; shift ;;
    --base-tar) [ $# -ge 2 ] || die "--base-tar needs a file"; basetar=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
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
if $torch && [ "$goarch" != "$(go env GOARCH)" ]; then
  die "--torch-worker builds for this machine's architecture only"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ver=$("$root/scripts/package.sh" --print-version "${version[@]}")
# An image tag allows no "+" or "~".
tagver=$(printf '%s' "$ver" | tr '+~' '--')
ctx=$tmp/context
mkdir -p "$ctx"
"$root/scripts/package.sh" --binary "$ctx/tpcoord" --arch "$goarch" "${version[@]}"
if $torch; then
  tag=${tag:-localhost/tpcoord-torch-worker}
  mkdir -p "$ctx/torch-worker"
  # What worker.py runs and its README; the tests stay out, as in the packages.
  git -C "$root" ls-files examples/torch-worker | grep -v -E -f "$root/scripts/package/not-shipped.ere" |
    while read -r f; do install -m 0644 "$root/$f" "$ctx/torch-worker/"; done
  torch_base "$basetar"
  build "$ctx" "$root/configs/container/Containerfile.torch-worker" "$tag:$tagver" "$tag:latest"
else
  tag=${tag:-localhost/tpcoord}
  cp -a "$root/configs/container/rootfs" "$ctx/rootfs"
  # git keeps no empty directory, nor its mode.
  install -d -m 1777 "$ctx/rootfs/tmp"
  build "$ctx" "$root/configs/container/Containerfile" "$tag:$tagver" "$tag:latest"
fi
if [ -n "$savefile" ]; then
  save "$tag:$tagver" "$savefile"
fi
say "built $tag:$tagver"
