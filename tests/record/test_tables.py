"""Span tuples become typed Arrow columns; bad extras become nulls, counted."""

from __future__ import annotations

import numpy as np

from loadprobe.record.stages import stage_id
from loadprobe.record.tables import SpanConverter, samples_batch
from loadprobe.schema import SAMPLES, SPANS


def test_plain_and_full_records_convert_to_the_spans_schema():
    conv = SpanConverter("9-run")
    rows = [
        (100, 350, 2, (-7, 1), stage_id("decode")),
        (90, 400, 1, (-7, 0), stage_id("request"), "ok", None),
        (120, 200, 3, ("abc", 1), stage_id("nms"), "error", (np.int64(8), (8, 4), "gpu0", 1e9, 2e6, 50, 12, 7)),
        (130, 140, 4, (None, 0), stage_id("loose"), "timeout", ("eight", object(), None, "x", None, None, None, "many")),
    ]
    batch = conv.batch(rows, epoch_offset_ns=1_000)
    assert batch.schema.equals(SPANS, check_metadata=True)
    out = batch.to_pylist()
    assert [r["ts_ns"] for r in out] == [1100, 1090, 1120, 1130]
    assert [r["dur_ns"] for r in out] == [250, 310, 80, 10]
    assert [r["parent_id"] for r in out] == [1, None, 1, None]
    assert [r["request_id"] for r in out] == ["9-run-7", "9-run-7", "abc", None]  # generated ids are negative
    assert [r["status"] for r in out] == ["ok", "ok", "error", "timeout"]
    assert (out[2]["batch"], out[2]["shape"], out[2]["engine"], out[2]["flops"], out[2]["queue_ns"]) == (
        8, "8x4", "gpu0", 1e9, 50)
    assert (out[2]["tokens_in"], out[2]["tokens_out"]) == (12, 7)  # an LLM request's tokens
    assert out[3]["batch"] is None and out[3]["shape"] is None and out[3]["flops"] is None
    assert out[3]["tokens_out"] is None  # text is no count
    assert conv.invalid_values == 4


def test_user_ids_are_kept_as_given_and_never_collide_with_generated_ones():
    conv = SpanConverter("run")
    rows = [(1, 2, 3, (-7, 0), stage_id("a")), (1, 2, 4, (7, 0), stage_id("a")),
            (1, 2, 5, (2**70, 0), stage_id("a")), (1, 2, 6, (None, 0), stage_id("a"), 404, None)]
    out = conv.batch(rows, 0)
    assert out.column("request_id").to_pylist() == ["run-7", "7", str(2**70), None]
    assert out.column("status").to_pylist() == ["ok", "ok", "ok", "404"]


def test_shapes_with_names_or_several_inputs_format_and_odd_values_are_counted():
    conv = SpanConverter("run")
    rows = [(1, 2, n, (None, 0), stage_id("s"), "ok", (None, shape, None, None, None, None, None, None))
            for n, shape in enumerate([((4, 3), "fp16"), ["NCHW"], [(4, 3), (4, 10)], (None, 3), object()])]
    assert conv.batch(rows, 0).column("shape").to_pylist() == ["4x3,fp16", "NCHW", "4x3,4x10", "?x3", None]
    assert conv.invalid_values == 1


def test_samples_batch_matches_schema():
    batch = samples_batch([(1, "cpu", "util_pct", 12.5), (1, "gpu0", "power_w", 71)])
    assert batch.schema.equals(SAMPLES) and batch.column("value").to_pylist() == [12.5, 71.0]
