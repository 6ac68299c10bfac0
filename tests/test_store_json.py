"""store/store_json.py: the store's JSON files parsed within a depth bound and checked for the shape xlarun writes."""

from __future__ import annotations

import json

import pytest

from xlarun.store.store_json import (
    MAX_DEPTH,
    StoreJsonDamage,
    checked_file_entries,
    checked_manifest,
    parse_store_json,
)


def test_nesting_past_the_bound_is_refused_before_the_parser_recurses():
    with pytest.raises(StoreJsonDamage, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_store_json("[" * 100_000 + "]" * 100_000)
    assert parse_store_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


def test_brackets_inside_strings_are_not_nesting():
    text = json.dumps({"command": ["[" * 500, "{" * 500, 'a \\" ] quote']})
    assert parse_store_json(text)["command"][0] == "[" * 500


def test_bytes_that_are_not_utf8_or_not_json_are_named():
    with pytest.raises(StoreJsonDamage, match="not UTF-8"):
        parse_store_json(b"\xff\xfe{}")
    with pytest.raises(StoreJsonDamage, match="not valid JSON"):
        parse_store_json("{'single': 'quotes'}")


def test_a_manifest_key_of_a_type_xlarun_never_writes_is_damage():
    assert checked_manifest({"name": "x", "exit_code": None, "tags": {"a": "b"}})["name"] == "x"
    for bad, words in (
        ([], "a JSON array, not an object"),
        ({"name": 5}, "its 'name' is a JSON number"),
        ({"exit_code": True}, "its 'exit_code' is a JSON boolean"),
        ({"files": 10**30}, "its 'files' is a number past what the index stores"),
        ({"tags": {"a": 1}}, "not text"),
    ):
        with pytest.raises(StoreJsonDamage, match=words):
            checked_manifest(bad)


def test_a_file_list_with_a_path_twice_or_an_impossible_size_is_damage():
    entry = {"path": "a.txt", "digest": "d" * 64, "size": 3}
    assert checked_file_entries([entry]) == [("a.txt", "d" * 64, 3)]
    for bad, words in (
        ([entry, entry], "listed twice"),
        ([{**entry, "size": 10**30}], "not a byte count"),
        ([{**entry, "size": -1}], "not a byte count"),
        ([{**entry, "path": None}], "lacks a text path"),
        ({"path": "a"}, "not a list"),
        (["a.txt"], "entry 0 is a JSON string"),
    ):
        with pytest.raises(StoreJsonDamage, match=words):
            checked_file_entries(bad)


def test_a_store_file_that_is_not_an_object_is_a_store_error_naming_it(tmp_path):
    from xlarun.errors import StoreError
    from xlarun.store.store_json import judged_object

    path = tmp_path / "spec.resolved.json"
    assert judged_object('{"workdir": "/w"}', path) == {"workdir": "/w"}
    for text, words in (("[1]", "a JSON array, not an object"), ("[" * 5000, "nested deeper than")):
        with pytest.raises(StoreError, match=words) as raised:
            judged_object(text, path)
        assert str(path) in raised.value.message and raised.value.exit_code == 3
