"""bounded_read: regular files only, opened without waiting or following links, read up to a limit."""

from __future__ import annotations

import os

import pytest

from xlarun.bounded_read import FileRefused, read_regular, read_store_file, read_store_json, read_store_log, read_store_tail
from xlarun.errors import ExitCode, StoreError


def test_a_regular_file_is_read_whole_within_its_limit(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_regular(path, 100) == b"x" * 100
    with pytest.raises(FileRefused, match="larger than 99 bytes") as refused:
        read_regular(path, 99)
    assert refused.value.kind is None


@pytest.mark.parametrize(
    "make, kind",
    [
        (os.mkfifo, "a FIFO (named pipe)"),
        (lambda p: p.symlink_to("/dev/zero"), "a symbolic link"),
        (lambda p: p.mkdir(), "a folder"),
    ],
)
def test_anything_but_a_regular_file_is_refused_at_once_naming_what_it_is(tmp_path, make, kind):
    path = tmp_path / "files.json"
    make(path)
    with pytest.raises(FileRefused) as refused:
        read_regular(path, 1 << 20)
    assert refused.value.kind == kind
    with pytest.raises(StoreError) as error:
        read_store_json(path, 1 << 20)
    assert error.value.message == f"{path} is {kind}, not a file" and error.value.exit_code == ExitCode.FAILED
    assert str(path) in error.value.hint


def test_a_link_is_followed_only_when_asked(tmp_path):
    (tmp_path / "real").write_text("spec")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert read_regular(tmp_path / "link", 10, follow_links=True) == b"spec"
    with pytest.raises(FileRefused, match="symbolic link"):
        read_regular(tmp_path / "link", 10)
    with pytest.raises(FileRefused, match="character device"):
        read_regular("/dev/zero", 10, follow_links=True)


def test_a_missing_file_passes_through_and_a_missing_log_is_empty(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_store_file(tmp_path / "nothing", 10)
    assert read_store_log(tmp_path / "stdout.log") == ""


def test_json_that_is_not_json_or_nested_past_recursion_is_named_damage(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text("[" * 100_000)
    with pytest.raises(StoreError, match="is damaged: not JSON") as error:
        read_store_json(path, 1 << 20)
    assert error.value.exit_code == ExitCode.FAILED


def test_a_log_past_its_limit_is_read_from_its_end_saying_what_was_left_out(tmp_path):
    path = tmp_path / "stdout.log"
    path.write_bytes(b"".join(b"line %d\n" % n for n in range(10_000)))
    tail = read_store_tail(path, 1000)
    first, rest = tail.split(b"\n", 1)
    assert first.startswith(b"[xlarun: the first ") and str(path).encode() in first
    assert rest.startswith(b"line ") and rest.endswith(b"line 9999\n") and len(rest) <= 1000
    assert int(first.split()[3].replace(b",", b"")) + len(rest) == path.stat().st_size
    assert read_store_tail(path, 1 << 20) == path.read_bytes()
