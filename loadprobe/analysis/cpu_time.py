"""Which part of each stage's own time used a core: the sampled spans' ``cpu_ns`` (data format 1.1).

A span's ``cpu_ns`` is the CPU its thread used while it ran less that of the sampled spans that ran inside it
(the recorder takes them off: docs/data-format.md); its own time is its duration less its children's, by the
kernels' rule. Per stage this adds up both over the sampled spans, so that the portrait's
``Stage.cpu_share`` = own CPU / own time: 1 for a stage that computes, near 0 for one that awaits a
downstream call, sleeps or waits for the interpreter lock.

Usage (``map_step.map_spans`` calls it per file)::

    map_cpu(part, table, cols)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .columns import SpanColumns, sparse_column, sparse_filled
from .kernel_numpy import children_ns
from .partials import Partial


def map_cpu(part: Partial, table: pa.Table, cols: SpanColumns) -> None:
    """Add the own CPU and own time of ``table``'s sampled spans to their stages in ``part`` (rows as ``cols``)."""
    cpu = sparse_column(table, "cpu_ns", np.int64)
    if cpu is None:
        return
    values = sparse_filled(cpu, len(cols.ts), -1)
    rows = np.flatnonzero((values >= 0) & cols.valid)
    if not len(rows):
        return
    own_dur = np.maximum(cols.dur[rows] - children_ns(cols, cols.span_id[rows]), 0)
    own_cpu = np.minimum(values[rows], own_dur)  # CPU over the span cannot pass its wall time but by clock grain
    stage = cols.stage[rows]
    named = stage >= 0
    width = len(cols.stage_names)
    spent = np.bincount(stage[named], weights=own_cpu[named], minlength=width)
    held = np.bincount(stage[named], weights=own_dur[named], minlength=width)
    spans = np.bincount(stage[named], minlength=width)
    for code in np.flatnonzero(spans):
        sp = part.stage(str(cols.stage_names[code]))
        sp.cpu_ns += int(spent[code])
        sp.cpu_own_ns += int(held[code])
        sp.cpu_spans += int(spans[code])

