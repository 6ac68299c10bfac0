"""Capture: a run spec becomes a job, the job runs, and what it wrote becomes a run in the store.

From the bottom up: :mod:`.matrix`, :mod:`.known_flags` (the flags the job's XLA knows) and :mod:`.images` (the
Docker engine and xlarun's images), :mod:`.backends` (where a job runs: local process or container),
:mod:`.spec` (the YAML run spec), :mod:`.flags` (XLA_FLAGS and friends composed), :mod:`.launch` (run the job,
archive it, commit the run) and :mod:`.recover` (what killed captures left in staging). Capture imports the
store and the layers below it, never replay, render or the commands; import-linter holds the order.
"""
