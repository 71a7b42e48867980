#!/usr/bin/env bash
# Builds the sandguard OCI image from this repository, offline: FROM scratch, the binary and
# the exact shared libraries `ldd` says it links, nothing pulled from any registry.
#
#   packaging/container/build.sh [--binary PATH] [--tag NAME]
#
#   --binary PATH  the sandguard executable to put in the image (default: the release build,
#                  target/release/sandguard, made first with `cargo build --release --locked`,
#                  which does nothing when it is up to date). For a static binary ldd
#                  names no library, and none is copied.
#   --tag NAME     the image's name (default: sandguard:VERSION, VERSION as `sandguard
#                  --version` says it); name it for your registry to push it, e.g.
#                  `--tag registry.example.com/sandguard:0.1.0` (the manifests' name).
#
# Prints the image's name on stdout once it is built; docker's output goes to stderr. The
# image is labelled with the OCI annotations for its version and source commit, taken from
# `sandguard --version`. DOCKER=podman (or another docker-compatible CLI) may stand in for
# docker; only docker is tested (tests/cli/image.rs). Why this shape: packaging/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

log() { printf 'packaging/container/build.sh: %s\n' "$*" >&2; }
help() { sed -n '5,13p' "$0" | sed 's/^# \{0,1\}//'; }
usage() { help >&2; exit 2; }

binary=
tag=
while [ $# -gt 0 ]; do
  case $1 in
    --binary) [ $# -ge 2 ] || usage; binary=$2; shift 2 ;;
    --tag) [ $# -ge 2 ] || usage; tag=$2; shift 2 ;;
    -h|--help) help; exit 0 ;;
    *) log "unknown argument: $1"; usage ;;
  esac
done
docker=${DOCKER:-docker}

if [ -z "$binary" ]; then
  log "cargo build --release --locked --bin sandguard"
  cargo build --release --locked --bin sandguard >&2
  binary=${CARGO_TARGET_DIR:-target}/release/sandguard
fi
[ -x "$binary" ] || { log "$binary is not an executable"; exit 1; }
version=$("$binary" --version) # e.g. "sandguard 0.1.0 (651cc36b3d6b)"
number=$(awk '{ print $2 }' <<<"$version")
commit=$(sed -n 's/.*(\([0-9a-f]*\)).*/\1/p' <<<"$version")
tag=${tag:-sandguard:$number}

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
root=$context/rootfs
mkdir -p "$root/usr/local/bin" "$root/etc" "$root/var/lib/sandguard" "$root/root" "$root/tmp"
chmod 1777 "$root/tmp"
chmod 0700 "$root/root"
cp "$binary" "$root/usr/local/bin/sandguard"

# The libraries, at the paths ldd resolved them to (the loader at the path the binary names
# as its interpreter). linux-vdso is the kernel's and has no file. A static binary: none.
if libs=$(ldd "$binary" 2>/dev/null); then
  while read -r path; do
    mkdir -p "$root$(dirname "$path")"
    cp -L "$path" "$root$path"
    log "library $path"
  done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$libs")
else
  log "$binary links no shared library (ldd: not a dynamic executable)"
fi

# glibc's getaddrinfo reads these: /etc/hosts first (Kubernetes' hostAliases, docker's
# --add-host), then DNS from /etc/resolv.conf, both of which the runtime mounts in. The
# files and dns lookups are built into libc.so.6 (glibc >= 2.34), so no NSS module is copied.
printf 'hosts: files dns\npasswd: files\ngroup: files\n' >"$root/etc/nsswitch.conf"
# A user name for uid 0 and for the conventional unprivileged uid 65532 (runAsUser).
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"

cp packaging/container/Containerfile "$context/Containerfile"
# The legacy builder when buildx is missing (docker >= 23 refuses BuildKit without it); with
# buildx, docker's default builder. The Containerfile needs nothing either lacks.
if [ "$docker" = docker ] && ! docker buildx version >/dev/null 2>&1; then
  export DOCKER_BUILDKIT=0
fi
log "building $tag from $binary ($version)"
"$docker" build --quiet --file "$context/Containerfile" --tag "$tag" \
  --label "org.opencontainers.image.title=sandguard" \
  --label "org.opencontainers.image.version=$number" \
  --label "org.opencontainers.image.revision=$commit" \
  --label "org.opencontainers.image.licenses=Apache-2.0" \
  "$context" >&2
echo "$tag"
