"""Hostile archives, exports and bundles given to `xlarun import` (and read directly by
`show` / `replay`), each built here with zipfile, tarfile and zstandard: every one ends with exit 2 and a one-line
reason naming what is wrong, never exit 4; nothing is left in staging and the store stays sound."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import zstandard

from xlarun.share.safe_unpack import HostileArchive, UnpackLimits, unpack_dump_source

from ..conftest import write_spec
from .support import assert_sound, fill_disk, xlarun

# Marked per test: torture: kills, signals, damaged stores, hostile inputs

GOOD = "module_0001.jit_f.before_optimizations.txt"
HLO = b"HloModule jit_f\n\nENTRY main {\n  ROOT c = f32[] constant(1)\n}\n"


def _tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return raw.getvalue()


def _file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def _link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.LNKTYPE, target
    return info


def _zip(path: Path, members: dict[str, bytes | str]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _export(path: Path, meta: str, text: str) -> Path:
    """An export-like zip: a dump and one of xlarun's own files, ``_xlarun/<meta>``."""
    return _zip(path, {f"_xlarun/{meta}": text, f"dump/{GOOD}": HLO})


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _hostile_cases(folder: Path) -> list[tuple[str, Path, str]]:
    """(case, path, what the one-line refusal says): every one must be refused with exit 2."""
    folder.mkdir()
    cases: list[tuple[str, Path, str]] = []

    def add(name: str, why: str) -> Path:
        cases.append((name, folder / name, why))
        return folder / name

    zipfile.ZipFile(add("empty.zip", "holds no files"), "w").close()
    _zip(add("only-folders.zip", "holds no files"), {"a/": b"", "a/b/": b""})
    tar = _tar_bytes([(_file(GOOD), HLO)])
    params = zstandard.ZstdCompressionParameters(window_log=31, enable_ldm=True, write_content_size=0)
    compressor = zstandard.ZstdCompressor(compression_params=params)
    with open(add("window-2gb.tar.zst", "2048 MiB zstd window"), "wb") as out, compressor.stream_writer(out) as writer:
        writer.write(tar)
    add("gzip-named.tar.zst", "gzip data, not zstd").write_bytes(gzip.compress(tar))
    add("zstd-named.tar.gz", "zstd data, not gzip").write_bytes(zstandard.ZstdCompressor().compress(tar))
    add("noise.tar.zst", "not zstd data").write_bytes(os.urandom(4096))
    _export(add("manifest-100000-deep.zip", "nested more than 32 deep"), "manifest.json", _deep(100_000))
    _export(
        add("manifest-host-40-deep.zip", "nested more than 32 deep"),
        "manifest.json",
        json.dumps({"host": {"a": json.loads(_deep(39))}}),
    )
    _export(add("manifest-array.zip", "not an object"), "manifest.json", "[1, 2]")
    for key, value in (("xla_flags", 5), ("command", [1, 2]), ("tags", ["a"]), ("name", {"a": 1}), ("host", "x")):
        _export(add(f"manifest-{key}.zip", f"'{key}'"), "manifest.json", json.dumps({key: value}))
    _export(add("bundle-100000-deep.zip", "nested more than 32 deep"), "bundle.json", _deep(100_000))
    _export(add("bundle-module-int.zip", "'module' of type int"), "bundle.json", json.dumps({"module": 5}))
    for label, module_id in (("text", "x"), ("bool", True), ("huge", 2**70), ("negative", -1)):
        _export(
            add(f"bundle-id-{label}.zip", "not a module number"), "bundle.json", json.dumps({"module": {"module_id": module_id}})
        )
    path = add("nul-in-name.zip", "(a NUL)")  # zipfile cuts a name at a NUL when writing: patch the bytes
    _zip(path, {GOOD: HLO, "evil.txtQQQQ.txt": b"x"})
    path.write_bytes(path.read_bytes().replace(b"evil.txtQQQQ", b"evil.txt\x00QQQ"))
    add("hardlink-absolute.tar", "hard link to '/etc/passwd'").write_bytes(
        _tar_bytes([(_file(GOOD), HLO), (_link("passwd", "/etc/passwd"), None)])
    )
    add("hardlink-unknown.tar", "not given before it").write_bytes(
        _tar_bytes([(_file(GOOD), HLO), (_link("copy", "elsewhere.txt"), None)])
    )
    add("hardlink-before-target.tar", "not given before it").write_bytes(
        _tar_bytes([(_link("copy", GOOD), None), (_file(GOOD), HLO)])
    )
    for label, central_at, local_at, value in (("method-99", 10, 8, 99), ("version-25.5", 6, 4, 255)):
        path = add(f"zip-{label}.zip", "cannot read")  # zipfile raised NotImplementedError (exit 4)
        data = bytearray(_zip(path, {GOOD: HLO}).read_bytes())
        central, local = data.find(b"PK\x01\x02"), data.find(b"PK\x03\x04")
        data[central + central_at : central + central_at + 2] = value.to_bytes(2, "little")
        data[local + local_at : local + local_at + 2] = value.to_bytes(2, "little")
        path.write_bytes(bytes(data))
    return cases


