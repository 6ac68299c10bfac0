"""known_flags: the XLA flags a framework install knows, read from its native library; a job's refusal read from its log."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from xlarun.capture import known_flags
from xlarun.capture.known_flags import (
    FlagNameCache,
    KnownXlaFlags,
    find_flag_rejection,
    job_search_path,
    probe_known_xla_flags,
    scan_flag_names,
)

from .compat_support import require_compat

#: As XLA's flag registry stores them: whole C strings.
REGISTRY = b"\0xla_dump_to\0xla_dump_hlo_as_text\0xla_dump_hlo_as_proto\0xla_dump_large_constants\0"


def fake_elf(rodata: bytes, other: bytes = b"") -> bytes:
    """A minimal 64-bit little-endian ELF file: ``other`` in .text, ``rodata`` in .rodata."""
    names = b"\0.text\0.rodata\0.shstrtab\0"
    text_at, rodata_at = 64, 64 + len(other)
    names_at = rodata_at + len(rodata)
    table_at = names_at + len(names)

    def section(name: int, kind: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, offset, size, 0, 0, 1, 0)

    table = (
        section(0, 0, 0, 0)
        + section(1, 1, text_at, len(other))
        + section(7, 1, rodata_at, len(rodata))
        + section(15, 3, names_at, len(names))
    )
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, table_at, 0, 64, 0, 0, 64, 4, 3)
    return header + other + rodata + names + table


def test_scan_keeps_c_strings_and_drops_proto_names_symbols_and_help_text(tmp_path):
    rodata = (
        REGISTRY
        + b"\n\x18xla_gpu_only_in_the_proto\x18\xa2\x02"  # DebugOptions descriptor: length-prefixed
        + b"\x1b\n\x19_xla_oneof_name\0"  # a synthetic oneof name starts with '_'
        + b"_ZN3xla12DebugOptions28set_xla_mangled_setterEb\0"
        + b"Ignored unless xla_mentioned_in_help is true.\0"
        + b"see --xla_tail_of_help\0"  # a help text ending on a flag name still names a real flag
    )
    library = tmp_path / "lib.so"
    library.write_bytes(fake_elf(rodata, other=b"\0xla_in_code_not_data\0"))
    assert scan_flag_names(library) == {
        "xla_dump_to",
        "xla_dump_hlo_as_text",
        "xla_dump_hlo_as_proto",
        "xla_dump_large_constants",
        "xla_tail_of_help",
    }


def test_scan_reads_the_whole_file_when_it_is_not_elf(tmp_path):
    library = tmp_path / "lib.dylib"
    library.write_bytes(b"\xcf\xfa\xed\xfe" + REGISTRY)
    assert "xla_dump_large_constants" in scan_flag_names(library)
    (tmp_path / "empty.so").write_bytes(b"")
    assert scan_flag_names(tmp_path / "empty.so") == frozenset()


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_scan_of_a_compiled_library(tmp_path):
    source = tmp_path / "flags.c"
    source.write_text(
        'const char *flags[] = {"xla_dump_to", "xla_dump_hlo_as_text", "xla_cpu_fast"};\n'
        'const unsigned char descriptor[] = "\\n\\x18xla_proto_field_only\\x18\\xa2";\n'
    )
    library = tmp_path / "libflags.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    assert scan_flag_names(library) == {"xla_dump_to", "xla_dump_hlo_as_text", "xla_cpu_fast"}


def make_venv(root: Path, framework_files: dict[str, bytes], dist_infos: tuple[str, ...] = ()) -> str:
    """A venv layout (never run) with the given files under site-packages; returns its python."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    (root / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.9\n")
    site = root / "lib" / "python3.11" / "site-packages"
    for relative, data in framework_files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(data)
    for name in dist_infos:
        (site / name).mkdir(parents=True)
    return str(root / "bin" / "python")


def big(data: bytes) -> bytes:
    return fake_elf(data, other=bytes(known_flags.MIN_LIBRARY_BYTES))


