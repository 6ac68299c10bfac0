"""Reading a spec within bounds (capture/spec_reader.py): the file's bytes, the YAML's depth, values and characters with
aliases expanded, recursive aliases, numbers too long to read. Every refusal is a SpecError (exit 2) naming the limit."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from xlarun.capture.spec_reader import MAX_DEPTH, MAX_SPEC_BYTES, MAX_VALUES, read_spec_file, read_yaml
from xlarun.errors import ExitCode, SpecError


def refusal(text: str) -> str:
    with pytest.raises(SpecError) as info:
        read_yaml(text, "s.yaml")
    assert info.value.exit_code == ExitCode.USAGE
    return info.value.message


def laughs(levels: int, width: int = 9) -> str:
    """A "billion laughs": each anchor a list of ``width`` aliases of the one before (width ** levels values)."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\nname: t\n"


@pytest.mark.parametrize("levels", [5, 6, 7, 8])
def test_a_billion_laughs_is_refused_at_the_anchor_that_passes_the_limit(levels):
    tracemalloc.start()
    try:
        message = refusal(laughs(levels))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # 9 ** 4 = 6,561 values fit; a4 (59,049) is the first anchor over 10,000, at line 5 column 5, whatever the depth
    assert message == f"s.yaml:5:5 with its aliases expanded, this value holds more than {MAX_VALUES:,} values"
    assert peak < 32 << 20  # each node measured once: 8 levels took 12 GB when every alias was walked


def test_aliases_within_the_limit_are_read_and_counted_exactly():
    # 1 list + 999 aliases of a 10-value list (the list and its 9 items) = 9,991 values: read; 1,000 aliases: 10,001
    base = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: [" + ", ".join(["*a"] * 998) + "]\n"
    data, _node = read_yaml(base, "s.yaml")
    assert len(data["b"]) == 998 and data["b"][0] == list(range(1, 10))
    over = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: [" + ", ".join(["*a"] * 1000) + "]\n"
    assert "more than 10,000 values" in refusal(over)


def test_text_repeated_by_aliases_is_bounded_in_characters():
    text = f"a: &a {'x' * 100_000}\nb: [{', '.join(['*a'] * 11)}]\n"
    assert refusal(text) == "s.yaml:2:4 with its aliases expanded, this value holds more than 1,048,576 characters"


@pytest.mark.parametrize(
    "text",
    ["name: &r [*r]\n", "name: &r {a: *r}\n", "name: &r {<<: *r}\n", "a: &r [[x, [*r]]]\n"],
    ids=["list", "mapping", "merge", "nested"],
)
def test_a_recursive_alias_is_refused(text):
    assert refusal(text).endswith("an alias refers to a value that contains it (a recursive alias)")


def test_nesting_is_bounded_as_written_and_through_aliases():
    assert refusal("a: " + "[" * 40 + "]" * 40 + "\n").endswith(f"nested deeper than {MAX_DEPTH} levels")
    assert refusal("a: " + "[" * 32 + "]" * 32 + "\n").startswith("s.yaml:1:")  # 33 levels with the top mapping
    chain = "a0: &a0 [x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 40))
    assert refusal(chain).endswith(f"nested deeper than {MAX_DEPTH} levels (aliases expanded)")
    read_yaml("a: " + "[" * 31 + "]" * 31 + "\n", "s.yaml")  # 32 levels with the top mapping: read


def test_values_python_cannot_make_are_refused_at_their_position():
    assert refusal("name: t\ntimeout: " + "9" * 5000 + "\n") == "s.yaml:2:10 a whole number of 5,000 characters is too long"
    assert refusal("name: 2001-13-45\n").startswith("s.yaml:1:7 cannot read this value: month must be in 1..12")


def test_syntax_errors_keep_their_position():
    assert refusal("name: [\n").startswith("s.yaml:2:1 YAML syntax error:")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match=r"spec.yaml: is a FIFO \(named pipe\), not a spec file"):
        read_spec_file(fifo)  # opened non-blocking: before, this waited for a writer forever


def test_devices_and_folders_are_refused(tmp_path):
    with pytest.raises(SpecError, match=r"^/dev/zero: is a character device, not a spec file$"):
        read_spec_file("/dev/zero")  # before, read until MemoryError
    with pytest.raises(SpecError, match="is a folder, not a spec file"):
        read_spec_file(tmp_path)
    with pytest.raises(SpecError, match="no such spec file"):
        read_spec_file(tmp_path / "missing.yaml")


def test_a_file_over_the_limit_is_refused_and_one_at_it_is_read(tmp_path):
    at_limit, over = tmp_path / "at.yaml", tmp_path / "over.yaml"
    at_limit.write_bytes(b"#" * MAX_SPEC_BYTES)
    over.write_bytes(b"#" * (MAX_SPEC_BYTES + 1))
    assert len(read_spec_file(at_limit)) == MAX_SPEC_BYTES
    with pytest.raises(SpecError, match=r"over.yaml: larger than 1 MiB, the most a spec may be"):
        read_spec_file(over)


def test_a_symlink_loop_as_the_spec_is_refused(tmp_path):
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    with pytest.raises(SpecError, match=r"a\.yaml: cannot open the spec: Too many levels of symbolic links"):
        read_spec_file(tmp_path / "a.yaml")


def test_text_that_is_not_utf8_is_refused(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(SpecError, match=r"s.yaml: not UTF-8 text \(byte 9\)"):
        read_spec_file(spec)


def test_values_as_written_are_counted_while_composing():
    text = "args: [" + ",".join(["1"] * 400_000) + "]\n"  # 800 KB: under the file bound, 40 times the value bound
    tracemalloc.start()
    try:
        message = refusal(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the 10,001st node: the top mapping, its key and the list come first, so item 9,997 (column 8 + 2 * 9,997)
    assert message == f"s.yaml:1:{8 + 2 * 9997} the spec holds more than {MAX_VALUES:,} values"
    assert peak < 64 << 20  # composing all 400,000 took 345 MB before the count


@pytest.mark.parametrize(
    "value", ["!!timestamp 'x'", "!!int 'x'", "!!float 'x'", "!!python/none ''", "!!bool 'maybe'", "!!omap [a]"]
)
def test_an_explicit_tag_python_cannot_build_is_refused_at_its_position(value):
    # these raised AttributeError, ValueError or TypeError out of PyYAML: exit 4 (found by a 15,000-spec fuzz)
    assert refusal(f"name: t\ntags: {{t: {value}}}\n").startswith("s.yaml:2:")
