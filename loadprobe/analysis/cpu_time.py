"""Which part of each stage's own time used a core: the sampled spans' ``cpu_ns`` (data format 1.1).

A span's ``cpu_ns`` is its thread's CPU while it ran, its children's included; in a sampled request every
span has one (docs/data-format.md), so a span's own CPU is its ``cpu_ns`` less its children's, as its own
time is its duration less theirs. Per stage this adds up both over the sampled spans, so that the portrait's
``Stage.cpu_share`` = own CPU / own time: 1 for a stage that computes, near 0 for one that awaits a
downstream call, sleeps or waits for the interpreter lock.

Usage (``map_step.map_spans`` calls it per file)::

    map_cpu(part, table, cols)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .columns import SpanColumns, sparse_column, sparse_filled
from .partials import Partial


def map_cpu(part: Partial, table: pa.Table, cols: SpanColumns) -> None:
    """Add the own CPU and own time of ``table``'s sampled spans to their stages in ``part`` (rows as ``cols``)."""
    cpu = sparse_column(table, "cpu_ns", np.int64)
    if cpu is None:
        return
    n = len(cols.ts)
    values = sparse_filled(cpu, n, -1)
    rows = np.flatnonzero((values >= 0) & cols.valid)
    if not len(rows):
        return
    cpu_ns, dur = values[rows].astype(np.float64), cols.dur[rows].astype(np.float64)
    child_cpu, child_dur = _children_sums(cols.span_id[rows], cols.parent[rows], cpu_ns, dur)
    own_dur = np.maximum(dur - child_dur, 0.0)
    # Work handed to another thread (asyncio.to_thread) is the child's CPU, not the parent's: never below 0.
    own_cpu = np.clip(cpu_ns - child_cpu, 0.0, own_dur)
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


def _children_sums(span_id: np.ndarray, parent: np.ndarray, cpu_ns: np.ndarray, dur: np.ndarray):
    """Per sampled span, the CPU and duration of its sampled children in the same file."""
    order = np.argsort(span_id, kind="stable")
    ids = span_id[order]
    at = np.minimum(np.searchsorted(ids, parent), len(ids) - 1)
    has_parent = (parent != 0) & (ids[at] == parent)
    parent_row = order[at[has_parent]]
    child_cpu, child_dur = np.zeros(len(span_id)), np.zeros(len(span_id))
    np.add.at(child_cpu, parent_row, cpu_ns[has_parent])
    np.add.at(child_dur, parent_row, dur[has_parent])
    return child_cpu, child_dur
