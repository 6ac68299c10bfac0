"""safe_names: the run ids, metadata names and paths a write may be given."""

from __future__ import annotations

import pytest

from xlarun.errors import ExitCode, InputError, StoreError
from xlarun.safe_names import checked_member_name, checked_relative_path, checked_run_id, relative_path_problem, store_damage


@pytest.mark.parametrize("path", ["module_0001.jit_f.before_optimizations.txt", "tf_graphs/a/b.pbtxt", "./a/./b", "a..b/c.."])
def test_a_relative_path_below_its_folder_is_taken(path):
    assert relative_path_problem(path) is None and checked_relative_path(path, "x") == path


@pytest.mark.parametrize(
    "path, problem",
    [
        ("../x", "path traversal ('..')"),
        ("dump/../../x", "path traversal ('..')"),
        ("/etc/passwd", "absolute path"),
        ("C:/x", "absolute path"),
        ("", "empty name"),
        ("./", "empty name"),
        ("a\x00b", "NUL in name"),
    ],
)
def test_a_path_that_leaves_its_folder_is_refused_naming_it(path, problem):
    assert relative_path_problem(path) == problem
    with pytest.raises(InputError) as refused:
        checked_relative_path(path, "run r's files.json")
    assert refused.value.message == f"run r's files.json names the file {path!r}: {problem}"
    with pytest.raises(StoreError) as damage:
        checked_relative_path(path, "files.json", store_damage)
    assert damage.value.exit_code == ExitCode.FAILED


@pytest.mark.parametrize("run_id", ["20261122-103015-a1b2", "r1", "run_1.b"])
def test_run_ids_are_plain_names(run_id):
    assert checked_run_id(run_id, "x") == run_id


@pytest.mark.parametrize("run_id", ["../../X", "a/b", ".hidden", "..", "", "x" * 129, None, "a\x00"])
def test_a_run_id_that_is_not_one_is_refused(run_id):
    with pytest.raises(InputError, match="not a run id"):
        checked_run_id(run_id, "a shipment")


def test_metadata_names_are_plain_and_of_the_allowed():
    allowed = ("manifest.json", "stdout.log")
    assert checked_member_name("stdout.log", "s", allowed) == "stdout.log"
    for bad in ("../../../X", "files.json", "/abs", ".x"):
        with pytest.raises(InputError, match="names the file"):
            checked_member_name(bad, "s", allowed)
    for bad in ("a/b", "..", ".x", ""):
        with pytest.raises(InputError, match="not a plain file name"):
            checked_member_name(bad, "s")
