"""A corpus of hostile archives for ``xlarun import``, made on the fly (no binaries checked in).

``make_hostile_corpus(folder, escape_target)`` writes each archive and returns ``HostileCase``s: the
file, what makes it hostile, and the extra import options (lower limits) it is refused under.
``escape_target`` is an absolute path outside any store that a successful attack would create.
"""

from __future__ import annotations

import io
import os
import stat
import struct
import tarfile
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

#: Enough '..' to climb from any store's staging folder to the root.
CLIMB = "../" * 40
#: A member this big (zeros) compresses past every ratio limit and passes the 64 MiB ratio floor.
BOMB_BYTES = 80 << 20
_HLO = b"HloModule m\n\nENTRY main {\n  ROOT p = f32[] parameter(0)\n}\n"
_GOOD = "module_0000.jit_f.before_optimizations.txt"


@dataclass
class HostileCase:
    name: str
    path: Path
    why: str  # what the refusal message must say (a substring)
    options: list[str] = field(default_factory=list)


def _zip(path: Path, members: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate names we write on purpose
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for info, data in members:
                archive.writestr(info, data)
    return path.read_bytes()


def _zip_info(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = mode << 16
    return info


def _central_records(data: bytes) -> list[int]:
    """Offsets of the central directory records of a zip."""
    out, start = [], 0
    while (at := data.find(b"PK\x01\x02", start)) >= 0:
        out.append(at)
        start = at + 4
    return out


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> None:
    with tarfile.open(path, mode, format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)


def _tar_info(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.mode = 0o644
    return info


def _tar_zst(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(raw.getvalue()))


def _zeros_tar_zst(path: Path, size: int) -> None:
    """A .tar.zst of one member of zeros, streamed (never the whole bomb in memory)."""
    info = _tar_info(f"dump/{_GOOD}")
    info.size = size
    header = info.tobuf(format=tarfile.GNU_FORMAT)
    with open(path, "wb") as out, zstandard.ZstdCompressor(level=3).stream_writer(out) as writer:
        writer.write(header)
        chunk = bytes(1 << 20)
        for _ in range(size >> 20):
            writer.write(chunk)
        writer.write(bytes(1024))  # end-of-archive blocks


def make_hostile_corpus(folder: Path, escape_target: Path) -> list[HostileCase]:
    """Write every hostile archive into ``folder``; see the module docstring."""
    folder.mkdir(parents=True, exist_ok=True)
    escape = str(escape_target)
    cases: list[HostileCase] = []

    def add(name: str, why: str, options: list[str] | None = None) -> Path:
        path = folder / name
        cases.append(HostileCase(name, path, why, options or []))
        return path

    good = (_GOOD, _HLO)
    # --- zip ---
    _zip(add("dotdot.zip", "path traversal"), [good, (f"{CLIMB}{escape.lstrip('/')}", b"pwned")])
    _zip(add("dotdot-inner.zip", "path traversal"), [good, (f"dump/../../{CLIMB}{escape.lstrip('/')}", b"pwned")])
    _zip(add("absolute.zip", "absolute path"), [good, (escape, b"pwned")])
    _zip(add("drive-letter.zip", "absolute path"), [good, ("C:/Windows/evil.txt", b"pwned")])
    _zip(add("backslash.zip", "backslash"), [good, ("..\\..\\evil.txt", b"pwned")])
    _zip(add("symlink.zip", "symbolic link"), [(_zip_info("link", stat.S_IFLNK | 0o777), escape.encode()), good])
    _zip(add("chardev.zip", "device file"), [good, (_zip_info("null", stat.S_IFCHR | 0o666), b"")])
    _zip(add("fifo.zip", "FIFO"), [good, (_zip_info("pipe", stat.S_IFIFO | 0o644), b"")])
    _zip(add("duplicate.zip", "duplicate name"), [good, (_GOOD, b"HloModule other\n")])
    _zip(add("duplicate-dotslash.zip", "duplicate name"), [good, (f"./{_GOOD}", b"HloModule other\n")])
    _zip(add("file-and-folder.zip", "both a file and a folder"), [("a", b"x"), ("a/b", b"y")])
    _zip(add("control-char.zip", "control character"), [good, ("evil\x1b[2J.txt", b"x")])
    _zip(add("too-deep.zip", "folders deep"), [good, ("d/" * 40 + "x.txt", b"x")])
    _zip(add("long-name.zip", "name too long"), [good, ("x" * 300 + ".txt", b"x")])

    path = add("not-utf8.zip", "not UTF-8")  # cp437 bytes with no UTF-8 flag: é as Latin-1
    data = _zip(path, [good, ("cafX.txt", b"x")])
    path.write_bytes(data.replace(b"cafX.txt", b"caf\xe9.txt"))

    path = add("not-utf8-flagged.zip", "not UTF-8")  # flagged UTF-8, but the bytes are not
    data = _zip(path, [good, ("\u00e9\u00e9.txt", b"x")])
    path.write_bytes(data.replace("\u00e9\u00e9.txt".encode(), b"\xff\xfe\xff\xfe.txt"))

    path = add("encrypted.zip", "encrypted member")
    data = bytearray(_zip(path, [good]))
    for at in _central_records(bytes(data)):
        data[at + 8] |= 0x1
    data[6] |= 0x1  # the local header too
    path.write_bytes(bytes(data))

    path = add("overlapping.zip", "overlaps")  # two entries sharing one member's data: the classic zip bomb
    data = bytearray(_zip(path, [good, ("module_0001.jit_g.before_optimizations.txt", _HLO)]))
    records = _central_records(bytes(data))
    data[records[1] + 42 : records[1] + 46] = struct.pack("<I", 0)
    path.write_bytes(bytes(data))

    _zip(add("ratio-bomb.zip", "decompression bomb"), [good, ("dump/zeros.txt", bytes(BOMB_BYTES))])
    _zip(
        add("too-many-files.zip", "more than 50 files", ["--max-files", "50"]),
        [(f"module_{i:04d}.jit_f.before_optimizations.txt", _HLO) for i in range(51)],
    )
    _zip(add("too-big.zip", "over 1048576", ["--max-bytes", str(1 << 20)]), [good, ("big.txt", os.urandom(1 << 20))])

    # --- tar.gz / tgz ---
    _tar(
        add("dotdot.tar.gz", "path traversal"), [(_tar_info(_GOOD), _HLO), (_tar_info(f"{CLIMB}{escape.lstrip('/')}"), b"pwned")]
    )
    _tar(add("absolute.tgz", "absolute path"), [(_tar_info(_GOOD), _HLO), (_tar_info(escape), b"pwned")])
    _tar(
        add("symlink.tar.gz", "symbolic link"),
        [
            (_tar_info("dir", tarfile.SYMTYPE, str(escape_target.parent)), None),
            (_tar_info(f"dir/{escape_target.name}"), b"pwned"),
        ],
    )
    _tar(
        add("hardlink.tar.gz", "hard link"),
        [(_tar_info(_GOOD), _HLO), (_tar_info("passwd", tarfile.LNKTYPE, "/etc/passwd"), None)],
    )
    _tar(add("chardev.tar.gz", "device file"), [(_tar_info(_GOOD), _HLO), (_tar_info("null", tarfile.CHRTYPE), None)])
    _tar(add("blockdev.tgz", "device file"), [(_tar_info(_GOOD), _HLO), (_tar_info("sda", tarfile.BLKTYPE), None)])
    _tar(add("fifo.tar.gz", "FIFO"), [(_tar_info(_GOOD), _HLO), (_tar_info("pipe", tarfile.FIFOTYPE), None)])
    _tar(add("duplicate.tar.gz", "duplicate name"), [(_tar_info(_GOOD), _HLO), (_tar_info(_GOOD), b"HloModule other\n")])
    _tar(add("file-and-folder.tar.gz", "both a file and a folder"), [(_tar_info("a"), b"x"), (_tar_info("a/b"), b"y")])
    _tar(
        add("not-utf8.tar.gz", "not UTF-8"),
        [(_tar_info(_GOOD), _HLO), (_tar_info(b"caf\xe9.txt".decode("utf-8", "surrogateescape")), b"x")],
    )
    _tar(
        add("too-many-files.tgz", "more than 50 files", ["--max-files", "50"]),
        [(_tar_info(f"module_{i:04d}.jit_f.before_optimizations.txt"), _HLO) for i in range(51)],
    )
    with tarfile.open(add("ratio-bomb.tar.gz", "decompression bomb"), "w:gz") as archive:
        info = _tar_info(f"dump/{_GOOD}")
        info.size = BOMB_BYTES
        archive.addfile(info, io.BytesIO(bytes(BOMB_BYTES)))

    # --- tar.zst ---
    _tar_zst(
        add("dotdot.tar.zst", "path traversal"), [(_tar_info(_GOOD), _HLO), (_tar_info(f"{CLIMB}{escape.lstrip('/')}"), b"pwned")]
    )
    _tar_zst(
        add("hardlink.tar.zst", "hard link"),
        [(_tar_info(_GOOD), _HLO), (_tar_info("shadow", tarfile.LNKTYPE, "/etc/shadow"), None)],
    )
    _tar_zst(add("symlink.tar.zst", "symbolic link"), [(_tar_info("link", tarfile.SYMTYPE, escape), None)])
    _zeros_tar_zst(add("ratio-bomb.tar.zst", "decompression bomb"), BOMB_BYTES)
    _zeros_tar_zst(add("size-bomb.tar.zst", "decompression bomb", ["--max-bytes", str(8 << 20)]), 16 << 20)
    return cases
