#!/bin/sh
# Build a Debian 12 (bookworm) base image from Debian's packages, for hosts that cannot pull an image
# from a registry (the Dockerfile's default base is python:3.11-slim-bookworm):
#
#     deploy/container/build-base.sh [--systemd] NAME
#
# NAME gets a minimal Debian with Python 3.11, venv and pip (`python` and `pip` on PATH, as in the
# python images) and CA certificates.  --systemd adds systemd and systemd-sysv (an image that boots
# /sbin/init).  Then:  docker|podman build --build-arg BASE_IMAGE=NAME ...
#
# Needs root and debootstrap (installed with apt-get when missing), and the engine in CONTAINER_ENGINE
# (default: podman if installed, else docker); podman reads CONTAINERS_CONF (default
# deploy/container/containers.conf).  The Debian mirror is DEBIAN_MIRROR, else the first one
# in this host's apt sources, else http://deb.debian.org/debian.  Takes about a minute.
set -eu

systemd=0
if [ "${1:-}" = "--systemd" ]; then
    systemd=1
    shift
fi
if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 [--systemd] NAME" >&2
    exit 2
fi
name=$1

if [ "$(id -u)" != 0 ]; then
    echo "$0: debootstrap needs root" >&2
    exit 1
fi
engine=${CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
    if command -v podman >/dev/null 2>&1; then engine=podman; else engine=docker; fi
fi
command -v "$engine" >/dev/null 2>&1 || { echo "$0: no container engine ($engine) found" >&2; exit 1; }
if [ "$engine" = podman ]; then
    CONTAINERS_CONF=${CONTAINERS_CONF:-$(cd "$(dirname "$0")" && pwd)/containers.conf}
    export CONTAINERS_CONF
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    echo "installing debootstrap (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q -o DPkg::Lock::Timeout=300 debootstrap >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q -o DPkg::Lock::Timeout=300 debootstrap >/dev/null; }
fi

mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
    mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n 1)
fi
if [ -z "$mirror" ]; then
    mirror=$(sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) bookworm .*/\2/p' /etc/apt/sources.list 2>/dev/null | head -n 1)
fi
mirror=${mirror:-http://deb.debian.org/debian}

packages=python3,python3-venv,python3-pip,python-is-python3,ca-certificates
if [ "$systemd" = 1 ]; then
    packages=$packages,systemd,systemd-sysv,dbus
fi

rootfs=$(mktemp -d /tmp/tidb-binlog-base.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT INT TERM
echo "debootstrap bookworm from $mirror into $rootfs (packages: $packages)" >&2
debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" >&2
# what a python image has: pip on PATH as `pip`; apt lists are not kept in an image
ln -sf pip3 "$rootfs/usr/bin/pip"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
tar -C "$rootfs" -c . | "$engine" import --change 'CMD ["/bin/bash"]' - "$name" >/dev/null
echo "built $name with $engine" >&2
