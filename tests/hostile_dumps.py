"""Hostile dump folders, made by a job as it runs: what a killed writer, a full disk, a confused script or a
malicious one can leave where XLA dumps. Nothing here is checked in as binary: every folder is generated.

Run as a script (``python hostile_dumps.py KIND DUMP_DIR``) it is the job of a capture: it writes the
folder KIND into DUMP_DIR (and may leave a writer running after it exits). :func:`expectation` says what
xlarun must make of it: files archived with their bytes, paths listed as not archived (and why), paths
archived with a caveat.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HLO = b"HloModule jit_f, entry_computation_layout={(f32[8]{0})->f32[8]{0}}\n\nENTRY main {\n  p = f32[8]{0} parameter(0)\n  ROOT t = f32[8]{0} tanh(p)\n}\n"
BEFORE = "module_0000.jit_f.before_optimizations.txt"
ROOT = os.geteuid() == 0  # chmod 000 does not stop root from reading


@dataclass
class Expectation:
    archived: dict[str, bytes | None] = field(default_factory=dict)  # archive name -> exact bytes (None: any)
    skipped: dict[str, str] = field(default_factory=dict)  # archive name -> words the reason contains
    caveats: dict[str, str] = field(default_factory=dict)  # archived, with a note containing these words
    at_least: int = 0  # for the huge ones: how many files at least


def _write(folder: Path, name: str | bytes, data: bytes) -> None:
    path = os.path.join(os.fsencode(folder), name if isinstance(name, bytes) else name.encode())
    with open(path, "wb") as out:
        out.write(data)


def _background(code: str) -> None:
    """A writer left running after the job exits (its process group is the job's)."""
    subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)


MAKERS = {}


def maker(fn):
    MAKERS[fn.__name__] = fn
    return fn


@maker
def empty_proto(d: Path) -> None:  # the case: a killed writer's 0-byte .hlo.pb
    _write(d, BEFORE, HLO)
    _write(d, "module_0097.jit_f.before_optimizations.hlo.pb", b"")


@maker
def only_empty_files(d: Path) -> None:
    for name in (BEFORE, "module_0000.jit_f.cpu_after_optimizations.txt", "empty.txt"):
        _write(d, name, b"")


@maker
def unreadable_file(d: Path) -> None:
    _write(d, BEFORE, HLO)
    _write(d, "secret.txt", b"no")
    os.chmod(d / "secret.txt", 0)


@maker
def unreadable_folder(d: Path) -> None:
    _write(d, BEFORE, HLO)
    (d / "locked").mkdir()
    _write(d / "locked", "inside.txt", b"in")
    os.chmod(d / "locked", 0)


@maker
def fifo(d: Path) -> None:
    _write(d, BEFORE, HLO)
    os.mkfifo(d / "pipe.hlo.pb")  # nobody ever writes: opening it for reading would block forever


@maker
def unix_socket(d: Path) -> None:
    _write(d, BEFORE, HLO)
    here = os.getcwd()
    os.chdir(d)  # a socket path is limited to 108 bytes: bind by a relative name
    try:
        socket.socket(socket.AF_UNIX).bind("listener.sock")
    finally:
        os.chdir(here)


@maker
def symlink_outside(d: Path) -> None:
    _write(d, BEFORE, HLO)
    os.symlink("/etc/passwd", d / "passwd.txt")


@maker
def symlink_sibling_dangling_and_loop(d: Path) -> None:
    _write(d, BEFORE, HLO)
    os.symlink(BEFORE, d / "alias.txt")
    os.symlink("/no/such/file", d / "dangling.txt")
    os.symlink("loop_b", d / "loop_a")
    os.symlink("loop_a", d / "loop_b")


@maker
def symlink_to_folder(d: Path) -> None:
    _write(d, BEFORE, HLO)
    os.symlink("/", d / "root")


@maker
def non_utf8_names(d: Path) -> None:
    _write(d, b"module_0001.jit_\xff\xfe.before_optimizations.txt", HLO)
    os.mkdir(os.path.join(os.fsencode(d), b"sub\xc3("))
    _write(d / os.fsdecode(b"sub\xc3("), "x.txt", b"x")


@maker
def escaped_name_clash(d: Path) -> None:
    _write(d, b"a\xff.txt", b"raw byte")
    _write(d, "a\\xff.txt", b"backslash")