def test_probe_reads_the_framework_the_jobs_python_finds(tmp_path):
    old_tf = REGISTRY.replace(b"xla_dump_large_constants\0", b"")
    python = make_venv(
        tmp_path / "venv",
        {
            "tensorflow/libtensorflow_cc.so.2": big(old_tf),
            "tensorflow/libtensorflow_framework.so.2": big(b"\0xla_dump_to\0"),
            "tensorflow/__init__.py": b"",
        },
        ("tensorflow_cpu-2.16.2.dist-info", "tensorflow_io_gcs_filesystem-0.37.1.dist-info"),
    )
    cache = FlagNameCache(tmp_path / "cache")
    known = probe_known_xla_flags("tensorflow", python, {}, cache=cache)
    assert known is not None and known.owner == "tensorflow 2.16.2"
    assert [Path(p).name for p in known.libraries] == ["libtensorflow_cc.so.2"]  # the framework library holds no registry
    assert known.knows("--xla_dump_to=/x") and known.knows("--xla_dump_hlo_as_text")
    assert not known.knows("--xla_dump_large_constants")
    assert known.knows("--v=1")  # not an XLA flag: not the registry's to judge
    assert probe_known_xla_flags("jax", python, {}, cache=cache) is None  # not installed there
    assert probe_known_xla_flags("unknown", python, {}, cache=cache) is None


def test_a_plugin_registry_must_know_the_flag_too(tmp_path):
    python = make_venv(
        tmp_path / "venv",
        {
            "jaxlib/libjax_common.so": big(REGISTRY),
            "jaxlib/_jax.so": fake_elf(REGISTRY + b"xla_stub_only\0"),
            "jax_plugins/xla_cuda12/xla_cuda_plugin.so": big(REGISTRY.replace(b"xla_dump_hlo_as_proto\0", b"")),
        },
        ("jaxlib-0.4.30.dist-info",),
    )
    known = probe_known_xla_flags("jax", python, {}, cache=FlagNameCache(tmp_path / "cache"))
    assert known.owner == "jaxlib 0.4.30" and len(known.libraries) == 2  # the 3.5 KB stub is skipped
    assert known.knows("--xla_dump_large_constants") and not known.knows("--xla_dump_hlo_as_proto")


def test_pythonpath_and_the_script_folder_come_first(tmp_path):
    python = make_venv(
        tmp_path / "venv", {"_XLAC.cpython-311-x86_64-linux-gnu.so": big(REGISTRY)}, ("torch_xla-2.9.0.dist-info",)
    )
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "_XLAC.so").write_bytes(big(b"\0xla_dump_to\0xla_dump_hlo_as_text\0"))
    env = {"PYTHONPATH": str(shadow)}
    assert job_search_path(python, env, "/scripts")[:2] == ["/scripts", str(shadow)]
    known = probe_known_xla_flags("torch_xla", python, env, cache=FlagNameCache(tmp_path / "cache"))
    assert known.owner == "torch_xla" and not known.knows("--xla_dump_large_constants")  # the shadowing copy wins


def test_an_interpreter_outside_a_venv_is_asked_for_its_path(tmp_path):
    site = tmp_path / "site"
    (site / "jaxlib").mkdir(parents=True)
    (site / "jaxlib" / "xla_extension.so").write_bytes(big(REGISTRY))
    python = tmp_path / "conda" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\necho '{json.dumps([str(site)])}'\n")
    python.chmod(0o755)
    known = probe_known_xla_flags("jax", "python", {"PATH": str(python.parent)}, cache=FlagNameCache(tmp_path / "cache"))
    assert known is not None and known.knows("--xla_dump_large_constants")
    assert probe_known_xla_flags("jax", "no-such-python", {"PATH": str(tmp_path)}) is None


