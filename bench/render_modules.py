"""Synthetic HLO modules for the render benchmark, written by this code (nothing downloaded): a module of about N
instructions in one of three shapes.

- ``mixed``: a quarter each of a long chain of elementwise ops, a wide fan-out (one value read by many ops, their
  results gathered in the root tuple), loop fusions (a fusion instruction calling a fused computation of a few ops)
  and while loops (a body of a dozen ops and a condition each), as an optimized module has them;
- ``chain``: one chain of elementwise ops from a parameter to the root;
- ``fanout``: one parameter read by every op, their results gathered in the root tuple.

Every instruction has an ``op_name`` in its metadata, as JAX writes them.
"""

from __future__ import annotations

SHAPES = ("mixed", "chain", "fanout")
_OPS = ("add", "multiply", "subtract", "maximum")
_UNARY = ("negate", "tanh", "exponential", "abs")
_T = "f32[128,256]{1,0}"  # the tensor every op works on
_S = "s32[]"


def synthetic_module(n: int, shape: str = "mixed") -> str:
    """HLO text of a module of about ``n`` instructions (counted over every computation) of ``shape``."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}: {', '.join(SHAPES)}")
    writer = _Writer()
    if shape == "chain":
        writer.chain(n - 2)
    elif shape == "fanout":
        writer.fanout(n - 3)
    else:
        quarter = n // 4
        writer.chain(quarter)
        writer.fanout(quarter)
        writer.fusions(quarter)
        writer.loops(n - 3 * quarter - 4)
    return writer.text(f"synthetic_{shape}_{n}")


class _Writer:
    def __init__(self) -> None:
        self.computations: list[str] = []  # called computations, written before the entry
        self.entry: list[str] = [f"  %p.0 = {_T} parameter(0)", f"  %p.1 = {_T} parameter(1)"]
        self.outputs: list[str] = []
        self.counter = 0
        self.last = "p.0"

    def _name(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}.{self.counter}"

    def _op(self, opcode: str, operands: list[str], scope: str) -> str:
        name = self._name(opcode)
        args = ", ".join(f"%{o}" for o in operands)
        self.entry.append(f'  %{name} = {_T} {opcode}({args}), metadata={{op_name="jit(step)/{scope}/{opcode}"}}')
        return name

    def chain(self, count: int) -> None:
        for i in range(count):
            opcode = _UNARY[i % len(_UNARY)] if i % 3 else _OPS[i % len(_OPS)]
            operands = [self.last] if opcode in _UNARY else [self.last, "p.1"]
            self.last = self._op(opcode, operands, f"chain/layer{i // 50}")
        self.outputs.append(self.last)

    def fanout(self, count: int) -> None:
        source = self.last
        for i in range(count):
            self.outputs.append(self._op(_UNARY[i % len(_UNARY)], [source], f"fanout/head{i // 64}"))

    def fusions(self, budget: int) -> None:
        """Fusion instructions of 6 instructions each (the fusion + a fused computation of 2 parameters and 3 ops)."""
        value = self.last
        for i in range(budget // 6):
            fused = f"fused_computation.{i}"
            self.computations.append(
                f"%{fused} (param_0: f32[128,256], param_1: f32[128,256]) -> f32[128,256] {{\n"
                f"  %param_0 = {_T} parameter(0)\n  %param_1 = {_T} parameter(1)\n"
                f"  %m = {_T} multiply(%param_0, %param_1)\n  %e = {_T} exponential(%m)\n"
                f"  ROOT %a = {_T} add(%e, %param_0)\n}}\n"
            )
            name = self._name("fusion")
            self.entry.append(
                f"  %{name} = {_T} fusion(%{value}, %p.1), kind=kLoop, calls=%{fused}, "
                f'metadata={{op_name="jit(step)/fused/block{i // 20}/mul_exp_add"}}'
            )
            value = name
        self.outputs.append(value)
        self.last = value

    def loops(self, budget: int) -> None:
        """While loops of 24 instructions each: the body (15), the condition (4), and 5 in the entry."""
        state = f"({_S}, {_T})"
        value = self.last
        for i in range(budget // 24):
            body, cond = f"body.{i}", f"cond.{i}"
            ops = [f"  %x.0 = {_T} get-tuple-element(%s), index=1"]
            for k in range(1, 10):
                opcode = _UNARY[k % len(_UNARY)]
                ops.append(f"  %x.{k} = {_T} {opcode}(%x.{k - 1})")
            self.computations.append(
                f"%{body} (s: {state}) -> {state} {{\n  %s = {state} parameter(0)\n"
                f"  %i = {_S} get-tuple-element(%s), index=0\n  %one = {_S} constant(1)\n  %next = {_S} add(%i, %one)\n"
                + "\n".join(ops)
                + f"\n  ROOT %t = {state} tuple(%next, %x.9)\n}}\n"
            )
            self.computations.append(
                f"%{cond} (s: {state}) -> pred[] {{\n  %s = {state} parameter(0)\n"
                f"  %i = {_S} get-tuple-element(%s), index=0\n  %n = {_S} constant(8)\n"
                f"  ROOT %lt = pred[] compare(%i, %n), direction=LT\n}}\n"
            )
            zero, init, loop, out = self._name("zero"), self._name("init"), self._name("while"), self._name("out")
            self.entry += [
                f"  %{zero} = {_S} constant(0)",
                f"  %{init} = {state} tuple(%{zero}, %{value})",
                f'  %{loop} = {state} while(%{init}), condition=%{cond}, body=%{body}, metadata={{op_name="jit(step)/loop{i}/while"}}',
                f"  %{out} = {_T} get-tuple-element(%{loop}), index=1",
            ]
            value = self._op("add", [out, "p.1"], f"loop{i}/after")
        self.outputs.append(value)

    def text(self, name: str) -> str:
        shapes = ", ".join([_T] * len(self.outputs))
        root = ", ".join(f"%{o}" for o in self.outputs)
        entry = "\n".join([*self.entry, f"  ROOT %result = ({shapes}) tuple({root})"])
        header = f"HloModule {name}, entry_computation_layout={{({_T}, {_T})->({shapes})}}\n\n"
        return (
            header
            + "\n".join(self.computations)
            + f"\nENTRY %main (a: f32[128,256], b: f32[128,256]) -> ({shapes}) {{\n{entry}\n}}\n"
        )
