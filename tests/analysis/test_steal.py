"""CPU steal: a recording made while a virtual machine's hypervisor ran other guests is warned of; plans say so."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import loadprobe
from loadprobe.plan.constraints import Constraints
from loadprobe.plan.planner import recommend
from loadprobe.schema import SAMPLES

from ..support.served_recording import T0_NS, Step, record_served

pytestmark = pytest.mark.timeout(120)

STEPS = [Step("outside", lambda rng, n: rng.gamma(4.0, 0.1, n)), Step("model", lambda rng, n: rng.gamma(4.0, 0.4, n))]


def _recorded(folder, steal_pct: float, seconds: int = 30):
    """A 100 req/s service recorded on 2 cores while the hypervisor took ``steal_pct`` of the CPU each second (a
    sampler's readings beside the service's own)."""
    arrivals = np.cumsum(np.random.default_rng(3).exponential(1 / 100.0, 100 * seconds))
    record_served(folder, arrivals, STEPS, cores=2, seed=3)
    _write_steal(next(folder.glob("host-a/served/*")), T0_NS, int(arrivals[-1]) + 2, steal_pct)
    return loadprobe.analyze([str(folder)])


def _write_steal(run, first_ns: int, seconds: int, steal_pct: float) -> None:
    """The psutil sampler's ``cpu`` ``steal_pct`` readings for ``seconds`` from ``first_ns``, beside a run's own."""
    steal = steal_pct * (1 + 0.2 * np.sin(np.arange(seconds)))  # it moves from second to second
    table = pa.Table.from_arrays([
        pa.array(first_ns + (np.arange(seconds, dtype=np.int64) + 1) * 10**9, pa.int64()),
        pa.DictionaryArray.from_arrays(pa.array(np.zeros(seconds, np.int32)), pa.array(["cpu"])),
        pa.DictionaryArray.from_arrays(pa.array(np.zeros(seconds, np.int32)), pa.array(["steal_pct"])),
        pa.array(steal, pa.float64())], schema=SAMPLES)
    pq.write_table(table, run / "samples-09999.parquet")


def test_a_recording_made_under_cpu_steal_is_warned_of_and_its_plans_say_so(tmp_path):
    portrait = _recorded(tmp_path / "stolen", 20.0)
    warned = [w for w in portrait.data_quality.warnings if "steal" in w]
    assert len(warned) == 1 and "host host-a" in warned[0] and "20% of its CPU time" in warned[0]
    plan = recommend(portrait, Constraints.parse(engines="cpu"))
    noted = [n for n in plan.recommended.notes if n.startswith("CPU steal:")]
    assert len(noted) == 1 and "20%" in noted[0] and "dedicated cores" in noted[0]


def test_a_little_steal_is_not_news(tmp_path):
    portrait = _recorded(tmp_path / "quiet", 1.0)
    assert any(m.metric == "steal_pct" for m in portrait.devices.metrics)  # measured and shown
    assert not [w for w in portrait.data_quality.warnings if "steal" in w]
    plan = recommend(portrait, Constraints.parse(engines="cpu"))
    assert not [n for n in plan.recommended.notes if n.startswith("CPU steal:")]


def test_an_llm_plan_of_the_recorded_engine_says_its_steps_held_steal(tmp_path):
    """The recorded engine's fitted steps hold the pauses; a device planned from its roofline does not."""
    import shutil

    from loadprobe.catalog import load_catalog
    from loadprobe.plan.constraints import Pricing, parse_engines
    from loadprobe.plan.llm import plan_llm
    from loadprobe.simulator.llm.roofline import model_shape

    from ..conftest import REPO

    data = tmp_path / "data"
    shutil.copytree(REPO / "samples" / "data" / "llm-stream" / "data", data)
    run = next(data.glob("vm/llm/*"))
    first = pq.read_table(next(run.glob("samples-*.parquet")), columns=["ts_ns"]).column("ts_ns")
    _write_steal(run, first[0].as_py() - 10**9, 45, 25.0)
    catalog = load_catalog()
    recorded = plan_llm([str(data)], model=None, engines=parse_engines("cpu", catalog), catalog=catalog, rate=2,
                        ttft_ms=None, tpot_ms=None, pricing=Pricing())
    assert [n for n in recorded.notes if n.startswith("CPU steal:") and "25%" in n]
    roofline = plan_llm([str(data)], model=model_shape("llama-3.1-8b"), engines=parse_engines("gpu:nvidia-l4", catalog),
                        catalog=catalog, rate=2, ttft_ms=None, tpot_ms=None, pricing=Pricing())
    assert not [n for n in roofline.notes if n.startswith("CPU steal:")]
