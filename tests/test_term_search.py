"""find's query (store/term_search.py) against a plain reading of the same index: every (module, term) pair read
through the ``terms`` view and ``modules``, matched and grouped in Python, on the bundled JAX example captured for
real."""

from __future__ import annotations

import pytest

from xlarun.store.index import TERM_KINDS
from xlarun.store.term_search import find_terms


def _plainly(conn, text, kinds, run_id, exact, limit):
    """What find must answer, the slow obvious way."""
    names = {(r, m): n for r, m, n in conn.execute("SELECT run_id, module_id, name FROM modules")}
    grouped: dict[tuple, list[str]] = {}
    for run, module_id, kind, value in conn.execute("SELECT run_id, module_id, kind, value FROM terms"):
        if kind not in kinds or (run_id and run != run_id) or (run, module_id) not in names:
            continue
        if value == text if (kind == "opcode" or exact) else text in value:
            grouped.setdefault((run, module_id, kind), []).append(value)
    return [(r, m, names[(r, m)], k, sorted(v)[:limit]) for (r, m, k), v in sorted(grouped.items())]


@pytest.mark.parametrize(
    ("text", "kinds", "exact", "limit"),
    [
        ("add", TERM_KINDS, False, 5),  # an opcode and part of many names: many pairs, few lines
        ("dot", ("opcode",), False, 5),
        ("jit(", ("op_name",), False, 2),  # every op_name: each module's first two, in order
        (".py", ("source",), False, 3),
        ("add", ("name",), True, 5),  # whole values only: "add" is no instruction's name
        ("no-such-term", TERM_KINDS, False, 5),
    ],
)
def test_find_answers_what_a_plain_reading_of_the_index_does(jax_run, text, kinds, exact, limit):
    store, result = jax_run
    conn = store.index.conn
    for run_id in (None, result.run_id):
        found = [
            (h.run_id, h.module_id, h.module_name, h.kind, h.matches) for h in find_terms(conn, text, kinds, run_id, exact, limit)
        ]
        assert found == _plainly(conn, text, kinds, run_id, exact, limit)
    if text == "add" and not exact:  # the case the query was changed for: more pairs matched than lines shown
        pairs = conn.execute("SELECT count(*) FROM terms WHERE instr(value, 'add') > 0").fetchone()[0]
        assert pairs > len(found) * limit >= 5
        assert {h[3] for h in found} >= {"opcode", "name"}
