#!/usr/bin/env bash
# Start the Docker daemon when /var/run/docker.sock does not answer, and wait until it does.
# Idempotent: exits 0 at once when a daemon already answers. Needs root to start one.
# Environment: DOCKERD_LOG (default /tmp/dockerd.log), DOCKERD_WAIT_S (default 60).
set -euo pipefail

sock=/var/run/docker.sock
log=${DOCKERD_LOG:-/tmp/dockerd.log}
wait_s=${DOCKERD_WAIT_S:-60}

answers() {
    # `docker version` needs the CLI; curl needs curl; python3 is always there on our machines.
    python3 - "$sock" <<'PY' >/dev/null 2>&1
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(2)
s.connect(sys.argv[1])
s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
sys.exit(0 if b" 200 " in s.recv(256) else 1)
PY
}

if answers; then
    echo "dockerd already answers on $sock"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "dockerd is not answering on $sock and starting it needs root (sudo $0)" >&2
    exit 1
fi
if ! command -v dockerd >/dev/null; then
    echo "dockerd is not installed: apt-get install -y docker.io" >&2
    exit 1
fi
# A daemon that is starting (or a stale pid file) would make a second dockerd fail: only start
# one when no dockerd process exists.
if ! pgrep -x dockerd >/dev/null; then
    echo "starting dockerd (log: $log)"
    nohup dockerd >"$log" 2>&1 &
fi
for _ in $(seq "$wait_s"); do
    if answers; then
        echo "dockerd answers on $sock"
        exit 0
    fi
    sleep 1
done
echo "dockerd did not answer on $sock within ${wait_s}s; last lines of $log:" >&2
tail -n 20 "$log" >&2 || true
exit 1
