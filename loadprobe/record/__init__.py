"""Recording: everything that runs inside the user's service, and nothing that analyses.

``probe`` (decorators, context managers, request scopes: the hot path) writes spans into
per-thread buffers; ``recorder`` (the flusher thread) turns them into Arrow segments and Parquet
files (``tables``, ``segments``), with device samples (``samplers``) and the run's description
(``inventory``); ``env`` starts it from LOADPROBE_DIR, ``exits`` keeps it alive through signals
and forks. ``importer`` writes the same files from other tools' logs. Standard library only at
import: pyarrow and psutil load when a recorder starts.
"""
