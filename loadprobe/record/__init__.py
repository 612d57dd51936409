"""Recording: everything that runs inside the user's service, and nothing that analyses.

``probe`` (decorators, context managers, request scopes: the hot path) writes spans into
per-thread ``buffers`` under one memory budget, stage names registered once in ``stages``;
``recorder`` (the API and the process's one recorder) runs the ``flusher`` thread, which turns
them into Arrow segments and Parquet files (``tables``, ``segments``), with device samples
(``samplers``) and the run's description (``inventory``) in a run directory (``rundir``: layout,
run ids, run.json). ``env`` starts it from LOADPROBE_DIR, ``exits`` keeps it alive through
signals and forks. ``importer`` writes the same files from other tools' logs. Standard library
only at import: pyarrow and psutil load when a recorder starts.
"""

from . import probe as _probe


def _start_recorder_from_env() -> None:
    from .recorder import start_from_env  # pyarrow, psutil, threads: only when a probe first fires

    start_from_env()


_probe.env_start = _start_recorder_from_env
