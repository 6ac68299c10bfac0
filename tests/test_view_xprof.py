"""``view RUN --xprof``: a profiled capture's archived trace laid out for XProf, served on loopback, and checked
over HTTP and in Chromium; a run without a profile refused with how to capture one."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from .see_support import CHROMIUM, CHROMIUM_ARGS


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex((host, port)) == 0


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read()
        return json.loads(gzip.decompress(body) if response.headers.get("Content-Encoding") == "gzip" else body)


def _other_address() -> str | None:
    """An address of this machine that is not loopback, to show the server does not answer there."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, the kernel only picks a route
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


# --- refused -------------------------------------------------------------------------------------------------


def test_a_run_without_a_profile_is_refused_saying_how_to_capture_one(jax_run, cli):
    store, result = jax_run
    shown = cli("view", result.run_id, "--xprof", "--no-browser", "--store", store.root)
    assert shown.exit_code == 2
    assert f"run {result.run_id} has no profile" in shown.stderr and "profile: true" in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1
    as_json = cli("view", result.run_id, "--xprof", "--no-browser", "--json", "--store", store.root)
    error = json.loads(as_json.stdout)
    assert as_json.exit_code == error["exit_code"] == 2
    assert "has no profile" in error["error"] and "profile: true" in error["hint"]


def test_without_xprof_view_exits_3_naming_the_extra(jax_run, cli, monkeypatch):
    import xlarun.see.view

    store, result = jax_run
    monkeypatch.setattr(xlarun.see.view, "xprof_installed", lambda: False)
    shown = cli("view", result.run_id, "--xprof", "--no-browser", "--store", store.root)
    assert shown.exit_code == 3
    assert "xlarun[profile]" in shown.stderr and "pip install xprof" in shown.stderr


# --- the log folder ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_trace_is_laid_out_as_xprof_reads_it_and_reused(jax_profiled_run, tmp_path):
    from xlarun.see.view import xprof_logdir

    _path, store, result = jax_profiled_run
    archived = next(f for f in store.index.run_files(result.run_id) if f.path.endswith(".xplane.pb"))
    laid_out = xprof_logdir(store, result.run_id, tmp_path / "cache")
    host = archived.path.rsplit("/", 1)[-1].removesuffix(".xplane.pb")
    trace = tmp_path / "cache" / result.run_id / "plugins" / "profile" / result.run_id / f"{host}.xplane.pb"
    assert trace.read_bytes() == store.read_file(result.run_id, archived.path)
    assert (laid_out.sessions, laid_out.hosts, laid_out.trace_bytes) == ([result.run_id], [host], archived.size)
    written = trace.stat().st_mtime_ns
    (trace.parent / "converted.by.xprof").write_text("kept")  # what XProf writes beside the trace is kept
    again = xprof_logdir(store, result.run_id, tmp_path / "cache")
    assert again == laid_out and trace.stat().st_mtime_ns == written
    assert (trace.parent / "converted.by.xprof").exists()
    trace.write_bytes(b"damaged")
    xprof_logdir(store, result.run_id, tmp_path / "cache")
    assert trace.read_bytes() == store.read_file(result.run_id, archived.path)  # a changed copy is written anew


def test_a_many_process_jobs_traces_are_one_session_with_a_host_per_process(tmp_path):
    """Each process of a many-process job writes its own trace, under process-N/, often with the same host name and
    session folder: XProf gets them as one session, a host per process, none overwriting another."""
    from xlarun.see.view import xprof_host_name, xprof_logdir
    from xlarun.store.facade import LocalStore

    from .see_support import add_run

    trace = (Path(__file__).parent / "fixtures" / "profile" / "tiny.xplane.pb").read_bytes()
    other = (Path(__file__).parent / "fixtures" / "profile" / "tiny_tf.xplane.pb").read_bytes()
    store = LocalStore.open(tmp_path / "store")
    session = "plugins/profile/2026_11_28_17_20_41"
    run_id = add_run(
        store,
        {
            f"xlarun-profile/process-0/{session}/vm.xplane.pb": trace,
            f"xlarun-profile/process-1/{session}/vm.xplane.pb": other,
        },
    )
    laid_out = xprof_logdir(store, run_id, tmp_path / "cache")
    assert laid_out.sessions == [run_id] and laid_out.hosts == ["process-0-vm", "process-1-vm"]
    folder = tmp_path / "cache" / run_id / "plugins" / "profile" / run_id
    assert (folder / "process-0-vm.xplane.pb").read_bytes() == trace
    assert (folder / "process-1-vm.xplane.pb").read_bytes() == other
    assert laid_out.trace_bytes == len(trace) + len(other)
    assert xprof_host_name(f"xlarun-profile/{session}/vm.xplane.pb", several=False) == "vm"


