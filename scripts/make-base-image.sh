#!/usr/bin/env bash
# Build the local base image xlarun-base:bookworm (Debian bookworm minbase with python3, venv, pip,
# ca-certificates) with debootstrap + `docker import`, for machines that cannot pull python:3.11-slim.
# Skips when the image exists. The rootfs tarball is cached, so a second machine run (CI on the same
# host, or after `docker image rm`) only re-imports it (seconds).
# Environment: XLARUN_BASE_IMAGE (default xlarun-base:bookworm), XLARUN_CACHE_DIR
# (default ${XDG_CACHE_HOME:-$HOME/.cache}/xlarun), DEBIAN_MIRROR (default: the URIs: line of
# /etc/apt/sources.list.d/*, else http://deb.debian.org/debian). Needs root (debootstrap).
set -euo pipefail

image=${XLARUN_BASE_IMAGE:-xlarun-base:bookworm}
suite=bookworm
packages=python3,python3-venv,python3-pip,ca-certificates
cache_dir=${XLARUN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/xlarun}
tarball=$cache_dir/rootfs-$suite-minbase-python3.tar

if docker image inspect "$image" >/dev/null 2>&1; then
    echo "$image exists"
    exit 0
fi

pick_mirror() {
    local uri
    for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list; do
        [ -f "$f" ] || continue
        # deb822 files: "URIs: http://deb.debian.org/debian"; one-line files: "deb http://... bookworm main"
        uri=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ {print $2; exit}
                   /^deb / && $2 ~ /debian\/?$/ {print $2; exit}' "$f")
        if [ -n "$uri" ]; then echo "$uri"; return; fi
    done
    echo http://deb.debian.org/debian
}

if [ ! -s "$tarball" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "debootstrap needs root: sudo $0" >&2
        exit 1
    fi
    command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 1; }
    mirror=${DEBIAN_MIRROR:-$(pick_mirror)}
    mkdir -p "$cache_dir"
    rootfs=$(mktemp -d "$cache_dir/rootfs.XXXXXX")
    trap 'rm -rf "$rootfs"' EXIT
    echo "debootstrap $suite from $mirror into $rootfs"
    debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror"
    # Keep the image small: package lists and the apt cache are not needed at run time.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    # Written to a temporary name first so an interrupted run never leaves a truncated cache.
    tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
fi

echo "importing $tarball as $image"
docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    --message "xlarun local base: debootstrap $suite minbase + $packages" \
    "$tarball" "$image"
