"""Hostile run specs (tests/hostile_specs.py, 40 kinds): `xlarun capture SPEC --json` ends each with a documented exit
code, one error line, one JSON document on stdout and no secret printed back; never a traceback, exit 4 or a hang."""

from __future__ import annotations

import json

import pytest

from ..hostile_specs import SECRET, SPECS, write_specs

pytestmark = pytest.mark.slow  # torture: kills, signals, damaged stores, hostile inputs

#: Specs that are valid (or that xlarun reads leniently, as YAML does): the tiny job runs, dumps nothing, exit 1.
RUNS = {"duplicate-keys", "env-newline-flag", "huge-file", "huge-timeout", "python-missing"}


@pytest.mark.timeout(600)  # a hang fails the test (in process: 10x faster than a process per spec)
def test_every_hostile_spec_is_refused_or_run_cleanly(tmp_path, figures, cli):
    specs = write_specs(tmp_path / "specs")
    store = tmp_path / "store"
    crashes, hangs, leaks, not_json, several_lines, unexpected = [], [], [], [], [], []  # hangs: the timeout above
    codes: dict[int, int] = {}
    for name, path in specs.items():
        result = cli("capture", path, "--json", "--store", store)
        out, err, returncode = result.stdout, result.stderr, result.exit_code
        codes[returncode] = codes.get(returncode, 0) + 1
        if returncode not in (0, 1, 2, 3) or "Traceback" in err:
            crashes.append((name, returncode, err[-300:]))
        if SECRET in out or SECRET in err:
            leaks.append(name)
        try:
            json.loads(out)
        except json.JSONDecodeError:
            not_json.append((name, out[:120]))
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        if returncode == 2 and len(errors) != 1:
            several_lines.append((name, err[-300:]))
        if (returncode == 1) != (name in RUNS) or returncode not in (1, 2):
            unexpected.append((name, returncode))
    check = cli("check", "--store", store)
    figures(
        trials=len(specs),
        exit_codes=dict(sorted(codes.items())),
        exit4_crashes=len(crashes),
        hangs=len(hangs),
        leaked_secrets=len(leaks),
        not_json=len(not_json),
        store_sound=check.exit_code == 0,
    )
    assert len(SPECS) >= 30
    assert not crashes and not hangs and not leaks, (crashes, hangs, leaks)
    assert not not_json and not several_lines, (not_json, several_lines)
    assert not unexpected, unexpected  # 2 for what is refused, 1 for the jobs that ran and dumped nothing
    assert check.exit_code == 0, check.output
