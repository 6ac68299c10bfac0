"""Shipping a finished run from one store to another: a node's staging store to the driver's store.

A :class:`Shipment` carries a committed run's metadata files (manifest, spec, logs), its file list, and the
bytes of the files the receiving store lacks (all of them, when asked), concatenated in path order (a module's
successive dumps side by side) and compressed as one zstd frame. The receiver checks the frame's digest and
every file's digest before anything is written, writes the new files into packs, and commits the run under
its own id with one rename, as a capture does: a run arrives whole, verified, or not at all; one that is
already there is not committed again.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

from xlarun.bounded_read import read_store_files
from xlarun.errors import StoreError
from xlarun.safe_names import checked_member_name, checked_relative_path, checked_run_id
from xlarun.store.facade import LocalStore
from xlarun.store.packs import content_digest
from xlarun.store.rows import OUTPUT_DIRS, StoredFile
from xlarun.store.runs import RUN_METADATA

#: The run folder's files that travel with a run (files.json is rebuilt from the file list).
METADATA_FILES = RUN_METADATA


@dataclass
class Shipment:
    """One run on its way between stores (see the module docstring)."""

    run_id: str
    files: list[StoredFile]
    metadata: dict[str, bytes]
    sent: list[tuple[str, int]]  # (digest, size) of the files in ``payload``, in order
    payload: bytes  # their bytes, one zstd frame
    payload_digest: str
    raw_bytes: int = 0  # the sent files' bytes before compression

    @property
    def wire_bytes(self) -> int:
        """What the shipment weighs on the wire: the compressed files and the metadata."""
        return len(self.payload) + sum(len(v) for v in self.metadata.values()) + 100 * len(self.files)


@dataclass
class Received:
    """A shipment taken into a store: the run's id and folder, and whether it was new (False: already there)."""

    run_id: str
    run_dir: Path
    new: bool
    files_sent: int = 0
    bytes_written: int = 0
    extra: dict = field(default_factory=dict)


def pack_run(store: LocalStore, run_id: str, only: set[str] | None = None, level: int = 3) -> Shipment:
    """A shipment of ``run_id`` from ``store`` with the bytes of the files whose digest is in ``only`` (all when None)."""
    files = store.stored_files(run_id)
    run_dir = store.run_path(run_id)
    metadata = read_store_files(run_dir, METADATA_FILES)  # within bounds: a FIFO or link there is refused
    sent: list[tuple[str, int]] = []
    chunks: list[bytes] = []
    seen: set[str] = set()
    for entry in sorted(files, key=lambda f: f.path):
        if entry.digest in seen or (only is not None and entry.digest not in only):
            continue
        seen.add(entry.digest)
        data = store.blobs.get(entry.digest)
        sent.append((entry.digest, len(data)))
        chunks.append(data)
    raw = b"".join(chunks)
    payload = zstandard.ZstdCompressor(level=level).compress(raw)
    return Shipment(run_id, files, metadata, sent, payload, content_digest(payload), len(raw))


def unpack_payload(shipment: Shipment) -> list[tuple[str, memoryview]]:
    """The shipped files as (digest, bytes), each checked against its digest; StoreError on any damage."""
    where = f"run {shipment.run_id} arrived damaged"
    if content_digest(shipment.payload) != shipment.payload_digest:
        raise StoreError(
            f"{where}: its payload does not match its digest", "the batch retries nothing by itself: run the cell again"
        )
    try:
        raw = memoryview(zstandard.ZstdDecompressor().decompress(shipment.payload, max_output_size=max(1, shipment.raw_bytes)))
    except zstandard.ZstdError as exc:
        raise StoreError(f"{where}: {exc}", "run the cell again") from None
    out, offset = [], 0
    for digest, size in shipment.sent:
        data = raw[offset : offset + size]
        if len(data) != size or content_digest(data) != digest:
            raise StoreError(f"{where}: a file does not match its digest {digest[:12]}", "run the cell again")
        out.append((digest, data))
        offset += size
    return out


def lacking(store: LocalStore, digests: list[str]) -> set[str]:
    """Those of ``digests`` that ``store`` does not hold: what a shipment into it must carry."""
    unique = sorted(set(digests))
    return set(unique) - store.blobs.stored_of(unique)


def checked_shipment(shipment: Shipment) -> dict:
    """The shipment's manifest, once every name in it is one this store may write under: its run id, the names of
    its metadata files (those of :data:`METADATA_FILES`) and every file path (relative, no ``..``). Anything else
    is a StoreError naming the bad name; nothing is written."""
    checked_run_id(shipment.run_id, "a shipment from a node", StoreError)
    source = f"the shipment of run {shipment.run_id}"
    for name in shipment.metadata:
        checked_member_name(name, source, METADATA_FILES, StoreError)
    for entry in shipment.files:
        checked_relative_path(entry.path, source, StoreError)
    try:
        manifest = json.loads(shipment.metadata["manifest.json"])
    except (KeyError, ValueError, RecursionError):
        manifest = None
    if not isinstance(manifest, dict):
        raise StoreError(f"{source} arrived without a manifest (a JSON object)", "nothing was written; run the cell again")
    return manifest


def receive_run(store: LocalStore, shipment: Shipment, manifest_extra: dict | None = None) -> Received:
    """Verify a shipment and commit its run into ``store`` under the same run id, then index it (see the module
    docstring). ``manifest_extra`` is merged into the manifest's ``backend_details`` (where the run was made).
    A run already committed is left as it is (``new`` False). Raises StoreError when the shipment is damaged or
    lacks a file the store does not hold."""
    manifest = checked_shipment(shipment)
    blobs = unpack_payload(shipment)
    final = store.runs_dir / shipment.run_id
    if (final / "files.json").exists():
        return Received(shipment.run_id, final, new=False)
    if manifest_extra:
        manifest.setdefault("backend_details", {}).update(manifest_extra)
    with store.lock():  # shared, as for a capture: gc cannot take the run's blobs before its commit
        still_missing = lacking(store, [f.digest for f in shipment.files]) - {digest for digest, _data in blobs}
        if still_missing:
            raise StoreError(
                f"run {shipment.run_id} arrived without {len(still_missing)} file(s) this store lacks",
                "a gc ran while it was shipped: run the cell again",
            )
        try:
            run_id, staging = store.begin_run(shipment.run_id)
        except FileExistsError:  # the same run being received by another thread: it commits it
            return Received(shipment.run_id, final, new=False)
        written = 0
        try:
            packer = store.blobs.packer()
            for _digest, data in blobs:
                packer.add(data)  # type: ignore[arg-type]  # a memoryview is copied in as bytes are
            written = packer.close()
            for name, content in shipment.metadata.items():
                if name != "manifest.json":
                    (staging / name).write_bytes(content)
            for sub in OUTPUT_DIRS:  # begin_run made them for a job's outputs; a received run has none
                (staging / sub).rmdir()
            # an index in trouble does not stop the commit: the driver's next look at the index indexes the run
            run_dir, _unindexed = store.commit_indexed(
                run_id, staging, shipment.files, {"manifest.json": json.dumps(manifest, indent=2)}
            )
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return Received(run_id, run_dir, new=True, files_sent=len(blobs), bytes_written=written)
