#!/usr/bin/env bash
# Set up xlarun in ./.venv. `scripts/setup.sh` for using it (JAX on CPU); `scripts/setup.sh --dev` adds
# TensorFlow, the test tools, and the system packages the tests drive (Docker, debootstrap, Chromium).
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
[ "${1:-}" = "--dev" ] && dev=1

apt_packages=(graphviz)
[ "$dev" = 1 ] && apt_packages+=(docker.io debootstrap chromium chromium-driver ripgrep zstd hyperfine zsh fish bash-completion)

missing=()
for pkg in "${apt_packages[@]}"; do
  # installed, not merely known: a package removed without purging still answers `dpkg -s`
  [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" = "install ok installed" ] || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing system packages: ${missing[*]}"
    bash scripts/wait-for-apt.sh
    # and should another one start between the wait and apt-get, apt waits for it too
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: please install these system packages (as root): ${missing[*]}" >&2
  fi
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
extras="jax"
[ "$dev" = 1 ] && extras="jax,tf,dev,ray,zoo,remote"
.venv/bin/python -m pip install -q -e ".[$extras]" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/xlarun --version
