"""S3 faults between xlarun and a real SeaweedFS: throttling and 5xx answers from a small fault-injecting proxy in
front of the session's server, retried and then a one-line exit 3; what a failed push sent is resumed."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import pytest

from tests.test_remote import _imported_store, _name_remote, s3_server  # noqa: F401

pytest.importorskip("boto3")

_ERROR = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>injected by the test</Message></Error>'


class FaultProxy(ThreadingHTTPServer):
    """Forwards every request to ``upstream`` unchanged (the Host header too, so signatures hold), except that the
    next ``count`` requests whose method and path match are answered with an S3 error instead (``count`` -1: all)."""

    daemon_threads = True

    def __init__(self, upstream: str):
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream = urlparse(upstream)
        self.rule: tuple[str, str, int, str, int] | None = None  # method, path part, status, code, count
        self.injected = 0
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def fail(self, method: str, path_part: str, status: int, code: str, count: int = -1) -> None:
        with self.lock:
            self.rule, self.injected = (method, path_part, status, code, count), 0

    def heal(self) -> None:
        with self.lock:
            self.rule = None

    def fault_for(self, method: str, path: str) -> tuple[int, str] | None:
        with self.lock:
            if self.rule is None:
                return None
            want, part, status, code, count = self.rule
            if want != method or part not in path or count == 0:
                return None
            self.rule = (want, part, status, code, count - 1 if count > 0 else -1)
            self.injected += 1
            return status, code


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FaultProxy

    def log_message(self, *args) -> None:
        return None

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self) -> None:
        body = self._body()
        fault = self.server.fault_for(self.command, self.path)
        if fault is not None:
            status, code = fault
            payload = _ERROR.format(code=code).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        upstream = http.client.HTTPConnection(self.server.upstream.hostname, self.server.upstream.port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "transfer-encoding"}
        headers["Content-Length"] = str(len(body))
        upstream.request(self.command, self.path, body=body, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        self.send_response(answer.status, answer.reason)
        for key, value in answer.getheaders():
            if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        upstream.close()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle


@pytest.fixture
def proxied(s3_server, monkeypatch, tmp_path):
    """A remote 'flaky' reached through a FaultProxy in front of the session's server, and one 'direct' to the same
    prefix without it."""
    proxy = FaultProxy(s3_server)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    prefix = _name_remote("flaky", proxy.endpoint, monkeypatch, tmp_path)
    from xlarun.store.remote import add_remote

    add_remote("direct", f"s3://xlarun-tests/{prefix}", s3_server)
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()


def _json(result) -> dict:
    return json.loads(result.stdout)


@pytest.mark.slow
def test_throttling_is_retried_and_the_push_completes(proxied, tmp_path, cli):
    [run_id] = _imported_store(cli, tmp_path / "store")
    proxied.fail("PUT", "/packs/", 503, "SlowDown", count=2)  # twice: within boto3's standard retries
    pushed = cli("push", run_id, "--remote", "flaky", "--store", tmp_path / "store", "--json")
    assert pushed.exit_code == 0, pushed.output
    assert proxied.injected == 2 and _json(pushed)["runs"] == [run_id]
    assert [r["run"] for r in _json(cli("runs", "--remote", "direct", "--json"))] == [run_id]
    assert cli("pull", run_id, "--remote", "direct", "--store", tmp_path / "other").exit_code == 0


@pytest.mark.slow
@pytest.mark.parametrize(("status", "code"), [(503, "SlowDown"), (500, "InternalError")])
def test_a_server_that_keeps_failing_is_exit_3_in_one_line_and_the_push_resumes(proxied, tmp_path, cli, status, code):
    [run_id] = _imported_store(cli, tmp_path / "store")
    proxied.fail("PUT", "/records/", status, code)  # packs and files go through; the record never does
    failed = cli("push", run_id, "--remote", "flaky", "--store", tmp_path / "store", "--json")
    assert failed.exit_code == 3
    answer = _json(failed)
    assert code in answer["error"] and "resumes" in answer["hint"] and "\n" not in answer["error"]
    assert proxied.injected == 5  # the first try and 4 retries (remote.py: retries max_attempts 4), then the error
    assert _json(cli("runs", "--remote", "direct", "--json")) == []  # nothing visible

    proxied.heal()
    resumed = _json(cli("push", run_id, "--remote", "flaky", "--store", tmp_path / "store", "--json"))
    assert resumed["runs"] == [run_id] and resumed["skipped_bytes"] > 10_000  # its packs were not sent again
    assert cli("pull", run_id, "--remote", "direct", "--store", tmp_path / "other").exit_code == 0


@pytest.mark.slow
def test_a_pull_whose_reads_keep_failing_keeps_nothing(proxied, tmp_path, cli):
    [run_id] = _imported_store(cli, tmp_path / "store")
    assert cli("push", run_id, "--remote", "direct", "--store", tmp_path / "store").exit_code == 0
    proxied.fail("GET", "/packs/", 500, "InternalError")
    failed = cli("pull", run_id, "--remote", "flaky", "--store", tmp_path / "other", "--json")
    assert failed.exit_code == 3 and "InternalError" in _json(failed)["error"]
    assert _json(cli("runs", "--store", tmp_path / "other", "--json")) == []
    assert not list((tmp_path / "other" / "staging").glob("*"))
    proxied.heal()
    assert cli("pull", run_id, "--remote", "flaky", "--store", tmp_path / "other").exit_code == 0
