#!/usr/bin/env bash
# Wait, bounded, until no other package manager holds dpkg's or apt's locks (unattended upgrades, another
# apt-get). Exit 0 when they are free; exit 100 (apt's own code for a held lock) after the wait, saying who holds
# them. XLARUN_APT_WAIT_S: how long to wait (600 s); XLARUN_APT_LOCKS: the lock files (dpkg's and apt's).
set -euo pipefail
wait_s=${XLARUN_APT_WAIT_S:-600}
locks=${XLARUN_APT_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}
python=$(command -v python3 || true)
[ -n "$python" ] || exit 0  # apt-get's own -o DPkg::Lock::Timeout still waits
# apt and dpkg take fcntl locks: one that cannot be taken now is held; its holder's pid comes from F_GETLK.
holder() {
  "$python" - "$@" <<'PY'
import fcntl, os, struct, sys
for path in sys.argv[1:]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        continue
    try:
        query = struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0)
        kind, _, _, _, pid = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, query))
        if kind != fcntl.F_UNLCK:
            print(f"{path} (pid {pid})")
            break
    finally:
        os.close(fd)
PY
}
# shellcheck disable=SC2086  # the list of lock files is split on purpose
held=$(holder $locks)
[ -z "$held" ] && exit 0
echo "setup: another package manager holds $held; waiting up to ${wait_s} s for it to finish" >&2
start=$SECONDS
while [ -n "$held" ]; do
  if [ $((SECONDS - start)) -ge "$wait_s" ]; then
    echo "setup: $held is still held after ${wait_s} s: let that install finish (or stop it), then run setup again" >&2
    exit 100
  fi
  sleep 2
  # shellcheck disable=SC2086
  held=$(holder $locks)
done
echo "setup: the package manager is free after $((SECONDS - start)) s" >&2
