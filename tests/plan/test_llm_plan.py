"""``loadprobe recommend --llm``: LLM serving planned as pools of engine replicas, colocated or prefill/decode apart,
sized by replaying the load through them, priced, the cheapest kept -- on recordings whose shapes pull the two
phases apart, on the committed sample engine's stream, and on bad input."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import shlex

import numpy as np
import pytest
from click.testing import CliRunner

from loadprobe import pipeline
from loadprobe._errors import LoadprobeError
from loadprobe.catalog import load_catalog
from loadprobe.cli import main
from loadprobe.record.importer import import_log
from loadprobe.simulator.llm.roofline import model_shape, on_device
from loadprobe.simulator.llm.steps import StepModel

from ..conftest import REPO

pytestmark = pytest.mark.timeout(240)

STREAM = REPO / "samples" / "data" / "llm-stream"
FIGURES = ("peak_flops", "memory_bandwidth_bytes_per_s", "memory_bytes", "tdp_w", "hourly_usd")


def _device(name: str, flops: float, bandwidth: float, hourly: float) -> dict:
    return {"kind": "gpu", "vendor": "Test", "name": name, "peak_flops": {"bf16": flops},
            "memory_bandwidth_bytes_per_s": bandwidth, "memory_bytes": 48e9, "tdp_w": 300, "price_usd": None,
            "hourly_usd": hourly, "dynamic_shapes": "native", "int8": True, "aliases": [name],
            "sources": {f: "a test's figure" for f in FIGURES}}


@pytest.fixture(scope="module")
def catalog_file(tmp_path_factory):
    """Two rented devices at one price: one with 4x the other's FLOP/s, the other with 5x its bandwidth."""
    path = tmp_path_factory.mktemp("catalog") / "devices.json"
    path.write_text(json.dumps({"version": "1.0", "devices": {
        "test-compute": _device("Test C", 400e12, 400e9, 1.0),
        "test-bandwidth": _device("Test B", 100e12, 2000e9, 1.0)}}))
    return path


def _recording(folder, prompt: int, output: int, seed: int, rate: float = 10.0, n: int = 400, arrivals=None):
    """A request log of ``n`` Poisson arrivals (or ``arrivals``, s) with prompt and output lengths around the given
    ones, imported."""
    rng = np.random.default_rng(seed)
    start = dt.datetime(2026, 1, 1)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t in np.cumsum(rng.exponential(1 / rate, n)) if arrivals is None else arrivals:
        rows.append(f"{start + dt.timedelta(seconds=float(t)):%Y-%m-%d %H:%M:%S.%f},"
                    f"{rng.integers(prompt // 2, prompt * 3 // 2)},{rng.integers(max(1, output // 2), output * 3 // 2)}")
    log = folder / "requests.csv"
    log.write_text("\n".join(rows) + "\n")
    import_log(str(log), str(folder / "data"), preset="azure-llm-2023")
    return folder / "data"


def _recommend(*args):
    return CliRunner().invoke(main, ["recommend", "--llm", *args], catch_exceptions=False)


