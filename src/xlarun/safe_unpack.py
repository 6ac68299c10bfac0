"""Unpacking a dump folder or archive someone else made, refusing anything hostile.

``unpack_dump_source(source, dest, limits)`` writes the regular files of a folder, ``.zip``, ``.tar``,
``.tar.gz`` / ``.tgz`` or ``.tar.zst`` below ``dest`` and nothing anywhere else. It refuses, with one
:class:`HostileArchive` line naming the member and the reason:

- names that leave ``dest``: ``..`` components, absolute paths (``/x``, ``C:x``), backslashes, control characters;
- members that are not regular files or folders: symbolic and hard links, devices, FIFOs, sockets, sparse files;
- decompression bombs: more than ``max_files`` files, more than ``max_total_bytes`` unpacked, an unpacked size
  more than ``max_ratio`` times the archive's (judged once past ``ratio_floor_bytes``), zip entries sharing data;
- the same name twice, a name used as both file and folder, names that are not UTF-8, encrypted zip members.

Each member is checked before a byte of it is written, and sizes are counted as bytes are written (a header
may lie). A refusal leaves partial output in ``dest``: callers unpack into a folder they delete on failure.
"""

from __future__ import annotations

import itertools
import os
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from xlarun.errors import InputError
from xlarun.filetypes import file_type

#: Archive kinds by file-name ending, longest first.
ARCHIVE_SUFFIXES = (
    (".tar.zst", "tar.zst"),
    (".tar.zstd", "tar.zst"),
    (".tar.gz", "tar.gz"),
    (".tgz", "tar.gz"),
    (".tar", "tar"),
    (".zip", "zip"),
)
_CHUNK = 1 << 20
_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class UnpackLimits:
    """What an import accepts; past any of these the source is refused as a decompression bomb."""

    max_total_bytes: int = 16 << 30
    max_files: int = 200_000
    max_ratio: float = 500.0
    ratio_floor_bytes: int = 64 << 20  # small archives of repetitive text compress well and are harmless
    max_depth: int = 32
    max_name_bytes: int = 1024


class HostileArchive(InputError):
    """An archive or folder was refused: a member could escape the destination, is not a plain file, or is a bomb."""


@dataclass
class UnpackReport:
    """What was unpacked: relative paths (posix) of the files written, and their total size."""

    kind: str
    files: list[str] = field(default_factory=list)
    bytes: int = 0


def archive_kind(path: Path) -> str | None:
    """``zip``, ``tar``, ``tar.gz`` or ``tar.zst`` by the file's name; None for a name no archive has."""
    lower = path.name.lower()
    for suffix, kind in ARCHIVE_SUFFIXES:
        if lower.endswith(suffix):
            return kind
    return None


