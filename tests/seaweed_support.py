"""A SeaweedFS cluster on loopback for the remote tests and bench/remote.py: ``weed server`` plus more volume
servers, an admin and a read-only S3 identity, and the free ports it listens on."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

BUCKET = "xlarun-tests"
ADMIN = {"AWS_ACCESS_KEY_ID": "xlarun-admin", "AWS_SECRET_ACCESS_KEY": "admin-secret-9f2"}
READER = {"AWS_ACCESS_KEY_ID": "xlarun-reader", "AWS_SECRET_ACCESS_KEY": "reader-secret-4c1"}
S3_CONFIG = {
    "identities": [
        {"name": "admin", "credentials": [{"accessKey": ADMIN["AWS_ACCESS_KEY_ID"], "secretKey": ADMIN["AWS_SECRET_ACCESS_KEY"]}],
         "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
        {"name": "reader", "credentials": [{"accessKey": READER["AWS_ACCESS_KEY_ID"], "secretKey": READER["AWS_SECRET_ACCESS_KEY"]}],
         "actions": ["Read", "List"]},
    ]
}  # fmt: skip


def _weed() -> str | None:
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else shutil.which("weed")


def _free_port() -> int:
    """A free port whose gRPC twin (SeaweedFS listens on port + 10000 too) is free as well."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 55000:
            with socket.socket() as twin:
                try:
                    twin.bind(("127.0.0.1", port + 10000))
                    return port
                except OSError:
                    continue


def _free_ports(count: int) -> list[int]:
    """``count`` free ports, none of them another's gRPC twin (port + 10000)."""
    while True:
        ports = [_free_port() for _ in range(count)]
        if len(set(ports) | {p + 10000 for p in ports}) == 2 * count:
            return ports


def _client(endpoint: str, creds: dict = ADMIN):
    """A plain boto3 S3 client of the server (admin credentials unless told)."""
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id=creds["AWS_ACCESS_KEY_ID"], aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
    )  # fmt: skip


class SeaweedServer:
    """A SeaweedFS cluster on loopback in ``folder``: ``weed server`` (master, a volume server, filer, S3 gateway) and
    ``volumes - 1`` more ``weed volume`` servers, every object written to two of them (replication 001: a second copy
    on another server of the rack), with an admin and a read-only identity. :meth:`start` waits until every volume
    server has joined and S3 answers; :meth:`stop` stops them all (kill: at once, as a crash would)."""

    def __init__(self, weed: str, folder: Path, volumes: int = 3):
        self.weed, self.folder, self.volumes = weed, folder, volumes
        (folder / "s3.json").write_text(json.dumps(S3_CONFIG))
        self.ports = _free_ports(3 + volumes)
        self.endpoint = f"http://127.0.0.1:{self.ports[0]}"
        self.processes: list[subprocess.Popen] = []

    @property
    def process(self) -> subprocess.Popen | None:
        """The ``weed server`` process (master, filer and S3 gateway in it)."""
        return self.processes[0] if self.processes else None

    def _spawn(self, argv: list[str], log: str) -> None:
        with open(self.folder / log, "ab") as out:
            self.processes.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))

    def start(self) -> str:
        s3, master, filer, *volume_ports = self.ports
        self.processes = []
        self._spawn(
            [self.weed, "server", f"-dir={self.folder}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-s3", f"-s3.port={s3}",
             f"-s3.config={self.folder / 's3.json'}", f"-master.port={master}", f"-volume.port={volume_ports[0]}",
             f"-filer.port={filer}", "-volume.max=100", "-master.volumeSizeLimitMB=64", "-s3.port.iceberg=0",
             "-s3.port.lance=0", "-master.defaultReplication=001"],
            "weed.log",
        )  # fmt: skip
        for n, port in enumerate(volume_ports[1:], start=1):
            (self.folder / f"volume{n}").mkdir(exist_ok=True)
            self._spawn(
                [self.weed, "volume", f"-dir={self.folder / f'volume{n}'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                 f"-port={port}", f"-master=127.0.0.1:{master}", "-max=100"],
                f"volume{n}.log",
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:  # the S3 gateway answers a few seconds after start; a bucket can be made a little later
            try:
                if self.joined() < self.volumes:
                    raise RuntimeError("not every volume server has joined yet")
                client = _client(self.endpoint)
                if BUCKET not in {b["Name"] for b in client.list_buckets().get("Buckets", ())}:
                    client.create_bucket(Bucket=BUCKET)
                client.head_bucket(Bucket=BUCKET)
                return self.endpoint
            except Exception:
                if any(p.poll() is not None for p in self.processes) or time.monotonic() > deadline:
                    self.stop(kill=True)
                    logs = "".join((self.folder / f).read_text(errors="replace")[-1500:] for f in ("weed.log", "volume1.log"))
                    raise RuntimeError(f"SeaweedFS did not start: {logs}") from None
                time.sleep(0.5)

    def joined(self) -> int:
        """How many volume servers the master knows."""
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[1]}/dir/status", timeout=2) as answer:
            topology = json.load(answer)["Topology"]
        return sum(len(rack.get("DataNodes") or []) for dc in topology.get("DataCenters") or [] for rack in dc.get("Racks") or [])

    def stop(self, kill: bool = False) -> None:
        for process in reversed(self.processes):  # the extra volume servers first, then weed server
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL if kill else signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:  # SeaweedFS takes a while to stop on SIGTERM
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
