"""The queueing model behind the planner's analytic estimate (``loadprobe.estimate.queueing``)."""

from __future__ import annotations

import pytest

from loadprobe.estimate.queueing import erlang_c


def test_erlang_c_stays_finite_for_large_pools():
    assert 0 < erlang_c(800, 750) < 1
    assert erlang_c(1, 0.5) == pytest.approx(0.5)
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