def test_cache_answers_until_the_library_changes(tmp_path, monkeypatch):
    library = tmp_path / "lib.so"
    library.write_bytes(fake_elf(REGISTRY))
    scans = []
    real_scan = known_flags.scan_flag_names
    monkeypatch.setattr(known_flags, "scan_flag_names", lambda path: scans.append(path) or real_scan(path))
    cache = FlagNameCache(tmp_path / "cache")
    first = cache.names(str(library))
    assert cache.names(str(library)) == first and len(scans) == 1
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1
    assert not list((tmp_path / "cache").glob(".tmp-*"))

    library.write_bytes(fake_elf(REGISTRY + b"xla_new_flag\0"))  # an upgrade: new size and mtime
    assert "xla_new_flag" in cache.names(str(library)) and len(scans) == 2

    for stored in (tmp_path / "cache").glob("*.json"):
        stored.write_text("{not json")
    assert "xla_new_flag" in cache.names(str(library)) and len(scans) == 3  # a broken entry is rescanned
    for stored in (tmp_path / "cache").glob("*.json"):  # the right key, names that are not names: rescanned too
        if "xla_new_flag" in stored.read_text():
            stored.write_text(json.dumps({**json.loads(stored.read_text()), "names": [["xla_dump_to"]]}))
    assert "xla_new_flag" in cache.names(str(library)) and len(scans) == 4


def test_read_only_cache_reads_but_never_writes(tmp_path):
    library = tmp_path / "lib.so"
    library.write_bytes(fake_elf(REGISTRY))
    read_only = FlagNameCache(tmp_path / "cache", writable=False)
    assert "xla_dump_to" in read_only.names(str(library))
    assert not (tmp_path / "cache").exists()
    FlagNameCache(tmp_path / "cache").names(str(library))
    library.write_bytes(b"")  # same path, new size: the stored answer no longer applies
    assert read_only.names(str(library)) == frozenset()


def test_default_cache_lives_in_xlaruns_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert FlagNameCache.default().folder == tmp_path / "xlarun" / "xla-flag-names"


@pytest.mark.parametrize(
    ("log", "variable", "flags"),
    [
        # TF 2.16.2, real: the flag named once per parse, trailing spaces
        (
            "2026-11-23 08:43:59.797020: F external/local_xla/xla/parse_flags_from_env.cc:225] "
            "Unknown flags in XLA_FLAGS: --xla_bogus_flag  --xla_bogus_flag \n",
            "XLA_FLAGS",
            ("--xla_bogus_flag",),
        ),
        # jaxlib 0.12 / TF 2.21, real
        (
            "I0000 start\nF1123 08:41:40.054053   25442 parse_flags_from_env.cc:234] Unknown flag in XLA_FLAGS: --xla_cpu_use_mkl_dnn\n",
            "XLA_FLAGS",
            ("--xla_cpu_use_mkl_dnn",),
        ),
        (
            "F0000 00:00:1795423117.181604   21525 parse_flags_from_env.cc:234] Unknown flags in XLA_FLAGS: --xla_foo --xla_bar=1",
            "XLA_FLAGS",
            ("--xla_foo", "--xla_bar=1"),
        ),
        ("parse_flags_from_env.cc:234] Unknown flag in TF_XLA_FLAGS: --tf_xla_foo\n", "TF_XLA_FLAGS", ("--tf_xla_foo",)),
        ("ERROR: Unknown command line flag 'tf_xla_foo'\n", "", ("--tf_xla_foo",)),
    ],
)
def test_a_refusal_is_read_from_the_log(log, variable, flags):
    rejection = find_flag_rejection(log)
    assert (rejection.variable, rejection.flags) == (variable, flags)
    assert all(flag.split("=")[0] in rejection.explain() for flag in flags)


def test_an_ordinary_failure_is_no_refusal():
    assert find_flag_rejection("Traceback (most recent call last):\nValueError: boom\n") is None
    assert find_flag_rejection("") is None