@pytest.mark.parametrize("prompt, output", [(4000, 16), (200, 400)], ids=["long-prompts", "long-outputs"])
def test_each_phase_goes_where_its_figures_say_and_never_above_the_best_colocated_plan(tmp_path, catalog_file,
                                                                                       prompt, output):
    data = _recording(tmp_path, prompt, output, seed=prompt, n=300)
    out = tmp_path / "plan"
    done = _recommend(str(data), "--model", "llama-3.1-8b", "--catalog", str(catalog_file), "--engines",
                      "gpu:test-compute,gpu:test-bandwidth", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "60",
                      "--min-rps", "20", "-o", str(out / "pipeline.yaml"))
    assert done.exit_code == 0, done.output
    plans = json.loads((out / "plans.json").read_text())
    engines = {e["engine"]: e for e in plans["engines"]}
    # The figures it prints: FLOP/s and bytes/s per unit of money, per device.
    assert "TFLOP/s per $/h" in done.output and "GB/s per $/h" in done.output
    most_flops = max(engines, key=lambda e: engines[e]["flops_per_dollar_hour"])
    most_bandwidth = max(engines, key=lambda e: engines[e]["bytes_per_dollar_hour"])
    assert (most_flops, most_bandwidth) == ("test-compute", "test-bandwidth")

    def cheapest(role):  # the pool of that role needing the fewest devices (one price per device)
        feasible = [e for e in engines.values() if e["pools"][role]["feasible"]]
        return min(feasible, key=lambda e: e["pools"][role]["devices"])["engine"]

    # Prefill (compute-bound) is cheapest where FLOP/s are, decode (bandwidth-bound) where bandwidth is.
    assert cheapest("prefill") == most_flops and cheapest("decode") == most_bandwidth
    chosen = plans["recommended"]
    options = [chosen, *plans["alternatives"]]
    priced = [o for o in options if o["feasible"] and o["tco"]["comparable"]]
    assert chosen["feasible"] and chosen["tco"]["total"] == min(o["tco"]["total"] for o in priced)
    colocated = [o["tco"]["total"] for o in priced if not o["disaggregated"]]
    assert not colocated or chosen["tco"]["total"] <= min(colocated)
    if chosen["disaggregated"]:
        assert [p["device"] for p in chosen["pools"]] == [most_flops, most_bandwidth]
        assert chosen["handoff"]["mean_ms"] > 0 and "KV hand-off" in done.output
    else:
        assert chosen["pools"][0]["device"] == (most_flops if prompt > output else most_bandwidth)
    # The plan meets what it says at the rate and at 1.5x it, goodput per dollar and joules per token stated.
    estimate = chosen["estimate"]
    assert estimate["ttft_p95_ms_at_headroom"] <= 1000 and estimate["tpot_p95_ms_at_headroom"] <= 60
    assert estimate["goodput_per_dollar"] > 0 and estimate["joules_per_output_token"] > 0
    # pipeline.yaml carries the pools: device type, count, running sequences, token budget, KV capacity.
    config = pipeline.load(out / "pipeline.yaml", catalog=load_catalog(str(catalog_file)))
    assert set(config.llm.pools) == set(config.engines) == {s.engine for s in config.stages}
    for name, pool in config.llm.pools.items():
        engine = config.engines[name]
        assert engine.count == pool.replicas * pool.tensor_parallel
        assert pool.max_running == 256 and pool.kv_tokens > 0 and pool.token_budget > 0
    assert config.slo.ttft_p95_ms == 1000 and config.slo.tpot_p95_ms == 60 and config.llm.model.name == "llama-3.1-8b"


def test_bursts_in_the_recording_are_sized_for_and_the_plan_holds_its_targets_on_the_recorded_arrivals(tmp_path):
    """Two recordings at one mean rate: Poisson, and bursts (every 100 s, 10 s at 10x the mean). The plan of the
    bursty one needs more devices, and its pools, replayed at the recorded arrivals, meet the targets it was made for."""
    rng = np.random.default_rng(7)
    bursts = np.sort(np.concatenate([k * 100 + rng.uniform(0, 10, 100) for k in range(6)]))
    devices = {}
    for name, arrivals in (("poisson", np.cumsum(rng.exponential(1.0, 600))), ("bursty", bursts)):
        folder = tmp_path / name
        folder.mkdir()
        data = _recording(folder, 1500, 100, seed=11, arrivals=arrivals)
        out = folder / "plan"
        done = _recommend(str(data), "--model", "llama-3.1-8b", "--engines", "gpu:nvidia-l40s", "--slo-ttft-ms", "1000",
                          "--slo-tpot-ms", "60", "-o", str(out / "pipeline.yaml"))
        assert done.exit_code == 0, done.output
        chosen = json.loads((out / "plans.json").read_text())["recommended"]
        devices[name] = sum(p["devices"] for p in chosen["pools"])
        replayed = CliRunner().invoke(main, ["simulate", str(out / "pipeline.yaml"), "--llm", str(data), "--json",
                                             "-o", str(folder / "sim")], catch_exceptions=False)
        assert replayed.exit_code == 0, replayed.output
        llm = json.loads(replayed.output)["llm"]
        assert llm["ttft_ms"]["p95"] <= 1000 and llm["tpot_ms"]["p95"] <= 60
    assert devices["bursty"] > devices["poisson"]


