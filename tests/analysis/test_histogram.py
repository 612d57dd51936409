"""The histogram keeps HdrHistogram's bucket scheme and its documented precision."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadprobe.analysis.histogram import COUNTS_LEN, HIGHEST_TRACKABLE, RELATIVE_ERROR, Histogram

values = st.lists(st.integers(min_value=0, max_value=HIGHEST_TRACKABLE), min_size=1, max_size=400)


@settings(max_examples=200, deadline=None)
@given(values, st.sampled_from([50, 90, 95, 99, 99.9, 100]))
def test_percentiles_match_exact_order_statistics_within_the_relative_error(data, p):
    h = Histogram()
    h.record(np.array(data))
    exact = np.sort(np.array(data))
    rank = min(max(1, int(p / 100 * len(data) + 0.5)), len(data))
    truth = int(exact[rank - 1])
    got = h.value_at_percentile(p)
    assert truth <= got <= max(truth, truth * (1 + RELATIVE_ERROR) + 1)
    assert abs(got - np.percentile(exact, p, method="inverted_cdf")) <= max(
        1.0, (exact[-1] - exact[0]) + truth * RELATIVE_ERROR)


@settings(max_examples=100, deadline=None)
@given(st.lists(values, min_size=1, max_size=5), st.randoms())
def test_merging_in_any_order_equals_recording_everything_at_once(chunks, rnd):
    whole = Histogram()
    whole.record(np.array([v for c in chunks for v in c]))
    parts = []
    for c in chunks:
        h = Histogram()
        h.record(np.array(c))
        parts.append(h)
    rnd.shuffle(parts)
    merged = Histogram()
    for h in parts:
        merged.merge(h)
    assert np.array_equal(merged.counts, whole.counts)
    assert (merged.total, merged.sum, merged.min, merged.max) == (whole.total, whole.sum, whole.min, whole.max)


def test_counts_are_laid_out_exactly_like_hdrhistogram():
    from hdrh.histogram import HdrHistogram

    rng = np.random.default_rng(7)
    data = np.concatenate([rng.integers(0, 5000, 3000), rng.lognormal(14, 3, 20000).astype(np.int64)])
    data = np.minimum(data, HIGHEST_TRACKABLE)
    reference = HdrHistogram(1, HIGHEST_TRACKABLE, 3)
    for v in data:
        reference.record_value(int(v))
    ours = Histogram()
    ours.record(data)
    assert np.array_equal(np.asarray(reference.counts[:COUNTS_LEN]), ours.counts)
    for p in (50, 90, 99, 99.9):
        assert ours.value_at_percentile(p) == reference.get_value_at_percentile(p)
    exported = ours.to_hdr()
    assert exported.get_total_count() == len(data)
    assert exported.get_value_at_percentile(99) == reference.get_value_at_percentile(99)


def test_pickled_histograms_are_sparse_and_equal():
    import pickle

    h = Histogram()
    h.record(np.array([5, 50_000, 7_000_000_000]))
    copy = pickle.loads(pickle.dumps(h))
    assert np.array_equal(copy.counts, h.counts) and copy.max == h.max
    assert len(pickle.dumps(h)) < 2000
