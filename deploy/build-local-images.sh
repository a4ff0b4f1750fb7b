#!/usr/bin/env bash
# Local stand-ins for the official base images that docker-compose.yml uses by default, for hosts
# that cannot reach Docker Hub: a Debian base made with debootstrap (from this host's own Debian
# mirror), then a Python, a ZooKeeper and a Prometheus image on it, each from Debian's packages and
# honouring the part of the official image's interface that the compose file uses.
#
#   sudo deploy/build-local-images.sh        # needs root (debootstrap), docker and debootstrap
#   source deploy/local-images.env           # then: docker-compose -f deploy/docker-compose.yml ...
#
# Idempotent: an image that exists is not built again (FORCE=1 rebuilds them all).
set -euo pipefail
cd "$(dirname "$0")"

SUITE=bookworm
BASE=pybk-local/debian:$SUITE
FORCE=${FORCE:-0}

have() { [ "$FORCE" = 0 ] && docker image inspect "$1" >/dev/null 2>&1; }

# The mirror this host installs its own packages from (never a hard-coded one).
mirror() {
  local uri
  uri=$(grep -hE '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' \
        | grep -v security | head -n 1 || true)
  [ -n "$uri" ] || uri=$(grep -hE '^\s*deb\s' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -n 1 || true)
  [ -n "$uri" ] || { echo "no Debian mirror found in /etc/apt: cannot debootstrap" >&2; exit 1; }
  echo "$uri"
}

if ! have "$BASE"; then
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  echo "debootstrap $SUITE (minbase) from $(mirror) ..."
  debootstrap --variant=minbase "$SUITE" "$root" "$(mirror)" >/dev/null
  cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/" 2>/dev/null || true
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
  rm -rf "$root"
  trap - EXIT
fi

build() {  # build IMAGE DOCKERFILE
  if have "$1"; then echo "$1: present"; return; fi
  echo "building $1 ..."
  docker build -q --build-arg "BASE=$BASE" -t "$1" -f "local-images/$2" local-images >/dev/null
}
build pybk-local/python:3.11-slim python.Dockerfile
build pybk-local/zookeeper:3.9 zookeeper.Dockerfile
build pybk-local/prometheus:v3 prometheus.Dockerfile
echo "done: source deploy/local-images.env before docker-compose"