def test_long_prompts_on_a_colocated_pool_get_a_token_budget_that_keeps_decoding_within_its_target(tmp_path):
    """A colocated engine chunking 4,000-token prompts 8,192 tokens at a time stalls its decoding sequences for a
    whole pass of prompt work; the plan's smaller budget keeps them within the TPOT target with fewer devices."""
    data = _recording(tmp_path, 4000, 64, seed=3)
    out = tmp_path / "plan"
    done = _recommend(str(data), "--model", "llama-3.1-8b", "--engines", "gpu:nvidia-h100-sxm", "--slo-ttft-ms",
                      "2000", "--slo-tpot-ms", "40", "--min-rps", "10", "-o", str(out / "pipeline.yaml"))
    assert done.exit_code == 0, done.output
    plans = json.loads((out / "plans.json").read_text())
    colocated = next(o for o in [plans["recommended"], *plans["alternatives"]] if not o["disaggregated"])
    pool = colocated["pools"][0]
    assert pool["feasible"] and pool["settings"]["token_budget"] < 8192
    assert "half the TPOT target" in pool["settings"]["why"]


def test_the_recorded_engine_is_planned_from_its_own_fitted_steps(tmp_path):
    out = tmp_path / "plan"
    done = _recommend(str(STREAM / "data"), "--min-rps", "6", "--max-running", "8", "-o", str(out / "pipeline.yaml"))
    assert done.exit_code == 0, done.output
    plans = json.loads((out / "plans.json").read_text())
    chosen = plans["recommended"]
    assert chosen["feasible"] and plans["model"] is None
    # Targets default to what the recording shows; each replica of the recorded engine is a host without a price.
    assert "(the recorded p95)" in plans["targets"]["why"]
    assert not chosen["tco"]["comparable"] and any("recorded host" in u for u in chosen["tco"]["unknown"])
    config = pipeline.load(out / "pipeline.yaml")
    (name, pool), = [(n, p) for n, p in config.llm.pools.items() if p.role == "colocated"] or [(None, None)]
    assert pool is not None and pool.max_running == 8 and not pool.step_model.get("roofline")
    assert pool.step_model["rows"] > 0 and config.engines[name].kind == "cpu"


def test_a_model_too_large_for_a_device_runs_tensor_parallel_or_is_excluded_saying_why():
    catalog = load_catalog()
    big = model_shape("llama-3.1-70b")
    h100 = on_device(big, catalog.get("nvidia-h100-sxm"), longest=8192)
    assert h100.tp == 2 and h100.kv_tokens > 8192  # 141 GB of weights need two 80 GB devices
    with pytest.raises(Exception, match="less than llama-3.1-70b's weights"):
        on_device(big, catalog.get("nvidia-t4"), longest=8192)
    small = on_device(model_shape("llama-3.1-8b"), catalog.get("nvidia-l4"), longest=4096)
    # The roofline: a decode pass reads the weights once, so one sequence or eight take about as long...
    one, eight = (small.steps.decode_ns(n, n * 1000) for n in (1, 8))
    assert one == pytest.approx(eight, rel=0.1)
    # ... while a long prompt is compute: its pass grows with its tokens.
    assert small.steps.prefill_ns(8000) > 3 * small.steps.prefill_ns(1000)


def test_a_tensor_parallel_unit_pays_its_all_reduces_over_the_device_link():
    catalog = load_catalog()
    big = model_shape("llama-3.1-70b")
    h100 = catalog.get("nvidia-h100-sxm")
    unit = on_device(big, h100, longest=8192)
    unlinked = dataclasses.replace(unit, steps=dataclasses.replace(unit.steps, link_ns=0.0, link_per_token=0.0))
    # Two all-reduces per layer, each a fixed time and a ring's 2(n-1)/n of the tokens' bf16 activations.
    tokens, n = 4096, unit.tp
    expected = 2 * 80 * (6e3 + 2 * (n - 1) / n * tokens * 8192 * 2 / (450e9 * 0.31) * 1e9)
    assert unit.steps.prefill_ns(tokens) - unlinked.steps.prefill_ns(tokens) == pytest.approx(expected, rel=1e-9)
    assert unit.steps.decode_ns(32, 32 * 1000) - unlinked.steps.decode_ns(32, 32 * 1000) == pytest.approx(
        2 * 80 * (6e3 + 2 * (n - 1) / n * 32 * 8192 * 2 / (450e9 * 0.31) * 1e9), rel=1e-9)
    # A device with no link figure cannot be estimated tensor-parallel (an unknown is not free), nor one whose figures
    # would make a prompt take hours.
    with pytest.raises(LoadprobeError, match="no link between them"):
        on_device(big, dataclasses.replace(h100, interconnect_bytes_per_s=None), longest=8192)
    with pytest.raises(LoadprobeError, match="check its figures"):
        on_device(big, dataclasses.replace(h100, interconnect_bytes_per_s=1.0), longest=8192)
    # A slower link, a slower pass; the terms travel with the step model (pipeline.yaml's step_model).
    slow = on_device(big, dataclasses.replace(h100, interconnect_bytes_per_s=32e9), longest=8192)
    assert slow.steps.prefill_ns(tokens) > 2 * unit.steps.prefill_ns(tokens)
    assert StepModel.from_dict(unit.steps.to_dict()).prefill_ns(tokens) == pytest.approx(unit.steps.prefill_ns(tokens))
    # Past two devices over PCIe the plan says the all-reduce may run through the host.
    l40s = on_device(big, catalog.get("nvidia-l40s"), longest=8192)
    assert l40s.tp == 4 and "PCIe past two devices" in l40s.figures["tensor_parallel_note"]
    assert on_device(model_shape("llama-3.1-8b"), h100, longest=8192).steps.link_ns == 0  # one device: none