# Real framework installs (scripts/compat.py builds them): what each knows of the flags xlarun adds.
XLARUN_FLAGS = [
    "--xla_dump_to=/d",
    "--xla_dump_hlo_as_text",
    "--xla_dump_hlo_as_proto",
    "--xla_dump_hlo_as_dot",
    "--xla_dump_hlo_as_html",
    "--xla_dump_compress_protos",
    "--xla_dump_hlo_snapshots",
    "--xla_dump_hlo_pass_re=x",
    "--xla_dump_hlo_module_re=x",
    "--xla_dump_hlo_pipeline_re=x",
    "--xla_dump_large_constants",
    "--xla_dump_include_timestamp",
    "--xla_dump_max_hlo_modules=9",
    "--xla_dump_module_metadata",
    "--xla_dump_disable_metadata",
]


@pytest.mark.parametrize(
    ("key", "framework", "owner", "lacks"),
    [
        ("jax-0.4.30", "jax", "jaxlib 0.4.30", []),
        ("jax-0.7.2", "jax", "jaxlib 0.7.2", []),
        ("jax-0.12.0.1", "jax", "jaxlib 0.12.0.1", []),
        ("torch_xla-2.9.0", "torch_xla", "torch_xla 2.9.0", []),
        pytest.param("tf-2.16.2", "tensorflow", "tensorflow 2.16.2", ["--xla_dump_large_constants"], marks=pytest.mark.tf),
    ],
)
def test_real_installs_know_what_was_measured(key, framework, owner, lacks, tmp_path):
    python = require_compat(key)
    known = probe_known_xla_flags(framework, str(python), {}, cache=FlagNameCache(tmp_path))
    assert known.owner == owner
    assert [flag for flag in XLARUN_FLAGS if not known.knows(flag)] == lacks


@pytest.mark.slow
@pytest.mark.tf
def test_tf_2_16_really_refuses_what_its_library_lacks(tmp_path):
    """The proof behind the probe: the flag missing from the library aborts the job; the others pass."""
    python = str(require_compat("tf-2.16.2"))
    known = probe_known_xla_flags("tensorflow", python, {}, cache=FlagNameCache(tmp_path / "cache"))
    assert not known.knows("--xla_dump_large_constants") and known.knows("--xla_dump_hlo_as_proto")
    code = "import tensorflow as tf; print(float(tf.function(lambda x: tf.reduce_sum(x * 2.0), jit_compile=True)(tf.ones([4]))))"
    base = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "TF_XLA_FLAGS")}
    accepted = subprocess.run(
        [python, "-c", code],
        env={**base, "XLA_FLAGS": f"--xla_dump_to={tmp_path / 'd'} --xla_dump_hlo_as_proto"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert accepted.returncode == 0 and accepted.stdout.strip() == "8.0", accepted.stderr[-2000:]
    assert any(name.endswith(".hlo.pb") for name in os.listdir(tmp_path / "d"))
    refused = subprocess.run(
        [python, "-c", code],
        env={**base, "XLA_FLAGS": "--xla_dump_large_constants"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode != 0
    assert find_flag_rejection(refused.stderr).flags == ("--xla_dump_large_constants",)


def test_a_cached_probe_of_this_interpreter_is_cheap(monkeypatch):
    """Cheap enough for every capture: a cached answer for this venv's jaxlib takes milliseconds."""
    pytest.importorskip("jaxlib")
    import sys
    import time

    cache = FlagNameCache.default()
    probe_known_xla_flags("jax", sys.executable, dict(os.environ), cache=cache)
    import subprocess

    def no_process(*args, **kwargs):
        raise AssertionError(f"a cached probe started a process: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_process)  # the cost that matters: no interpreter is started
    started = time.process_time()  # CPU time: a loaded machine does not inflate it
    known = probe_known_xla_flags("jax", sys.executable, dict(os.environ), cache=cache)
    assert isinstance(known, KnownXlaFlags) and known.knows("--xla_dump_large_constants")
    assert time.process_time() - started < 0.5
