"""Seeing what XLA did: diffs of runs and modules, and the viewers a run opens in (Model Explorer, XProf).

May import navigate, store and hlo; imported by bisect, report, the front door and commands."""
