"""How a module's memory is printed: ``xlarun memory REF`` and the peak column of ``xlarun modules`` (for the CLI
and the Python front door alike)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xlarun.console import echo, human_bytes, print_pairs, print_table, say

if TYPE_CHECKING:
    from xlarun.navigate.peak_memory import ModuleMemory

#: Buffers listed by ``xlarun memory`` unless told (--top).
DEFAULT_TOP_BUFFERS = 15


def _bytes(size: int | None) -> str:
    if size is None:
        return ""
    return human_bytes(size) if size < 1024 else f"{human_bytes(size)} ({size:,} B)"


def print_module_memory(found: ModuleMemory) -> None:
    """The peak, what makes it up, and the biggest buffers live at the peak."""
    say(f"[bold]{found.ref}[/bold] ({found.name or 'unnamed'}): peak {human_bytes(found.peak_bytes)}")
    at = (
        f" at #{found.peak_position} {found.peak_instruction or ''} (program order)".rstrip()
        if found.peak_position is not None
        else ""
    )
    print_pairs(
        [
            ("peak", f"{_bytes(found.peak_bytes)}: parameters + outputs + temporaries - aliased, held during a call"),
            ("parameters", _bytes(found.parameter_bytes)),
            ("outputs", _bytes(found.output_bytes)),
            ("temporaries", _bytes(found.temporary_bytes)),
            ("aliased", f"{_bytes(found.aliased_bytes)}: donated parameters reused for outputs"),
            ("constants", f"{_bytes(found.constant_bytes)}: the executable's, not counted in the peak"),
            ("live values", f"{_bytes(found.live_peak_bytes)}{at}" if found.live_peak_bytes is not None else None),
            ("allocations", f"{found.allocations}, {_bytes(found.allocated_bytes)} in all"),
        ]
    )
    heading = "buffers live at the peak" if found.buffers_at_peak else "biggest buffers"
    if found.buffers:
        say(f"{heading}, biggest first:")
        print_table(
            ["instruction", "kind", "shape", "size", "opcode", "source"],
            [
                [
                    b.instruction + (b.shape_index if b.shape_index != "{}" else ""),
                    b.kind,
                    b.shape or "",
                    human_bytes(b.size),
                    b.opcode or "",
                    ", ".join(s.rpartition("/")[2] for s in b.sources[:2]),
                ]
                for b in found.buffers
            ],
            right=["size"],
        )
    for note in found.notes:
        echo(note)
