"""Unpacking a dump folder or archive someone else made, refusing anything hostile.

``unpack_dump_source(source, dest, limits)`` writes the regular files of a folder, ``.zip``, ``.tar``,
``.tar.gz`` / ``.tgz`` or ``.tar.zst`` below ``dest`` and nothing anywhere else. It refuses, with one
:class:`HostileArchive` line naming the member and the reason:

- names that leave ``dest``: ``..`` components, absolute paths (``/x``, ``C:x``), backslashes, control characters
  (a NUL in a zip member's name included: zipfile would silently cut the name there);
- members that are not regular files or folders: symbolic links, devices, FIFOs, sockets, sparse files; hard links
  but for a tar's link to a file the archive already gave (that file's bytes are written again), and a folder's file
  with links outside the folder (its contents are not the folder's to give);
- decompression bombs: more than ``max_files`` files, more than ``max_total_bytes`` unpacked, more than ``max_ratio``
  bytes written per compressed byte read so far (judged as bytes are written, once past ``ratio_floor_bytes``), zip
  entries sharing data, a zstd frame asking for a window over ``max_zstd_window`` bytes of memory;
- the same name twice, a name used as both file and folder, names that are not UTF-8, encrypted zip members, and
  a file whose contents are not the kind its name says (gzip data named ``.tar.zst``).

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
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from xlarun.bounded_read import FileRefused, open_regular
from xlarun.errors import InputError, check_room, disk_trouble
from xlarun.filetypes import file_type
from xlarun.safe_names import relative_path_problem

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
    max_zstd_window: int = 128 << 20  # what `zstd -d` itself accepts without --memory (--long=27)


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
    problem = relative_path_problem(name)  # the one check of where a name lands (absolute, '..', empty)
    if problem:
        raise ValueError(problem)
    parts = [p for p in name.split("/") if p not in ("", ".")]
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
        #: compressed bytes of the archive read so far (the ratio is judged against them as bytes are written)
        self.consumed: Callable[[], int] | None = None

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

    def refuse_whole(self, reason: str) -> HostileArchive:
        """A refusal of the archive itself (not one of its members)."""
        return HostileArchive(f"refused {self.source.name}: {reason}", "nothing was imported; unpack it yourself if you trust it")

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
        written, read_before = 0, self.consumed() if self.consumed else 0
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read(_CHUNK):
                written += len(chunk)
                self.report.bytes += len(chunk)
                if declared is not None and written > declared:
                    raise self.refuse(member, "holds more data than its header says")
                self.check_totals(member, written, read_before)
                out.write(chunk)
        self.report.files.append(clean)

    def check_totals(self, member: str, written: int, read_before: int) -> None:
        """Refuse as soon as the bytes written pass a limit: all of them, or (past the floor) more than
        ``max_ratio`` per compressed byte read, for the archive so far and for this member alone."""
        total, limits = self.report.bytes, self.limits
        if total > limits.max_total_bytes:
            raise self.refuse(member, f"unpacks to more than {limits.max_total_bytes} bytes (a decompression bomb?)")
        if not self.compressed_size or total <= limits.ratio_floor_bytes:
            return
        read = min(self.consumed(), self.compressed_size) if self.consumed else self.compressed_size
        over = total > limits.max_ratio * max(read, 1)
        if self.consumed and written > limits.ratio_floor_bytes:  # one member of zeros after a big incompressible one
            over = over or written > limits.max_ratio * max(read - read_before, 1)
        if over:
            raise self.refuse(member, f"unpacks to over {limits.max_ratio:g} times the bytes read (a decompression bomb?)")


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
    except (  # NotImplementedError: a zip's unknown method or version; RuntimeError: a zip member flagged encrypted late
        zipfile.BadZipFile, tarfile.TarError, zlib.error, EOFError, OSError, ValueError, NotImplementedError, RuntimeError,
        _zstd_error(),
    ) as exc:  # fmt: skip
        if isinstance(exc, OSError) and disk_trouble(exc):  # said as such by the caller, never blamed on the archive
            raise
        raise InputError(
            f"cannot read {source.name} as a {kind} archive: {exc}", "is it complete and really that kind of archive?"
        ) from None
    return writer.report


_STORE_ROOM = "free space on the store's disk (`xlarun rm` and `xlarun gc` free the store's own)"


def _zstd_error() -> type[Exception]:
    try:
        import zstandard
    except ImportError:  # pragma: no cover (a dependency; without it .tar.zst fails to open, said as such)
        return ValueError
    return zstandard.ZstdError


# --- folders -----------------------------------------------------------------------------------------


def _copy_folder(source: Path, writer: _Writer) -> None:
    """Every entry is listed and checked first (nothing written for a refused folder), then copied."""
    listed: list[tuple[str, str, str, os.stat_result]] = []  # name, clean name, path, lstat
    stack = [("", str(source))]
    while stack:
        prefix, folder = stack.pop()
        try:
            with os.scandir(folder) as scan:
                entries = sorted(((entry, entry.stat(follow_symlinks=False)) for entry in scan), key=lambda e: e[0].name)
        except OSError as exc:  # unreadable: the source's fault, said as such (never taken for the store's)
            raise writer.refuse(prefix.rstrip("/") or ".", f"cannot be read: {exc.strerror or exc}") from None
        for entry, st in entries:
            name = f"{prefix}{entry.name}"
            clean = writer.admit(name, file_type(st.st_mode))
            if clean is None:
                stack.append((f"{name}/", entry.path))
            else:
                listed.append((name, clean, entry.path, st))
    inside = Counter((st.st_dev, st.st_ino) for *_rest, st in listed if st.st_nlink > 1)
    for name, _clean, _path, st in listed:
        if st.st_nlink > 1 and inside[(st.st_dev, st.st_ino)] < st.st_nlink:
            raise writer.refuse(
                name,
                f"hard link to a file outside the folder ({st.st_nlink} links, {inside[(st.st_dev, st.st_ino)]} inside): "
                "its contents are not the folder's to give",
            )
    total = sum(st.st_size for *_rest, st in listed)
    if total > writer.limits.max_total_bytes:  # before asking the disk: a folder this big is refused for its size
        raise writer.refuse_whole(f"its files hold {total} bytes, over {writer.limits.max_total_bytes}")
    check_room(Path(writer.dest), total, writer.source.name, _STORE_ROOM)
    for name, clean, path, st in listed:
        try:  # a file swapped for a link or FIFO since it was listed is refused, not followed nor waited on
            fd, now = open_regular(path)
        except FileRefused:
            raise writer.refuse(name, "was replaced while being imported") from None
        except OSError as exc:
            raise writer.refuse(name, f"cannot be read: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as stream:
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise writer.refuse(name, "was replaced while being imported")
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
        need = sum(info.file_size for info, clean in admitted if clean is not None)
        check_room(Path(writer.dest), need, writer.source.name, _STORE_ROOM)
        for info, clean in admitted:
            if clean is None:
                continue
            with archive.open(info) as stream:
                writer.write(info.filename, clean, stream, info.file_size)


def _zip_name(info: zipfile.ZipInfo, writer: _Writer) -> str:
    if "\x00" in info.orig_filename:  # zipfile cut the name at the NUL: the name the archive gives is another
        raise writer.refuse(info.orig_filename, "control character in name (a NUL)")
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


_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CODEC = {"tar.gz": "gzip", "tar.zst": "zstd"}
_MAGIC_NAMES = ((_GZIP_MAGIC, "gzip", ".tar.gz"), (_ZSTD_MAGIC, "zstd", ".tar.zst"), (b"PK\x03\x04", "zip", ".zip"))


def _check_magic(source: Path, kind: str, head: bytes, writer: _Writer) -> None:
    """Refuse a compressed archive whose first bytes are another kind's (gzip data named ``.tar.zst``)."""
    wanted = {"tar.gz": _GZIP_MAGIC, "tar.zst": _ZSTD_MAGIC}.get(kind)
    skippable = len(head) >= 4 and head[1:4] == b"\x2a\x4d\x18" and head[0] & 0xF0 == 0x50  # a zstd skippable frame
    if wanted is None or head.startswith(wanted) or (kind == "tar.zst" and skippable):
        return
    for magic, what, suffix in _MAGIC_NAMES:
        if head.startswith(magic):
            raise writer.refuse_whole(f"it is {what} data, not {_CODEC[kind]} (rename it to end in {suffix})")
    raise writer.refuse_whole(f"it is not {_CODEC[kind]} data (its first bytes are {head[:4].hex() or 'none'})")