def clean_member_name(name: str, limits: UnpackLimits) -> str:
    """The member's relative posix path with ``.`` parts dropped; raises ValueError saying why it is unsafe."""
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("name is not UTF-8") from None
    if _CONTROL.search(name):
        raise ValueError("control character in name")
    if "\\" in name:
        raise ValueError("backslash in name (a Windows path?)")
    if name.startswith("/") or _DRIVE.match(name):
        raise ValueError("absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError("path traversal ('..')")
    if not parts:
        raise ValueError("empty name")
    if len(encoded) > limits.max_name_bytes or any(len(p.encode()) > 255 for p in parts):
        raise ValueError("name too long")
    if len(parts) > limits.max_depth:
        raise ValueError(f"more than {limits.max_depth} folders deep")
    return "/".join(parts)


class _Writer:
    """Checks each member, then writes it below ``dest``, counting files and bytes against the limits."""

    def __init__(self, source: Path, dest: Path, limits: UnpackLimits, kind: str, compressed_size: int | None):
        self.source = source
        self.dest = dest
        self.root = os.path.realpath(dest)
        self.limits = limits
        self.compressed_size = compressed_size
        self.report = UnpackReport(kind)
        self.files: set[str] = set()
        self.dirs: set[str] = set()
        self.made: set[str] = set()  # folders created and checked to lie below dest

    def refuse(self, member: str, reason: str) -> HostileArchive:
        shown = member.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        shown = "".join(
            ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in shown
        )  # no escapes reach the terminal
        if len(shown) > 90:  # keep the message one line: both ends of a long name say what it is
            shown = f"{shown[:40]}...{shown[-40:]}"
        return HostileArchive(
            f"refused {self.source.name}: '{shown}': {reason}", "nothing was imported; unpack it yourself if you trust it"
        )

    def admit(self, name: str, kind: str) -> str | None:
        """The cleaned name of a member to write (None for a folder); raises for anything else."""
        if kind == "encrypted":
            raise self.refuse(name, "encrypted member (xlarun cannot read it)")
        if kind not in ("file", "dir"):
            raise self.refuse(name, f"{kind} (only regular files and folders are imported)")
        if kind == "dir" and not name.strip("./"):
            return None  # './': the archive's own top folder
        try:
            clean = clean_member_name(name, self.limits)
        except ValueError as exc:
            raise self.refuse(name, str(exc)) from None
        parts = clean.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in self.files:
                raise self.refuse(name, f"{parent!r} is both a file and a folder")
            self.dirs.add(parent)
        if kind == "dir":
            if clean in self.files:
                raise self.refuse(name, "both a file and a folder")
            self.dirs.add(clean)
            return None
        if clean in self.files:
            raise self.refuse(name, "duplicate name")
        if clean in self.dirs:
            raise self.refuse(name, "both a file and a folder")
        self.files.add(clean)
        if len(self.files) > self.limits.max_files:
            raise self.refuse(name, f"more than {self.limits.max_files} files (a decompression bomb?)")
        return clean

    def write(self, member: str, clean: str, stream: IO[bytes], declared: int | None) -> None:
        target = os.path.join(self.dest, *clean.split("/"))
        parent = os.path.dirname(target)
        if parent not in self.made:
            os.makedirs(parent, exist_ok=True)
            real_parent = os.path.realpath(parent)
            if real_parent != self.root and not real_parent.startswith(
                self.root + os.sep
            ):  # never, with links refused: but be sure
                raise self.refuse(member, "would be written outside the destination")
            self.made.add(parent)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        written = 0
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read(_CHUNK):
                written += len(chunk)
                self.report.bytes += len(chunk)
                if declared is not None and written > declared:
                    raise self.refuse(member, "holds more data than its header says")
                self.check_totals(member)
                out.write(chunk)
        self.report.files.append(clean)

    def check_totals(self, member: str) -> None:
        total = self.report.bytes
        if total > self.limits.max_total_bytes:
            raise self.refuse(member, f"unpacks to more than {self.limits.max_total_bytes} bytes (a decompression bomb?)")
        if (
            self.compressed_size
            and total > self.limits.ratio_floor_bytes
            and total > self.limits.max_ratio * self.compressed_size
        ):
            raise self.refuse(
                member, f"unpacks to more than {self.limits.max_ratio:g} times the archive's size (a decompression bomb?)"
            )


def unpack_dump_source(source: Path, dest: Path, limits: UnpackLimits | None = None) -> UnpackReport:
    """Write the regular files of a folder or archive below ``dest`` (see the module docstring)."""
    limits = limits or UnpackLimits()
    if source.is_dir():
        writer = _Writer(source, dest, limits, "folder", None)
        _copy_folder(source, writer)
        return writer.report
    if not source.is_file():
        raise InputError(
            f"no such file or folder: {source}", "give a dump folder, a .zip, .tar.gz, .tgz or .tar.zst, or an xlarun bundle"
        )
    kind = archive_kind(source)
    if kind is None:
        raise InputError(
            f"{source.name} is not a folder or a known archive", "xlarun imports folders, .zip, .tar, .tar.gz, .tgz and .tar.zst"
        )
    writer = _Writer(source, dest, limits, kind, source.stat().st_size)
    try:
        if kind == "zip":
            _unpack_zip(source, writer)
        else:
            _unpack_tar(source, kind, writer)
    except HostileArchive:
        raise
    except (zipfile.BadZipFile, tarfile.TarError, zlib.error, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, OSError) and exc.errno in (28, 122):  # ENOSPC, EDQUOT: not the archive's fault
            raise
        raise InputError(
            f"cannot read {source.name} as a {kind} archive: {exc}", "is it complete and really that kind of archive?"
        ) from None
    return writer.report


# --- folders -----------------------------------------------------------------------------------------


def _copy_folder(source: Path, writer: _Writer) -> None:
    stack = [("", str(source))]
    while stack:
        prefix, folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                name = f"{prefix}{entry.name}"
                st = entry.stat(follow_symlinks=False)
                clean = writer.admit(name, file_type(st.st_mode))
                if clean is None:
                    stack.append((f"{name}/", entry.path))
                    continue
                try:  # O_NOFOLLOW: a file swapped for a link since it was listed is refused, not followed
                    fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
                except OSError as exc:
                    raise writer.refuse(name, f"cannot be read: {exc.strerror}") from None
                with os.fdopen(fd, "rb") as stream:
                    writer.write(name, clean, stream, st.st_size)


# --- zip -------------------------------------------------------------------------------------------


def _unpack_zip(source: Path, writer: _Writer) -> None:
    try:
        archive = zipfile.ZipFile(source)
    except UnicodeDecodeError:  # a member flagged UTF-8 whose name is not
        raise writer.refuse("?", "a member's name is not UTF-8") from None
    with archive:
        infos = archive.infolist()
        admitted = [(info, writer.admit(_zip_name(info, writer), _zip_kind(info))) for info in infos]
        _check_zip_layout(infos, writer)
        for info, clean in admitted:
            if clean is None:
                continue
            with archive.open(info) as stream:
                writer.write(info.filename, clean, stream, info.file_size)


def _zip_name(info: zipfile.ZipInfo, writer: _Writer) -> str:
    if info.flag_bits & 0x800:
        return info.filename
    try:  # no UTF-8 flag: zipfile read the name as cp437; many tools write UTF-8 without saying so
        return info.filename.encode("cp437").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        raise writer.refuse(info.filename, "name is not UTF-8") from None


def _zip_kind(info: zipfile.ZipInfo) -> str:
    if info.flag_bits & 0x1:
        return "encrypted"
    mode = info.external_attr >> 16
    if info.create_system == 3 and stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return file_type(mode)
    return "dir" if info.is_dir() else "file"


def _check_zip_layout(infos: list[zipfile.ZipInfo], writer: _Writer) -> None:
    """Refuse bombs the central directory already shows: declared sizes and ratios, and entries sharing data."""
    limits = writer.limits
    declared = sum(info.file_size for info in infos)
    if declared > limits.max_total_bytes:
        raise writer.refuse(
            infos[-1].filename, f"declares {declared} bytes unpacked, over {limits.max_total_bytes} (a decompression bomb?)"
        )
    for info in infos:
        if info.file_size > limits.ratio_floor_bytes and info.file_size > limits.max_ratio * max(info.compress_size, 1):
            raise writer.refuse(info.filename, f"compressed more than {limits.max_ratio:g} to 1 (a decompression bomb?)")
    ordered = sorted(infos, key=lambda i: i.header_offset)
    for here, after in itertools.pairwise(ordered):
        if after.header_offset < here.header_offset + 30 + here.compress_size:
            raise writer.refuse(after.filename, "overlaps another member's data (a zip bomb)")


# --- tar -------------------------------------------------------------------------------------------


@contextmanager
def _tar_stream(source: Path, kind: str) -> Iterator[tarfile.TarFile]:
    with open(source, "rb") as raw:
        if kind == "tar.zst":
            import zstandard

            reader = zstandard.ZstdDecompressor().stream_reader(raw)
            with tarfile.open(fileobj=reader, mode="r|", encoding="utf-8", errors="surrogateescape") as archive:
                yield archive
        else:
            mode: Literal["r|gz", "r|"] = "r|gz" if kind == "tar.gz" else "r|"
            with tarfile.open(fileobj=raw, mode=mode, encoding="utf-8", errors="surrogateescape") as archive:
                yield archive


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "symbolic link"
    if member.islnk():
        return "hard link"
    if member.ischr() or member.isblk():
        return "device file"
    if member.isfifo():
        return "FIFO"
    if member.issparse():
        return "sparse file"
    if member.isdir():
        return "dir"
    return "file" if member.isreg() else "special member"


def _unpack_tar(source: Path, kind: str, writer: _Writer) -> None:
    with _tar_stream(source, kind) as archive:
        for member in archive:  # streamed: each member is checked as it comes, before its data is read
            clean = writer.admit(member.name, _tar_kind(member))
            if clean is None:
                continue
            if member.size > writer.limits.max_total_bytes:
                raise writer.refuse(
                    member.name, f"declares {member.size} bytes, over {writer.limits.max_total_bytes} (a decompression bomb?)"
                )
            stream = archive.extractfile(member)
            if stream is None:  # admit lets only regular files through; extractfile gives None for anything else
                raise writer.refuse(member.name, "is not a regular file")
            writer.write(member.name, clean, stream, member.size)