@pytest.mark.slow
def test_hostile_archives_exports_and_bundles_are_refused_in_one_line(tmp_path, cli, figures):
    store = tmp_path / "store"
    cases = _hostile_cases(tmp_path / "corpus")
    good = tmp_path / "good.tar"
    good.write_bytes(_tar_bytes([(_file(GOOD), HLO), (_link("same.txt", GOOD), None)]))
    first = cli("import", good, "--store", store)  # a hard link to the archive's own file: its bytes again
    assert first.exit_code == 0, first.output
    codes: dict[str, int] = {}
    for name, path, why in cases:
        result = cli("import", path, "--store", store)
        codes[name] = result.exit_code
        line = result.stderr.strip()
        assert result.exit_code == 2, f"{name}: {result.output}"
        assert "\n" not in line and "Traceback" not in line and why in line, f"{name}: {line}"
        assert [p for p in (store / "staging").iterdir() if not p.name.startswith(".trash-")] == [], name
    for name, path, why in cases:  # `show` and `replay` read a bundle directly: the same refusals
        for command in ("show", "replay") if name.startswith("bundle-") else ():
            result = cli(command, path)
            codes[f"{command} {name}"] = result.exit_code
            assert result.exit_code == 2 and why in result.stderr, f"{command} {name}: {result.output}"
    state = assert_sound(store)
    from xlarun.store.facade import LocalStore

    opened = LocalStore.open(store)
    try:
        [run_id] = state.runs
        assert opened.read_file(run_id, "same.txt") == HLO
    finally:
        opened.close()
    crashes = sum(code not in (0, 1, 2, 3) for code in codes.values())
    figures(tried=len(codes), clean=sum(code == 2 for code in codes.values()), lost=0, crashes=crashes)
    assert crashes == 0 and len(cases) >= 24


@pytest.mark.slow
def test_a_folder_holding_a_hard_link_to_a_file_outside_it_is_refused(tmp_path, cli, figures):
    outside = tmp_path / "secret.txt"
    outside.write_bytes(b"not yours")
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / GOOD).write_bytes(HLO)
    os.link(dump / GOOD, dump / "twin.txt")  # both links inside: fine
    store = tmp_path / "store"
    fine = cli("import", dump, "--store", store)
    assert fine.exit_code == 0, fine.output
    too_big = cli("import", dump, "--store", store, "--max-bytes", "100")  # judged before a byte is written
    assert too_big.exit_code == 2 and "over 100" in too_big.stderr, too_big.output
    os.link(outside, dump / "leak.txt")
    refused = cli("import", dump, "--store", store)
    assert refused.exit_code == 2, refused.output
    assert "'leak.txt': hard link to a file outside the folder" in refused.stderr, refused.stderr
    state = assert_sound(store)
    assert len(state.runs) == 1 and state.leftovers == 0
    figures(tried=3, clean=3, lost=0, crashes=0)


@pytest.mark.slow
def test_a_bomb_is_refused_as_soon_as_it_writes_past_the_ratio(tmp_path, figures):
    """A member of zeros after an incompressible one: judged against the whole archive, it would pass (the archive
    is big); judged per member and as bytes are written, it is refused within a chunk or two past the floor."""
    limits = UnpackLimits(max_ratio=50, ratio_floor_bytes=1 << 20)
    path = tmp_path / "bomb.tar.gz"
    noise, zeros = os.urandom(2 << 20), 40 << 20
    with tarfile.open(path, "w:gz", compresslevel=1) as archive:
        info = _file("noise.bin")
        info.size = len(noise)
        archive.addfile(info, io.BytesIO(noise))
        info = _file(GOOD)
        info.size = zeros
        archive.addfile(info, io.BytesIO(bytes(zeros)))
    assert (2 << 20) + zeros < 50 * path.stat().st_size  # the whole archive's ratio is under the limit
    dest = tmp_path / "out"
    with pytest.raises(HostileArchive, match="50 times the bytes read"):
        unpack_dump_source(path, dest, limits)
    written = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())  # a refusal leaves what it wrote
    figures(archive_bytes=path.stat().st_size, bomb_bytes=zeros, written_before_refusal=written)
    assert written <= len(noise) + (3 << 20)


