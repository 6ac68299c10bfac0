"""The replay worker's child process (``python -m xlarun.replay.worker_child``): it answers the requests of
:class:`.worker.ReplayWorker`, a replay on the built-in engine (:func:`.resolve.replay_here`) or a conversion
(:func:`.convert.convert_hlo`), in this process, where XLA may abort. The protocol: :mod:`.worker`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from xlarun.replay.child import serve
from xlarun.replay.options import ReplayOptions


def _handle(request: dict, send: Callable[[dict], None]) -> dict:
    def read(key: str) -> bytes | None:
        return Path(request[key]).read_bytes() if request.get(key) else None

    if request["kind"] == "convert":
        from xlarun.replay.convert import convert_hlo

        send({"stage": "convert"})
        converted = convert_hlo(request["path"], request["to"], read("data_file"), in_process=True)
        Path(request["output"]).write_bytes(converted.data)
        return {"converted": {"module_name": converted.module_name, "warnings": converted.warnings}}
    from xlarun.replay.resolve import replay_here

    options = ReplayOptions(**{**request["options"], "isolate": "never"})
    result = replay_here(
        Path(request["path"]),
        options,
        lambda line: send({"log": line}),
        data=read("data_file"),
        unoptimized=request["unoptimized"],
        unoptimized_data=read("unoptimized_data_file"),
        snapshot=request["snapshot"],
        snapshot_data=read("snapshot_data_file"),
        stage=lambda name: send({"stage": name}),
        optimized_failure=request["optimized_failure"],
    )
    return {"result": result.to_dict()}


def _main(argv: list[str]) -> int:
    """``python -m xlarun.replay.worker_child ADDRESS_SPACE_LIMIT PARENT_PID``."""
    return serve(_handle, parent=int(argv[-1]), address_space=int(argv[0]))


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