@maker
def name_255_bytes(d: Path) -> None:
    _write(
        d, "module_0002.jit_" + "x" * (255 - len("module_0002.jit_.before_optimizations.txt")) + ".before_optimizations.txt", HLO
    )
    _write(d, "é" * 127 + "a", b"two-byte characters")  # 255 bytes in UTF-8


@maker
def control_and_markup_names(d: Path) -> None:
    for name in ("new\nline.txt", "\x1b[31mred.txt", "<img src=x onerror=alert(1)>.txt", "-rf", " spaced .txt", "quote\"'.txt"):
        _write(d, name, name.encode())


@maker
def deep_folders(d: Path) -> None:
    deep = d.joinpath(*["deep"] * 60)
    deep.mkdir(parents=True)
    _write(deep, "bottom.txt", b"bottom")


@maker
def ten_thousand_tiny_files(d: Path) -> None:
    for i in range(10_000):
        _write(d, f"tiny_{i:05d}.txt", b"%d" % i)


@maker
def big_sparse_file(d: Path) -> None:  # over the streaming threshold (64 MB), mostly a hole
    with open(d / "big.bin", "wb") as out:
        out.truncate(80 << 20)
        out.seek(40 << 20)
        out.write(b"middle")


@maker
def written_after_the_job_ends(d: Path) -> None:
    _write(d, BEFORE, HLO)
    _write(d, "growing.log", b"start\n")
    _background(
        f"import time\nf = open({str(d / 'growing.log')!r}, 'ab', buffering=0)\n"
        "for i in range(40):\n    f.write(b'more %d\\n' % i)\n    time.sleep(0.05)\n"
    )


@maker
def deleted_and_truncated_at_exit(d: Path) -> None:
    _write(d, BEFORE, HLO)
    _write(d, "doomed.txt", b"x" * 100_000)
    _write(d, "shrinking.txt", b"y" * 100_000)
    _background(
        f"import os, time\ntime.sleep(0.3)\nos.unlink({str(d / 'doomed.txt')!r})\n"
        f"open({str(d / 'shrinking.txt')!r}, 'wb').close()\n"
    )


@maker
def hard_links_and_duplicates(d: Path) -> None:
    _write(d, BEFORE, HLO)
    os.link(d / BEFORE, d / "module_0000.jit_f.before_optimizations.hlo.txt")
    for i in range(50):
        _write(d, f"same_{i}.txt", HLO)


@maker
def strange_times_and_modes(d: Path) -> None:
    _write(d, BEFORE, HLO)
    _write(d, "future.txt", b"f")
    os.utime(d / "future.txt", (4102444800, 4102444800))  # 2100
    _write(d, "epoch.txt", b"e")
    os.utime(d / "epoch.txt", (0, 0))
    _write(d, "setuid.txt", b"s")
    os.chmod(d / "setuid.txt", 0o4777)


@maker
def metadata_lookalikes(d: Path) -> None:
    for name in ("manifest.json", "files.json", "archived.json", "owner.pid", ".tmp-x"):
        _write(d, name, b'{"run_id": "evil"}')


@maker
def garbage_dump_names(d: Path) -> None:
    for name in (
        "module_.txt",
        "module_99999999999999999999.x.before_optimizations.txt",
        "module_0000..txt",
        "module_0003.jit_f.0001.p.after_.before_.txt",
        "module_0004.jit_f.before_optimizations.hlo.pb",
    ):
        _write(d, name, os.urandom(64))


@maker
def everything_at_once(d: Path) -> None:
    for name in ("empty_proto", "fifo", "symlink_outside", "non_utf8_names", "control_and_markup_names", "unreadable_file"):
        sub = d / name
        sub.mkdir()
        MAKERS[name](sub)