def _zstd_reader(raw: IO[bytes], writer: _Writer) -> Any:
    import zstandard

    limit = writer.limits.max_zstd_window
    head = raw.read(18)  # a frame header is at most 18 bytes
    raw.seek(0)
    try:
        window = zstandard.get_frame_parameters(head).window_size if head.startswith(_ZSTD_MAGIC) else 0
    except zstandard.ZstdError:
        window = 0  # a damaged header: the decompressor says what is wrong with it
    if window > limit:
        raise writer.refuse_whole(
            f"it needs a {window >> 20} MiB zstd window (memory) to unpack, over the {limit >> 20} MiB limit (made with zstd --long?)"
        )
    return zstandard.ZstdDecompressor(max_window_size=limit).stream_reader(raw, read_across_frames=True)


@contextmanager
def _tar_stream(source: Path, kind: str, writer: _Writer) -> Iterator[tarfile.TarFile]:
    with open(source, "rb") as raw:
        _check_magic(source, kind, raw.read(4), writer)
        raw.seek(0)
        writer.consumed = raw.tell
        if kind == "tar.zst":
            reader = _zstd_reader(raw, writer)
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
    check_room(
        Path(writer.dest), source.stat().st_size // 2, writer.source.name, _STORE_ROOM
    )  # half the archive: a sure lower bound
    with _tar_stream(source, kind, writer) as archive:
        for member in archive:  # streamed: each member is checked as it comes, before its data is read
            if member.islnk():
                _copy_hard_link(member, writer)
                continue
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


def _copy_hard_link(member: tarfile.TarInfo, writer: _Writer) -> None:
    """A tar's hard link to a file it gave before is that file's bytes again; a link to anything else (a path
    outside the archive, a name it never gave) is refused: its contents are not the archive's to give."""
    try:
        target = clean_member_name(member.linkname, writer.limits)
    except ValueError as exc:
        raise writer.refuse(member.name, f"hard link to '{member.linkname[:60]}' ({exc})") from None
    if target not in writer.files:
        raise writer.refuse(member.name, "hard link to a file not given before it in the archive")
    clean = writer.admit(member.name, "file")
    assert clean is not None  # admit gives a name for every file
    with open(os.path.join(writer.dest, *target.split("/")), "rb") as stream:
        writer.write(member.name, clean, stream, None)
