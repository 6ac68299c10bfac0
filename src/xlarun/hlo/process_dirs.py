"""Which process of a many-process job a dump file comes from.

A job launched as N processes (``processes: N`` in a spec) dumps each process's files into ``process-K/`` of
the run's dump folder (``xlarun import`` of per-host folders does the same). XLA numbers modules per process,
so process 0 and process 1 both write ``module_0005``: in the run, process K's module ``N`` is module
``K * PROCESS_STRIDE + N`` (process 1's ``module_0005`` is ``module_1000005``), and process 0's keep XLA's ids.
"""

from __future__ import annotations

import re

#: Process K's module ids start at K * PROCESS_STRIDE.
PROCESS_STRIDE = 1_000_000
#: The most processes one run may have.
MAX_PROCESSES = 64

_PROCESS_DIR = re.compile(r"process-(\d{1,2})")


def process_dir(process: int) -> str:
    """The folder of process ``process``'s dump below the run's dump folder: ``process-1``."""
    return f"process-{process}"


def process_of_dir(name: str) -> int | None:
    """The process a top folder name stands for (``process-1`` -> 1), None for any other name."""
    match = _PROCESS_DIR.fullmatch(name)
    return int(match.group(1)) if match and int(match.group(1)) < MAX_PROCESSES else None


def run_module_id(process: int, xla_module_id: int | None) -> int | None:
    """The id a module of process ``process`` has in the run (XLA's id for process 0); None for None."""
    return None if xla_module_id is None else process * PROCESS_STRIDE + xla_module_id


def xla_module_id(module_id: int, process: int | None) -> int:
    """XLA's id of a run's module (what its file names say), given its process."""
    return module_id - (process or 0) * PROCESS_STRIDE