@pytest.mark.slow
def test_import_into_a_full_disk_says_so_and_keeps_nothing(tmp_path, small_disk, cli, figures):
    store = small_disk / "store"
    first = cli("import", _zip(tmp_path / "small.zip", {GOOD: HLO}), "--store", store)
    assert first.exit_code == 0, first.output
    folder = tmp_path / "noise"
    folder.mkdir()
    for i in range(6):
        (folder / f"module_{i:04d}.jit_n.before_optimizations.txt").write_bytes(os.urandom(1 << 20))
    tarred = tmp_path / "noise.tar.gz"
    with tarfile.open(tarred, "w:gz") as archive:
        archive.add(folder, arcname="noise")
    codes = {}
    fill_disk(small_disk, 3 << 20)  # 3 MiB free: the folder's 6 MiB are refused before a byte is written
    for label, source in (
        ("folder", folder),
        ("zip", _zip(tmp_path / "noise.zip", {p.name: p.read_bytes() for p in folder.iterdir()})),
    ):
        result = cli("import", source, "--store", store)
        codes[f"checked {label}"] = result.exit_code
        assert result.exit_code == 3 and "the disk is full" in result.stderr and "needs at least" in result.stderr, result.output
    (small_disk / "filler").unlink()
    fill_disk(small_disk, 8 << 20)  # 8 MiB free: the tar.gz passes the check, unpacks, then archiving fills the disk
    result = cli("import", tarred, "--store", store)
    codes["mid-way tar.gz"] = result.exit_code
    assert result.exit_code == 3 and "the disk is full" in result.stderr and "Traceback" not in result.output, result.output
    assert [p for p in (store / "staging").iterdir() if not p.name.startswith(".trash-")] == []
    job = "import os, sys\ndump = os.environ['XLA_FLAGS'].split('--xla_dump_to=')[1].split()[0]\n"
    job += (
        "for i in range(6):\n    open(f'{dump}/module_{i:04d}.jit_n.before_optimizations.txt', 'wb').write(os.urandom(1 << 20))\n"
    )
    spec = write_spec(tmp_path / "noisy", "name: noisy\nscript: job.py\n", job)
    captured = xlarun("capture", str(spec), "-q", store=store)  # the job's 6 MiB fit; archiving them does not
    _out, err = captured.communicate(timeout=300)  # a process of its own: its staging folder is a leftover after
    codes["capture"] = captured.returncode
    assert captured.returncode == 3 and "the disk is full" in err and "`xlarun recover`" in err, err
    (small_disk / "filler").unlink()
    dropped = cli("gc", "--discard-recoverable", "--store", store)
    assert dropped.exit_code == 0, dropped.output
    deadline = time.monotonic() + 120  # gc deletes in the background
    while list((store / "staging").glob(".trash-*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    collected = cli("gc", "--store", store)  # the packs the failed archiving wrote, named by no run now
    assert collected.exit_code == 0, collected.output
    again = cli("import", tarred, "--store", store)  # once there is room, the same import works
    codes["with room"] = again.exit_code
    assert again.exit_code == 0
    state = assert_sound(store)
    figures(tried=len(codes), clean=len(codes), lost=0, crashes=0, exit_codes=codes)
    assert len(state.runs) == 2 and state.leftovers == 0


@pytest.mark.slow
def test_capture_and_import_into_a_read_only_store_say_so_in_one_line(tmp_path, cli, figures):
    """A store on a read-only mount: `capture` and `import` end with exit 3 saying the store is read-only
    (never exit 4), and the store is as it was."""
    import subprocess

    store, view = tmp_path / "store", tmp_path / "ro"
    first = cli("import", _zip(tmp_path / "small.zip", {GOOD: HLO}), "--store", store)
    assert first.exit_code == 0, first.output
    view.mkdir()
    done = subprocess.run(["mount", "--bind", str(store), str(view)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
    spec = write_spec(tmp_path / "spec", "name: hello\nscript: job.py\n", "print('hello')\n")
    codes = {}
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True, capture_output=True)
        for label, args in (("capture", ("capture", spec, "-q")), ("import", ("import", tmp_path / "small.zip"))):
            result = cli(*args, "--store", view)
            codes[label] = result.exit_code
            line = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else ""
            assert result.exit_code == 3 and "the store is read-only" in line, f"{label}: {result.output}"
            assert "Traceback" not in result.output
    finally:
        subprocess.run(["umount", "-l", str(view)], capture_output=True)
    state = assert_sound(store)
    figures(tried=len(codes), clean=len(codes), lost=0, crashes=0, exit_codes=codes)
    assert len(state.runs) == 1 and state.leftovers == 0


@pytest.mark.slow
def test_an_exports_huge_log_is_kept_by_its_end_not_read_whole(tmp_path, cli, figures):
    export = tmp_path / "export"
    (export / "_xlarun").mkdir(parents=True)
    (export / "dump").mkdir()
    (export / "dump" / GOOD).write_bytes(HLO)
    with open(export / "_xlarun" / "stdout.log", "wb") as log:
        log.seek(20 << 20)  # 20 MiB of NULs (sparse), then a line
        log.write(b"the last line\n")
    store = tmp_path / "store"
    result = cli("import", export, "--store", store)
    assert result.exit_code == 0, result.output
    assert "only its last 16777216 were kept" in result.output, result.output
    from xlarun.store.facade import LocalStore

    opened = LocalStore.open(store)
    try:
        [run_id] = opened.run_ids()
        kept = opened.read_log(run_id, "stdout")
    finally:
        opened.close()
    assert kept.startswith("[xlarun import: the first") and kept.endswith("the last line\n")
    assert len(kept) < (16 << 20) + 200
    figures(log_bytes=(20 << 20) + 14, kept_bytes=len(kept))


@pytest.mark.slow
def test_as_a_user_without_rights_the_store_and_the_source_are_told_apart(tmp_path, figures):
    """As `nobody` (setpriv; root only): a store owned by another user is exit 3 ('no permission to write into the
    store') for import and capture; a dump folder with an unreadable sub-folder is exit 2 ('cannot be read')."""
    import shutil
    import subprocess
    import sys
    import tempfile

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run xlarun as another user")
    shared = Path(tempfile.mkdtemp(prefix="xlarun-rights-"))
    try:
        shared.chmod(0o755)
        store, dump = shared / "store", shared / "dump"
        (dump / "private").mkdir(parents=True)
        (dump / GOOD).write_bytes(HLO)
        (dump / "private").chmod(0o700)
        spec = write_spec(shared / "spec", "name: hello\nscript: job.py\n", "print('hello')\n")
        seed = _zip(shared / "seed.zip", {GOOD: HLO})
        made = subprocess.run([sys.executable, "-m", "xlarun", "import", str(seed), "--store", str(store)], capture_output=True)
        subprocess.run(["chmod", "-R", "a+rX", str(shared)], check=True)
        (dump / "private").chmod(0o700)
        codes = {}
        for label, args, code, words in (
            (
                "import into their store",
                ("import", _zip(shared / "x.zip", {GOOD: HLO}), "--store", store),
                3,
                "no permission to write",
            ),
            ("capture into their store", ("capture", spec, "--store", store), 3, "no permission to write"),
            ("an unreadable folder", ("import", dump, "--store", shared / "mine"), 2, "'private': cannot be read"),
        ):
            if label == "an unreadable folder":
                (shared / "mine").mkdir(mode=0o777)
                (shared / "mine").chmod(0o777)
            done = subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "xlarun", *map(str, args)],
                capture_output=True,
                text=True,
                timeout=300,
                # not measured: coverage's subprocess patch would make nobody write its data where it may not
                env={**{k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}, "HOME": str(shared)},
            )
            codes[label] = done.returncode
            assert done.returncode == code and words in done.stderr and "Traceback" not in done.stderr, (label, done.stderr)
        assert made.returncode == 0, made.stderr
        state = assert_sound(store)
        figures(tried=len(codes), clean=len(codes), crashes=0, exit_codes=codes)
        assert len(state.runs) == 1 and state.leftovers == 0
    finally:
        subprocess.run(["chmod", "-R", "u+rwX", str(shared)], capture_output=True)
        shutil.rmtree(shared, ignore_errors=True)
