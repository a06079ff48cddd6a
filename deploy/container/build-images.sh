#!/bin/sh
# Build the two images of docker-compose.yml from the Dockerfile (`make image` runs this):
#
#     deploy/container/build-images.sh [--if-missing]
#
#   tidb-binlog-py:latest       the default target: every command of the project (IMAGE)
#   tidb-binlog-mariadb:latest  target mariadb: Debian's mariadb-server, the cluster's downstream (MARIADB_IMAGE)
#
# --if-missing builds only the images that do not exist yet (the compose test's set-up); otherwise both
# are (re)built, which the engine's layer cache makes quick when nothing changed.
#
# The base: BASE_IMAGE when set (used as given: pulled if missing, no fallback).  Otherwise the
# Dockerfile's default python:3.11-slim-bookworm when it is present or can be pulled within PULL_TIMEOUT
# seconds (default 60); else the image LOCAL_BASE (default tidb-binlog-base:bookworm), which
# deploy/container/build-base.sh builds from Debian's packages when it does not exist yet (root and
# debootstrap needed; about a minute).  Once built, LOCAL_BASE is used without trying the registry
# again; `BASE_IMAGE=python:3.11-slim-bookworm make image` goes back to the official image.
#
# CONTAINER_ENGINE: podman or docker (default: podman when installed, else docker).  Every podman call
# reads CONTAINERS_CONF (default deploy/container/containers.conf: runc, cgroupfs, no default ulimits).
#
# HOST_CA_CERTS: a host directory of CA certificates holding ca-certificates.crt, mounted read-only at
# /run/host-ca during the build (not over /etc/ssl/certs: the JRE's ca-certificates-java writes its
# keystore there), with pip and apt pointed at that bundle (PIP_CERT): for hosts behind a
# TLS-intercepting proxy.  podman (buildah) only: docker build mounts no host directory.  Default: the
# host's /etc/ssl/certs when the engine is podman and it holds ca-certificates.crt; set it empty for none.
#
# EXTRAS: the image's extras (default playground,kafka; playground,kafka,spark adds PySpark and a JRE).
#
# GIT_HASH: the commit `<command> -V` names in the image (default: git rev-parse HEAD of this checkout,
# else "unknown"); the Dockerfile's build context has no .git.
#
# BUILD_NETWORK: the network of the build's RUN steps (default host: the host's resolver, which a
# loopback-only or private DNS server on the host may be; empty: the engine's default).
set -eu

root=$(cd "$(dirname "$0")/../.." && pwd)
if_missing=0
if [ "${1:-}" = "--if-missing" ]; then
    if_missing=1
    shift
fi
if [ $# -ne 0 ]; then
    echo "usage: $0 [--if-missing]" >&2
    exit 2
fi

engine=${CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
    if command -v podman >/dev/null 2>&1; then engine=podman; else engine=docker; fi
fi
command -v "$engine" >/dev/null 2>&1 || { echo "$0: no container engine ($engine) found" >&2; exit 1; }
if [ "$engine" = podman ]; then
    CONTAINERS_CONF=${CONTAINERS_CONF:-$root/deploy/container/containers.conf}
    export CONTAINERS_CONF
fi

image=${IMAGE:-tidb-binlog-py:latest}
mariadb_image=${MARIADB_IMAGE:-tidb-binlog-mariadb:latest}
default_base=python:3.11-slim-bookworm
local_base=${LOCAL_BASE:-tidb-binlog-base:bookworm}
pull_timeout=${PULL_TIMEOUT:-60}
extras=${EXTRAS:-playground,kafka}

exists() {
    "$engine" image inspect "$1" >/dev/null 2>&1
}

# podman resolves no short name without a registries.conf search list: name docker.io's images in full
qualified() {
    if [ "$engine" != podman ]; then
        echo "$1"
        return
    fi
    case "$1" in
        */*)
            case "${1%%/*}" in
                *.* | *:* | localhost) echo "$1" ;;
                *) echo "docker.io/$1" ;;
            esac
            ;;
        *) echo "docker.io/library/$1" ;;
    esac
}

local_ref() {
    case "$engine:$1" in
        podman:*/*) echo "$1" ;;
        podman:*) echo "localhost/$1" ;;
        *) echo "$1" ;;
    esac
}

if [ "$if_missing" = 1 ] && exists "$image" && exists "$mariadb_image"; then
    echo "images $image and $mariadb_image exist"
    exit 0
fi

started=$(date +%s)
if [ -n "${BASE_IMAGE:-}" ]; then
    base=$(qualified "$BASE_IMAGE")
    exists "$base" || "$engine" pull "$base"
elif exists "$(qualified "$default_base")"; then
    base=$(qualified "$default_base")
elif exists "$(local_ref "$local_base")"; then
    base=$(local_ref "$local_base")
    echo "using the local base $base (built earlier from Debian packages)"
elif timeout "$pull_timeout" "$engine" pull "$(qualified "$default_base")" >/dev/null 2>&1; then
    base=$(qualified "$default_base")
else
    echo "cannot pull $default_base: building the base $local_base from Debian packages"
    CONTAINER_ENGINE=$engine "${BUILD_BASE:-$root/deploy/container/build-base.sh}" "$local_base"
    base=$(local_ref "$local_base")
fi
echo "base image: $base ($(($(date +%s) - started))s)"

ca=${HOST_CA_CERTS-}
if [ -z "${HOST_CA_CERTS+set}" ] && [ "$engine" = podman ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    ca=/etc/ssl/certs
fi
git_hash=${GIT_HASH:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
set -- --build-arg "BASE_IMAGE=$base" --build-arg "EXTRAS=$extras" --build-arg "GIT_HASH=$git_hash"
# podman writes OCI images unless told otherwise, and OCI has no HEALTHCHECK: keep the image's checks
if [ "$engine" = podman ]; then
    set -- "$@" --format docker
fi
# RUN steps on the host's network: its resolver and routes, whatever podman's default bridge does there
if [ -n "${BUILD_NETWORK-host}" ]; then
    set -- "$@" --network "${BUILD_NETWORK-host}"
fi
if [ -n "$ca" ]; then
    [ -f "$ca/ca-certificates.crt" ] || { echo "$0: HOST_CA_CERTS=$ca holds no ca-certificates.crt" >&2; exit 1; }
    set -- "$@" -v "$ca:/run/host-ca:ro" --build-arg PIP_CERT=/run/host-ca/ca-certificates.crt
    echo "build with the host's CA certificates ($ca)"
fi

for target in runtime mariadb; do
    if [ "$target" = runtime ]; then name=$image; else name=$mariadb_image; fi
    if [ "$if_missing" = 1 ] && exists "$name"; then
        continue
    fi
    started=$(date +%s)
    "$engine" build "$@" --target "$target" -t "$name" -f "$root/Dockerfile" "$root"
    echo "built $name ($(($(date +%s) - started))s)"
done
