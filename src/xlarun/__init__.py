"""xlarun: capture, archive, index and replay XLA dumps."""

__version__ = "0.1.0"
