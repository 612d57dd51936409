"""The LLM engine replay (simulator/llm/engine.py) and its step-time fit (steps.py), on workloads built here."""

from __future__ import annotations

import numpy as np
import pytest

from loadprobe._errors import LoadprobeError
from loadprobe.analysis.llm import LlmRequests
from loadprobe.simulator.llm.engine import EngineSettings, Workload, run_engine
from loadprobe.simulator.llm.steps import StepModel, fit_steps

pytestmark = pytest.mark.timeout(60)

MS = 1_000_000
# 2 ms per iteration, 0.1 ms per sequence, 1 us per context token; a prompt: 1 ms + 50 us per token.
TRUE = StepModel(iteration=2 * MS, per_prefill=1 * MS, per_prompt_token=50_000, per_prompt_token_sq=20, per_sequence=100_000,
                 per_context_token=1_000)


def _workload(arrivals_ms, prompts, outputs) -> Workload:
    return Workload(np.asarray(arrivals_ms, dtype=np.int64) * MS, np.asarray(prompts), np.asarray(outputs))


def test_one_request_takes_its_prefill_then_one_decode_iteration_per_later_token():
    served = run_engine(_workload([0], [100], [5]), TRUE, EngineSettings(chunked_prefill=False))
    prefill = TRUE.prefill_ns(100)
    assert served.first_ns[0] == pytest.approx(prefill, abs=2)
    steps = [TRUE.decode_ns(1, 100 + k) for k in range(1, 5)]  # the context grows by the token just put out
    assert served.last_ns[0] == pytest.approx(prefill + sum(steps), abs=5)
    assert sorted(served.itl_ns) == pytest.approx(sorted(steps), abs=2)
    assert served.iterations == 5 and served.preemptions == 0


def test_a_decode_pool_s_request_arrives_prefilled_and_only_decodes():
    """Prefill and decode apart: the first token came out of another engine at ``first_out_ns``; the KV cache
    arrives later (the hand-off), and the decode engine runs no prompt pass, only ``n - 1`` decode iterations."""
    workload = Workload(np.array([3 * MS]), np.array([100]), np.array([5]), first_out_ns=np.array([1 * MS]))
    served = run_engine(workload, TRUE, EngineSettings(chunked_prefill=True))
    steps = [TRUE.step_ns(sequences=1, context_tokens=100 + k) for k in range(1, 5)]
    assert served.first_ns[0] == 1 * MS and served.admitted_ns[0] == 3 * MS
    assert served.last_ns[0] == pytest.approx(3 * MS + sum(steps), abs=5)
    assert served.iterations == 4 and served.busy_ns == pytest.approx(sum(steps), abs=5)
    # The first gap holds the hand-off: from the token out of the prefill engine to the decode engine's first.
    assert max(served.itl_ns) == pytest.approx(2 * MS + steps[0], abs=5)
    one = run_engine(Workload(np.array([0]), np.array([10]), np.array([1]), first_out_ns=np.array([0])), TRUE,
                     EngineSettings())
    assert one.iterations == 0 and one.last_ns[0] == 0  # a one-token answer was done at its prefill


def test_chunked_prefill_spreads_a_long_prompt_over_iterations_within_the_token_budget():
    settings = EngineSettings(chunked_prefill=True, token_budget=64)
    served = run_engine(_workload([0, 0], [10, 200], [3, 2]), TRUE, settings)
    # The short prompt fits the first iteration with 54 tokens of the long one; 146 are left: 3 more iterations.
    assert served.first_ns[0] < served.first_ns[1]
    assert served.iterations >= 4
    one = run_engine(_workload([0], [200], [2]), TRUE, EngineSettings(chunked_prefill=True, token_budget=64))
    assert one.iterations == 1 + 4  # ceil(200 / 64) prefill iterations, then one decode


def test_at_most_max_running_sequences_run_and_the_rest_wait_in_order():
    served = run_engine(_workload([0, 0, 0], [50, 50, 50], [10, 10, 10]), TRUE,
                        EngineSettings(max_running=1, chunked_prefill=False))
    # One at a time: each is admitted when the one before has put out its last token.
    assert served.admitted_ns[1] >= served.last_ns[0] and served.admitted_ns[2] >= served.last_ns[1]
    batched = run_engine(_workload([0, 0, 0], [50, 50, 50], [10, 10, 10]), TRUE,
                         EngineSettings(max_running=3, chunked_prefill=False))
    assert batched.last_ns.max() < served.last_ns.max()  # batching finishes the three sooner


