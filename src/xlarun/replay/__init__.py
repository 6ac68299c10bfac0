"""Replay dumped HLO modules: the built-in PJRT engine, or XLA's own runners.

Public API::

    from xlarun.replay import ReplayOptions, replay_file, choose_replay_input

    result = replay_file("dump/module_0012.jit_f.snapshot.928779095.pb", ReplayOptions(iterations=5))
    result.verdict        # "match" | "mismatch" | "ran" | "engine-error"
    result.max_abs_error, result.compile_s, result.median_s

Engines: ``pjrt`` (built in, on jaxlib 0.4.30 to 0.12; :mod:`.engine`), ``run_hlo_module`` and ``hlo_runner_main``
(:mod:`.drivers`), ``auto`` (pjrt when jaxlib imports, else the first runner found).
Every private jaxlib name lives in :mod:`.pjrt` (and, for N devices, :mod:`.multidevice`).
A module partitioned over N devices is replayed on N devices (:mod:`.partitioned`); the worker's child then
has N host devices.

A replay is one pipeline, each stage a module that knows only the stages before it::

    resolve  (.resolve)     which engine, which files; the worker's child (.worker, .worker_child) or here
    plan     (.plan)        platforms, devices and partitioning: a partitioned module is a property of the plan
    compile  (.compiled)    one device, or placed on N (.placed); both by the rules of .recompile
    inputs   (.inputs)      the snapshot's arguments, or seeded fake data
    run      (.run)         --iterations runs, the outputs brought back
    compare  (.reference)   every reference the plan has (.compare: the element rules)
    verdict  (.verdict)     match, mismatch, ran or engine-error, with notes on the outputs
    record   (.record)      the replay's JSON record in the store and its row in the index

:mod:`.engine` runs plan to verdict; XLA's runners (:mod:`.drivers`) take a module from resolve to verdict
themselves.
"""

from __future__ import annotations

from xlarun.replay.choose import ReplayChoice, choose_replay_input
from xlarun.replay.options import ReplayOptions
from xlarun.replay.resolve import replay_file, replay_here, resolve_engine
from xlarun.replay.result import INPUT_KINDS, VERDICTS, OutputSummary, ReplayResult

__all__ = [
    "INPUT_KINDS",
    "VERDICTS",
    "OutputSummary",
    "ReplayChoice",
    "ReplayOptions",
    "ReplayResult",
    "choose_replay_input",
    "replay_file",
    "replay_here",
    "resolve_engine",
]
