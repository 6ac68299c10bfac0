"""Sharing runs: bundles (what a bug report carries, what extract wrote), importing dump folders and archives made elsewhere, and unpacking untrusted archives safely.

May import the store, capture, replay, bisect and hlo layers; imported only by the front door and commands."""