def test_a_reserved_kv_cache_admits_first_come_first_served_and_refuses_what_never_fits():
    settings = EngineSettings(max_running=8, kv_tokens=300, kv_reserve="request", chunked_prefill=False)
    served = run_engine(_workload([0, 0, 0, 0], [100, 150, 10, 400], [50, 50, 10, 10]), TRUE, settings)
    assert served.refused == 1 and served.first_ns[3] == -1  # 410 tokens can never fit 300
    # 150 + 200 > 300: the second waits for the first to finish, and the small third does not overtake it.
    assert served.admitted_ns[1] >= served.last_ns[0]
    assert served.admitted_ns[2] >= served.admitted_ns[1]
    assert served.kv_used[1].max() <= 300


def test_a_paged_kv_cache_preempts_the_newest_sequence_and_every_request_still_finishes():
    settings = EngineSettings(max_running=8, kv_tokens=256, kv_reserve="paged", kv_block=16, chunked_prefill=True)
    served = run_engine(_workload([0, 0, 0], [60, 60, 60], [100, 100, 100]), TRUE, settings)
    assert served.preemptions > 0
    assert (served.first_ns >= 0).all() and (served.last_ns >= served.first_ns).all()
    assert served.kv_used[1].max() <= 256
    ample = run_engine(_workload([0, 0, 0], [60, 60, 60], [100, 100, 100]), TRUE,
                       EngineSettings(max_running=8, kv_tokens=4096, chunked_prefill=True))
    assert ample.preemptions == 0 and ample.last_ns.max() < served.last_ns.max()


def test_settings_out_of_range_are_refused_naming_the_option():
    with pytest.raises(LoadprobeError, match="--max-running"):
        EngineSettings(max_running=0)
    with pytest.raises(LoadprobeError, match="--kv-reserve"):
        EngineSettings(kv_reserve="all")


def _as_recorded(workload: Workload, served) -> LlmRequests:
    """What a client records of the replayed requests: start, first and last output, tokens."""
    n = len(workload)
    return LlmRequests(start=workload.arrival_ns.copy(), dur=served.last_ns - workload.arrival_ns,
                       tokens_in=workload.tokens_in.astype(np.int64), tokens_out=workload.tokens_out.astype(np.int64),
                       ok=np.ones(n, dtype=bool), first=served.first_ns.copy(), last=served.last_ns.copy(),
                       queued=np.full(n, -1), prefill=np.full(n, -1), ids=None)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_model_fitted_to_first_and_last_tokens_predicts_the_engine_at_twice_the_rate(chunked):
    """The fit sees only what a client records (no engine spans), at one rate; the engine it predicts at
    twice the rate is the true one."""
    rng = np.random.default_rng(3)
    settings = EngineSettings(max_running=16, chunked_prefill=chunked)

    def at(rate, n=400):
        arrivals = np.cumsum(rng.exponential(1000 / rate, n))
        return _workload(arrivals, rng.integers(20, 400, n), rng.integers(4, 120, n))

    recorded = at(8)
    model = fit_steps(_as_recorded(recorded, run_engine(recorded, TRUE, settings)), chunked=chunked)
    faster = at(16)
    truth, predicted = run_engine(faster, TRUE, settings), run_engine(faster, model, settings)
    assert np.median(truth.first_ns - faster.arrival_ns) < 100 * MS  # busy, not overloaded
    for name, t, p in (("ttft", truth.first_ns - faster.arrival_ns, predicted.first_ns - faster.arrival_ns),
                       ("decode", truth.last_ns - truth.first_ns, predicted.last_ns - predicted.first_ns)):
        for q in (50, 95):
            assert np.percentile(p, q) == pytest.approx(np.percentile(t, q), rel=0.10), (name, q, model.describe())


def test_the_model_round_trips_through_its_dict():
    model = StepModel(1.0, 2.0, 3.0, 0.5, 4.0, 5.0, rows=9, error=0.1, source="x", scale=1.2, by_batch={1: -3.0, 2: 1.0})
    again = StepModel.from_dict(model.to_dict())
    assert again.step_ns(1, 10, 3, 30) == pytest.approx(model.step_ns(1, 10, 3, 30))
    assert again.decode_ns(1.5, 10) == pytest.approx(model.decode_ns(1.5, 10))
