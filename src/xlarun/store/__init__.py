"""The store: everything a run wrote, kept once and indexed (the whole format: docs/store-format.md).

From the bottom up: :mod:`.pack_format` (a file's digest, a pack's header), :mod:`.buffers` (memory the packs reuse),
:mod:`.pack_table` (``packs.sqlite``: where each file is), :mod:`.pack_census` (what each pack's own header
says it holds, and the table checked against it), :mod:`.packs` (``BlobStore``: files in zstd packs),
:mod:`.manifest` (a run's manifest and status), :mod:`.records` (what the index says of runs, modules, files,
passes), :mod:`.index` (the SQLite index: schema and queries), :mod:`.runs` (run folders: staging, commit by
rename, check), :mod:`.summaries` (a module's facts, read from its dumps), :mod:`.archive` (a staging folder
into packs), :mod:`.parse_ahead` (what ingest needs parsed, as the archive reads it), :mod:`.ingest` (a committed run into the index) and :mod:`.gc` (what no run needs, deleted once
everything saying what is live was read), and :mod:`.facade` (``LocalStore``, the one object
the rest of xlarun opens). Above it, :mod:`.remote` (named remotes and the S3 calls, through boto3) and
:mod:`.remote_sync` (push, pull and list runs on a team store in object storage: docs/remote.md). The store imports only :mod:`xlarun.hlo` and the leaves (errors, console, killpoints,
interrupts, filetypes) below it; import-linter holds the order (pyproject.toml).
"""