def expectation(kind: str) -> Expectation:
    """What a capture must make of the folder ``kind``."""
    e = Expectation()
    unreadable_reason = None if ROOT else "cannot be read"
    if kind == "empty_proto":
        e.archived = {BEFORE: HLO, "module_0097.jit_f.before_optimizations.hlo.pb": b""}
    elif kind == "only_empty_files":
        e.archived = {BEFORE: b"", "module_0000.jit_f.cpu_after_optimizations.txt": b"", "empty.txt": b""}
    elif kind == "unreadable_file":
        e.archived = {BEFORE: HLO}
        if ROOT:
            e.archived["secret.txt"] = b"no"
        else:
            e.skipped = {"secret.txt": unreadable_reason}
    elif kind == "unreadable_folder":
        e.archived = {BEFORE: HLO}
        if ROOT:
            e.archived["locked/inside.txt"] = b"in"
        else:
            e.skipped = {"locked": "cannot be listed"}
    elif kind == "fifo":
        e.archived, e.skipped = {BEFORE: HLO}, {"pipe.hlo.pb": "FIFO"}
    elif kind == "unix_socket":
        e.archived, e.skipped = {BEFORE: HLO}, {"listener.sock": "socket"}
    elif kind == "symlink_outside":
        e.archived, e.skipped = {BEFORE: HLO}, {"passwd.txt": "symbolic link"}
    elif kind == "symlink_sibling_dangling_and_loop":
        e.archived = {BEFORE: HLO}
        e.skipped = {n: "target is never read" for n in ("alias.txt", "dangling.txt", "loop_a", "loop_b")}
    elif kind == "symlink_to_folder":
        e.archived, e.skipped = {BEFORE: HLO}, {"root": "symbolic link (to '/')"}
    elif kind == "non_utf8_names":
        e.archived = {"module_0001.jit_\\xff\\xfe.before_optimizations.txt": HLO, "sub\\xc3(/x.txt": b"x"}
        e.caveats = {name: "not UTF-8" for name in e.archived}
    elif kind == "escaped_name_clash":
        e.archived = {"a\\xff.txt": b"backslash", "a\\xff.txt~2": b"raw byte"}
        e.caveats = {"a\\xff.txt~2": "another file's name is also"}
    elif kind == "name_255_bytes":
        long = "module_0002.jit_" + "x" * (255 - len("module_0002.jit_.before_optimizations.txt")) + ".before_optimizations.txt"
        e.archived = {long: HLO, "é" * 127 + "a": b"two-byte characters"}
    elif kind == "control_and_markup_names":
        e.archived = {
            n: n.encode()
            for n in (
                "new\nline.txt",
                "\x1b[31mred.txt",
                "<img src=x onerror=alert(1)>.txt",
                "-rf",
                " spaced .txt",
                "quote\"'.txt",
            )
        }
    elif kind == "deep_folders":
        e.archived = {"/".join(["deep"] * 60) + "/bottom.txt": b"bottom"}
    elif kind == "ten_thousand_tiny_files":
        e.archived = {f"tiny_{i:05d}.txt": b"%d" % i for i in (0, 1234, 9999)}
        e.at_least = 10_000
    elif kind == "big_sparse_file":
        e.archived = {"big.bin": None}
    elif kind == "written_after_the_job_ends":
        e.archived = {BEFORE: HLO, "growing.log": None}
    elif kind == "deleted_and_truncated_at_exit":
        e.archived = {BEFORE: HLO}  # doomed.txt and shrinking.txt: archived as they were, or gone; never a crash
    elif kind == "hard_links_and_duplicates":
        e.archived = {
            BEFORE: HLO,
            "module_0000.jit_f.before_optimizations.hlo.txt": HLO,
            **{f"same_{i}.txt": HLO for i in range(50)},
        }
    elif kind == "strange_times_and_modes":
        e.archived = {BEFORE: HLO, "future.txt": b"f", "epoch.txt": b"e", "setuid.txt": b"s"}
    elif kind == "metadata_lookalikes":
        e.archived = {n: b'{"run_id": "evil"}' for n in ("manifest.json", "files.json", "archived.json", "owner.pid", ".tmp-x")}
    elif kind == "garbage_dump_names":
        e.archived = {
            n: None
            for n in (
                "module_.txt",
                "module_99999999999999999999.x.before_optimizations.txt",
                "module_0000..txt",
                "module_0003.jit_f.0001.p.after_.before_.txt",
                "module_0004.jit_f.before_optimizations.hlo.pb",
            )
        }
    elif kind == "everything_at_once":
        for name in ("empty_proto", "fifo", "symlink_outside", "non_utf8_names", "control_and_markup_names", "unreadable_file"):
            inner = expectation(name)
            prefix = f"{name}/"
            e.archived.update({prefix + k: v for k, v in inner.archived.items()})
            e.skipped.update({prefix + k: v for k, v in inner.skipped.items()})
            e.caveats.update({prefix + k: v for k, v in inner.caveats.items()})
    else:
        raise KeyError(kind)
    return e


if __name__ == "__main__":
    MAKERS[sys.argv[1]](Path(sys.argv[2]))