def test_a_config_json_gives_the_model_s_shape(tmp_path):
    config = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 128256, "_name_or_path": "my-llama"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    shape = model_shape(str(path))
    preset = model_shape("llama-3.1-8b")
    assert shape.name == "my-llama" and shape.params == preset.params
    assert 7.9e9 < shape.params < 8.1e9 and shape.kv_bytes_per_token("bf16") == 131072  # 2 x 32 x 8 x 128 x 2 bytes
    moe = dict(config, num_local_experts=8, num_experts_per_tok=2)
    path.write_text(json.dumps(moe))
    mixture = model_shape(str(path))
    assert mixture.params > 3 * shape.params and mixture.active_params < mixture.params / 2


@pytest.mark.parametrize("name, config, total, active, kv", [
    ("Qwen3-30B-A3B", dict(hidden_size=2048, num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4,
                           head_dim=128, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
                           num_experts_per_tok=8, vocab_size=151936), 30.5e9, 3.3e9, 48 * 2 * 4 * 128 * 2),
    ("DeepSeek-V3", dict(hidden_size=7168, num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
                         q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                         intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=256, n_shared_experts=1,
                         num_experts_per_tok=8, first_k_dense_replace=3, vocab_size=129280), 671e9, 37e9,
     61 * (512 + 64) * 2),  # multi-head latent attention caches one 576-wide latent per layer
    ("Mixtral-8x7B", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                          intermediate_size=14336, num_local_experts=8, num_experts_per_tok=2, vocab_size=32000),
     46.7e9, 12.9e9, 32 * 2 * 8 * 128 * 2),
])
def test_a_mixture_of_experts_counts_its_experts_as_its_model_card_does(tmp_path, name, config, total, active, kv):
    """Each model's published total and active parameters (its Hugging Face model card) from its config.json."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    shape = model_shape(str(path))
    assert shape.params == pytest.approx(total, rel=0.02) and shape.active_params == pytest.approx(active, rel=0.03)
    assert shape.kv_bytes_per_token("bf16") == kv


@pytest.mark.parametrize("change, expected", [
    ({"hidden_size": 4}, "'hidden_size' must be at least num_attention_heads (32)"),
    ({"hidden_size": float("nan")}, "'hidden_size' must be a whole number above 0"),
    ({"hidden_size": float("inf")}, "'hidden_size' must be a whole number above 0"),
    ({"num_local_experts": "eight", "num_experts_per_tok": 2}, "'num_local_experts' must be a whole number"),
    ({"num_local_experts": [8], "num_experts_per_tok": 2}, "'num_local_experts' must be a whole number"),
    ({"num_local_experts": -4, "num_experts_per_tok": 2}, "'num_local_experts' must be a whole number above 0"),
    ({"num_local_experts": 8, "num_experts_per_tok": 9}, "'num_experts_per_tok' must be at most"),
    ({"num_parameters": 0}, "'num_parameters' must be a number above 0"),
    ({"num_parameters": "8e9"}, "'num_parameters' must be a number above 0"),
    ({"tie_word_embeddings": "no"}, "'tie_word_embeddings' must be true or false"),
    ({"text_config": {"num_hidden_layers": 32}}, "field 'text_config.hidden_size'"),
])
def test_a_config_json_with_a_bad_field_is_refused_in_one_line_naming_it(tmp_path, change, expected):
    config = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 128256, **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(LoadprobeError, match=re.escape(expected)) as raised:
        model_shape(str(path))
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("args, expected", [
    (["--engines", "gpu:nvidia-l4"], "needs the model's shape"),
    (["--model", "no-such-model.json"], "expected a model's config.json"),
    (["--model", "llama-3.1-8b", "--slo-p95-ms", "100"], "not for --llm"),
    (["--min-rps", "0"], "--min-rps 0: expected a number above 0"),
    (["--slo-tpot-ms", "nan"], "--slo-tpot-ms nan: expected a number above 0"),
    (["--min-rps", "1e12"], "--min-rps 1e+12: above the most a plan holds"),
    (["--engines", ""], "--engines is empty"),
    (["--model", "llama-3.1-70b", "--engines", "gpu:nvidia-t4"], "less than llama-3.1-70b's weights"),
    (["--kv-tokens", "10"], "--kv-tokens 10: the longest request needs 367 tokens of KV cache"),
    (["--model", "llama-3.1-8b", "--engines", "cpu"], "--engines: with --model, name the devices to plan"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, expected):
    done = CliRunner().invoke(main, ["recommend", "--llm", str(STREAM / "data"), *args,
                                     "-o", str(tmp_path / "p" / "pipeline.yaml")])
    assert done.exit_code == 2 and expected in done.output and "Traceback" not in done.output
    assert len(done.output.strip().splitlines()) == 1
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("outputs, expected", [([5], "it holds one request"),
                                                  ([0], "its one request has no output tokens recorded"),
                                                  ([0, 7, 0], "only 1 of its 3 requests has its output tokens"),
                                                  ([0, 0], "none of its 2 requests has its output tokens")])
def test_too_few_requests_to_plan_say_how_many_there_were(tmp_path, outputs, expected):
    start = dt.datetime(2026, 1, 1)
    log = tmp_path / "requests.csv"
    log.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"{start + dt.timedelta(seconds=i):%Y-%m-%d %H:%M:%S.%f},100,{out}\n" for i, out in enumerate(outputs)))
    import_log(str(log), str(tmp_path / "data"), preset="azure-llm-2023")
    done = CliRunner().invoke(main, ["recommend", "--llm", str(tmp_path / "data"), "-o", str(tmp_path / "p")])
    assert done.exit_code == 2 and expected in done.output and "at least 2 requests" in done.output
    assert len(done.output.strip().splitlines()) == 1 and not (tmp_path / "p").exists()


def test_a_tensor_parallel_plan_carries_its_all_reduce_and_an_excluded_device_has_no_say_in_the_pricing(tmp_path):
    """70B on a device with no link figure (Inferentia2: eight of them, tensor parallel) is excluded saying so; the
    L40S that remains is priced on its own terms (rented, its hourly rate), and its unit's all-reduce note reaches the
    option's notes in plans.json and the pool's reason in pipeline.yaml."""
    out = tmp_path / "plan"
    done = CliRunner().invoke(main, ["recommend", "--llm", str(STREAM / "data"), "--model", "llama-3.1-70b",
                                     "--engines", "npu:aws-inferentia2,gpu:nvidia-l40s", "--slo-ttft-ms", "3000",
                                     "--slo-tpot-ms", "150", "-o", str(out / "pipeline.yaml")])
    assert done.exit_code == 0, done.output
    assert "aws-inferentia2: llama-3.1-70b needs 8 of them (tensor parallel)" in done.output
    assert "costs: rented" in done.output
    plans = json.loads((out / "plans.json").read_text())
    assert any("tensor-parallel over 4: 160 all-reduces" in n and "PCIe" in n for n in plans["recommended"]["notes"])
    config = pipeline.load(out / "pipeline.yaml")
    assert all("all-reduces" in pool.why for pool in config.llm.pools.values())


def test_the_docs_worked_example_runs_as_written(tmp_path):
    """docs/recommend.md's commands on the shipped Azure trace, each as written (paths under /tmp moved here): the
    plan it prints is the one the doc shows, and the replay, the export and their files follow."""
    text = (REPO / "docs" / "recommend.md").read_text()
    section = text.split("## LLM serving", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    outputs = {}
    for line in (line.strip() for line in block.splitlines() if line.strip()):
        args = shlex.split(line.replace("/tmp/", f"{tmp_path}/"))
        assert args[0] == "loadprobe"
        done = CliRunner().invoke(main, [a.replace("samples/", str(REPO / "samples") + "/", 1) for a in args[1:]],
                                  catch_exceptions=False)
        assert done.exit_code == 0, (line, done.output)
        outputs[args[1]] = done.output
    shown = section.split("```console\n", 1)[1].split("```", 1)[0]
    recommended = next(line for line in shown.splitlines() if line.startswith("recommended:"))
    assert recommended.split(";")[0] in outputs["recommend"]
    assert list((tmp_path / "llm-vllm").glob("serve-*.sh")) and (tmp_path / "llm-sim" / "simulation.json").exists()
    llm = json.loads((tmp_path / "llm-sim" / "simulation.json").read_text())["llm"]
    assert llm["ttft_ms"]["p95"] <= 2000 and llm["tpot_ms"]["p95"] <= 100  # the plan holds on the trace's arrivals


def test_a_rate_past_the_largest_pool_ends_saying_so(tmp_path):
    """100,000 req/s of the recorded engine needs more replicas than any pool is sized to: each pool stops at the
    largest size, misses, says so, and the option serving the most requests within the targets comes first (this
    used to search forever)."""
    out = tmp_path / "plan"
    done = CliRunner().invoke(main, ["recommend", "--llm", str(STREAM / "data"), "--min-rps", "100000",
                                     "-o", str(out / "pipeline.yaml")])
    assert done.exit_code == 0, done.output
    plans = json.loads((out / "plans.json").read_text())
    options = [plans["recommended"], *plans["alternatives"]]
    assert not any(o["feasible"] for o in options)
    assert any("misses the targets even with 4,096 replicas" in n for n in plans["recommended"]["notes"])
    assert plans["recommended"]["estimate"]["good_share"] == max(o["estimate"]["good_share"] for o in options)


def test_a_replica_s_stream_is_its_turns_of_the_recording_played_again_after_itself():
    """``stream`` picks one replica's turns without making the others': the same as playing the window as many
    times as needed and taking every n-th request."""
    from loadprobe.plan.llm_pools import MIN_REQUESTS, Load, stream

    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(0.25, 150))
    load = Load(rate=4.0, arrivals_s=arrivals - arrivals[0], prompts=rng.integers(1, 500, 150),
                outputs=rng.integers(1, 200, 150), ttft_ms=1000.0, tpot_ms=50.0, link_bytes_per_s=1e10, seed=0)
    for replicas in (1, 3, 64):
        t, prompts, outputs = stream(load, 8.0, replicas)
        scaled = load.arrivals_s * load.recorded_rate / 8.0
        span = scaled[-1] + 1 / 8.0
        copies = max(1, -(-MIN_REQUESTS * replicas // 150))
        every = np.concatenate([scaled + k * span for k in range(copies)])[::replicas]
        assert np.allclose(t, every - every[0]) and len(t) >= MIN_REQUESTS
        assert np.array_equal(prompts, np.tile(load.prompts, copies)[::replicas])
        assert np.array_equal(outputs, np.tile(load.outputs, copies)[::replicas])


def test_planning_reports_its_progress_up_to_the_whole(tmp_path):
    """``recommend --llm`` draws a bar from these calls (where stderr is a terminal): one per engine placed and per
    pool sized, an excluded engine's pools counted at once, ending at the whole."""
    from loadprobe.catalog import load_catalog
    from loadprobe.plan.constraints import Pricing, parse_engines
    from loadprobe.plan.llm import plan_llm

    catalog, calls = load_catalog(), []
    plan_llm([str(STREAM / "data")], model=model_shape("llama-3.1-8b"), catalog=catalog, ttft_ms=2000, tpot_ms=100,
             engines=parse_engines("gpu:nvidia-l4,gpu:nvidia-t4,gpu:nvidia-h100-sxm", catalog), rate=5,
             pricing=Pricing(), progress=lambda done, total: calls.append((done, total)))
    done = [d for d, _ in calls]
    assert {t for _, t in calls} == {3 * 4} and done == sorted(done) and done[-1] == 12
    assert len(calls) >= 3  # one call at least per engine
