"""Synthetic stores for the index and REF tests: small hand-written HLO dumps under real XLA file names,
archived, committed and indexed by the store's own functions (no JAX, a few milliseconds a run)."""

from __future__ import annotations

import json

from xlarun.store.facade import LocalStore

SOURCE = "/home/user/project/model.py"


def hlo_module(name: str, *, dots: int = 1, adds: int = 0, scale: float = 3.0, source: str = SOURCE, line: int = 10) -> str:
    """A before_optimizations module: ``dots`` chained matmuls, ``adds`` chained adds, a tanh, a scale and a reduce.

    Instructions: 11 + dots + adds (2 parameters, tanh, 2 constants, broadcast, multiply, reduce; 3 in the region)."""

    def meta(op: str, at: int) -> str:
        return f'metadata={{op_name="jit({name.removeprefix("jit_")})/{op}" source_file="{source}" source_line={at}}}'

    body = ["  x.1 = f32[4,4]{1,0} parameter(0)", "  w.2 = f32[4,4]{1,0} parameter(1)"]
    last = "x.1"
    for i in range(dots):
        body.append(
            f"  dot.{10 + i} = f32[4,4]{{1,0}} dot({last}, w.2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, {meta('dot_general', line + i)}"
        )
        last = f"dot.{10 + i}"
    for i in range(adds):  # elementwise bulk, as an RNG module has: many instructions, no compute op
        body.append(f"  add.{50 + i} = f32[4,4]{{1,0}} add({last}, x.1)")
        last = f"add.{50 + i}"
    body += [
        f"  tanh.30 = f32[4,4]{{1,0}} tanh({last}), {meta('tanh', line + dots)}",
        f"  constant.31 = f32[] constant({scale:g})",
        "  broadcast.32 = f32[4,4]{1,0} broadcast(constant.31), dimensions={}",
        f"  multiply.33 = f32[4,4]{{1,0}} multiply(tanh.30, broadcast.32), {meta('mul', line + dots)}",
        "  constant.34 = f32[] constant(0)",
        f"  ROOT reduce.35 = f32[] reduce(multiply.33, constant.34), dimensions={{0,1}}, to_apply=region_0.1, {meta('reduce_sum', line + dots + 1)}",
    ]
    return (
        f"HloModule {name}, entry_computation_layout={{(f32[4,4]{{1,0}}, f32[4,4]{{1,0}})->f32[]}}\n\n"
        "region_0.1 {\n  a.2 = f32[] parameter(0)\n  b.3 = f32[] parameter(1)\n  ROOT add.4 = f32[] add(a.2, b.3)\n}\n\n"
        f"ENTRY main.40 {{\n" + "\n".join(body) + "\n}\n"
    )


def optimized_module(name: str) -> str:
    """A cpu_after_optimizations module: the elementwise work fused (5 instructions in all computations)."""
    return (
        f"HloModule {name}, is_scheduled=true, entry_computation_layout={{(f32[4,4]{{1,0}}, f32[4,4]{{1,0}})->f32[]}}\n\n"
        "fused_computation {\n  param_0.1 = f32[4,4]{1,0} parameter(0)\n  ROOT tanh.0 = f32[4,4]{1,0} tanh(param_0.1)\n}\n\n"
        "ENTRY main.9 {\n  x.1 = f32[4,4]{1,0} parameter(0)\n  w.2 = f32[4,4]{1,0} parameter(1)\n"
        "  ROOT fusion.3 = f32[4,4]{1,0} fusion(x.1), kind=kLoop, calls=fused_computation\n}\n"
    )


def module_dumps(
    module_id: int,
    name: str,
    *,
    dots: int = 1,
    adds: int = 0,
    scale: float = 3.0,
    optimized: bool = True,
    passes: int = 0,
    source: str = SOURCE,
) -> dict[str, str]:
    """The text files XLA writes for one module, under XLA's names; ``passes`` per-pass dumps (as --xla_dump_hlo_pass_re)."""
    label = f"module_{module_id:04d}.{name}"
    files = {f"{label}.before_optimizations.txt": hlo_module(name, dots=dots, adds=adds, scale=scale, source=source)}
    if optimized:
        files[f"{label}.cpu_after_optimizations.txt"] = optimized_module(name)
        files[f"{label}.cpu_after_optimizations-buffer-assignment.txt"] = (
            "BufferAssignment:\nallocation 0: size 64, parameter 0\n"
        )
    for step, (pipeline, after, before) in enumerate(PASSES[:passes]):
        text = hlo_module(name, dots=dots, adds=adds, scale=scale, source=source) if step < passes - 1 else optimized_module(name)
        files[f"{label}.{step:04d}.{pipeline}.after_{after}.before_{before}.txt"] = text
    return files


#: (pipeline, after pass, before pass) of the first steps of a real jax 0.10.2 CPU pass-by-pass dump
PASSES = [
    ("simplification", "pipeline-start", "algsimp"),
    ("HLO_passes_through_layout_assignment", "transpose-folding", "cse"),
    ("HLO_passes_through_layout_assignment", "layout-assignment", "sub-byte-size-setter"),
    ("cpu-pipeline", "fusion", "cse"),
]


def archive_run(
    store: LocalStore,
    files: dict[str, str | bytes],
    *,
    run_id: str,
    name: str = "mlp",
    batch_id: str | None = None,
    matrix: dict | None = None,
    status: str = "succeeded",
    kind: str = "capture",
    other: dict[str, str | bytes] | None = None,
) -> str:
    """Commit one run of ``files`` (XLA dump names, written under dump/) and ``other`` (paths beside it, e.g. tf_graphs/),
    then index it; returns the run id."""
    run_id, staging = store.begin_run(run_id)
    for rel, content in [*(("dump/" + k, v) for k, v in files.items()), *(other or {}).items()]:
        path = staging / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    stored = store.archive_outputs(staging)
    manifest = {
        "name": name,
        "kind": kind,
        "status": status,
        "exit_code": 0 if status == "succeeded" else 1,
        "backend": "local",
        "framework": "jax",
        "started": _started(run_id),
        "ended": _started(run_id),
        "duration_s": 1.5,
        "batch_id": batch_id,
        "matrix": matrix,
        "tags": {},
    }
    store.commit_run(run_id, staging, stored, {"manifest.json": json.dumps(manifest)})
    store.ingest(run_id)
    return run_id


def _started(run_id: str) -> str:
    day, time = run_id.split("-")[:2]
    return f"{day[:4]}-{day[4:6]}-{day[6:]}T{time[:2]}:{time[2:4]}:{time[4:]}+00:00"