# --- served --------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.browser
def test_xprof_lists_the_run_and_its_ops_on_loopback_and_in_chromium(jax_profiled_run, tmp_path):
    pytest.importorskip("xprof", reason="needs the profile extra (pip install xprof)")
    from xlarun.navigate.profile import module_profile
    from xlarun.navigate.refs import resolve_module
    from xlarun.see.view import XprofServer, xprof_logdir

    _path, store, result = jax_profiled_run
    laid_out = xprof_logdir(store, result.run_id, tmp_path / "cache")
    with XprofServer.start(laid_out) as server:
        assert server.url == f"http://127.0.0.1:{server.port}/" and server.loopback_only
        assert server.sessions() == [result.run_id]
        host = laid_out.hosts[0]
        base = f"{server.url}data/plugin/profile/"
        assert "trace_viewer@" in _get_json(f"{base}run_tools?run={result.run_id}")
        assert _get_json(f"{base}hosts?run={result.run_id}&tag=trace_viewer@") == [{"hostname": host}]
        # XProf's trace viewer over the archived trace: every op xlarun's `profile` times in the step is an event
        # there (its HLO op stats and op profile stay empty for a CPU job: they show device ops only)
        trace = _get_json(f"{base}data?run={result.run_id}&tag=trace_viewer@&host={host}")
        ops_xprof = {event["name"] for event in trace["traceEvents"] if event.get("ph") == "X"}
        step = module_profile(store, resolve_module(store.index, "jit_train_step", run=result.run_id))
        ops_xlarun = {op.op for op in step.ops}
        assert ops_xlarun and ops_xlarun <= ops_xprof
        if (other := _other_address()) is not None:
            assert not _port_open(server.port, other)  # loopback only
        sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package")
        if not CHROMIUM.exists():
            pytest.skip("needs Debian's chromium at /usr/bin/chromium")
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(server.url)
            page.get_by_text("Sessions (1)").first.wait_for(timeout=90_000)
            page.get_by_text(f"Hosts ({len(laid_out.hosts)})").first.wait_for(timeout=90_000)
            # the overview page, converted from the trace by XProf on first request, says what ran
            page.wait_for_function("document.body.innerText.includes('Device type: CPU')", timeout=120_000)
            page.screenshot(path=str(tmp_path / "xprof.png"))
            body = page.inner_text("body")
            browser.close()
        assert result.run_id in body and host in body and "Device type: CPU" in body
    assert server.process.poll() is not None and not _port_open(server.port)  # stopped


@pytest.mark.slow
def test_view_xprof_prints_json_serves_until_ctrl_c(jax_profiled_run, tmp_path):
    """The command prints one JSON document with the URL, serves it, and on Ctrl-C stops listening (exit 0)."""
    pytest.importorskip("xprof", reason="needs the profile extra (pip install xprof)")
    path, _store, result = jax_profiled_run
    env = {**os.environ, "XLARUN_STORE": str(path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "xlarun", "view", result.run_id, "--xprof", "--no-browser", "--json"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)],
    )  # a background suite ignores SIGINT
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("}"):
                break
        said = json.loads("".join(lines))
        assert said["viewer"] == "xprof" and said["run_id"] == result.run_id and said["loopback_only"] is True
        assert said["url"] == f"http://127.0.0.1:{said['port']}/" and said["warning"] is None
        assert said["logdir"] == str(tmp_path / "cache" / "xlarun" / "xprof" / result.run_id)
        assert _get_json(f"{said['url']}data/plugin/profile/runs") == [result.run_id]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        assert not _port_open(said["port"])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
