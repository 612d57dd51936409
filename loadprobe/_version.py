"""The version of loadprobe, kept apart so packaging can read it without importing anything."""

__version__ = "0.1.0"
