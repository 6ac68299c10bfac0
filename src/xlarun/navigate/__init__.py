"""Navigation: what the user meant. :mod:`.refs` resolves a REF to a run, batch or module (and the module to
compare one with); :mod:`.select` picks the file of a module that ``--stage`` / ``--pass`` / ``--step`` /
``--format`` name. Every command and the Python API resolve through these two; they read the store only.
"""
