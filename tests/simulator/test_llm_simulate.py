"""``loadprobe simulate --llm``: the committed stream of the sample engine (samples/data/llm-stream) fitted and
replayed from the command line, its simulation.json holding the portrait's ``llm`` fields."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import loadprobe
from loadprobe.cli import main

from ..conftest import REPO

pytestmark = pytest.mark.timeout(120)

STREAM = REPO / "samples" / "data" / "llm-stream"
SAMPLE = ["--max-running", "8", "--kv-tokens", "4096", "--kv-reserve", "request"]


def _simulate(*args):
    return CliRunner().invoke(main, ["simulate", *args], catch_exceptions=False)


def test_a_poisson_rate_replayed_through_the_fitted_engine_gives_the_portrait_s_llm_fields(tmp_path):
    out = tmp_path / "sim"
    done = _simulate("--llm", str(STREAM / "data"), "--llm", str(STREAM / "client"), *SAMPLE, "--poisson", "--rate", "6",
                     "--duration", "20", "--seed", "2", "-o", str(out))
    assert done.exit_code == 0, done.output
    document = json.loads((out / "simulation.json").read_text())
    portrait = loadprobe.analyze([str(STREAM / "data"), str(STREAM / "client")]).to_dict()["llm"]
    llm = document["llm"]
    assert set(llm) == set(portrait)  # field by field, as verify compares them
    assert llm["source"] == "simulated" and llm["requests"] == document["workload"]["requests"] > 60
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(llm[name]) == set(portrait[name]) and 0 < llm[name]["p50"] <= llm[name]["p95"]
    assert llm["engine"]["running"]["peak"] <= 8  # the engine's cap, as given
    assert document["engine_settings"]["chunked_prefill"] is False  # the recording shows its prefills apart
    assert "chunked prefill off" in done.output and "checked on the recording" in done.output
    check = document["check"]
    assert check["requests"] > 100 and set(check["compared"]) == {"ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms",
                                                                  "tpot_p95_ms"}
    again = _simulate("--llm", str(STREAM / "data"), "--poisson", "--rate", "6", "--duration", "5", "-o", str(out))
    assert again.exit_code == 2 and "--force" in again.output  # nothing replaced unasked


def test_without_a_schedule_the_recording_s_own_arrivals_are_replayed(tmp_path):
    done = _simulate("--llm", str(STREAM / "data"), *SAMPLE, "-o", str(tmp_path / "sim"), "--json")
    assert done.exit_code == 0, done.output
    document = json.loads(done.output)
    assert document["workload"]["requests"] == document["check"]["requests"]
    assert document["workload"]["lengths"] == "the recording's"


def test_a_faster_rate_waits_longer_for_its_first_token(tmp_path):
    def p95(rate):
        out = tmp_path / f"r{rate}"
        assert _simulate("--llm", str(STREAM / "data"), *SAMPLE, "--poisson", "--rate", str(rate), "--duration", "30",
                         "--seed", "1", "-o", str(out)).exit_code == 0
        return json.loads((out / "simulation.json").read_text())["llm"]["ttft_ms"]["p95"]

    assert p95(12) > p95(3)


def test_settings_that_cannot_reproduce_the_recording_say_so_and_take_no_time_off_the_first_token(tmp_path):
    """One token per iteration starves every prompt: the replay of the recording's own arrivals is far slower than
    the recording. No negative work before the first token is taken to hide it, and the check says why."""
    done = _simulate("--llm", str(STREAM / "data"), "--token-budget", "1", "--chunked-prefill", "-o",
                     str(tmp_path / "sim"), "--json")
    assert done.exit_code == 0, done.output
    document = json.loads(done.output)
    assert document["check"]["ttft_offset_ms"] >= 0
    assert "these settings do not reproduce the engine as recorded" in document["check"]["summary"]
    llm = document["llm"]
    assert llm["ttft_ms"]["count"] == llm["e2e_ms"]["count"] and llm["ttft_ms"]["p50"] <= llm["e2e_ms"]["p50"]


@pytest.mark.parametrize("args, says", [
    ([], "give a PLAN"),
    (["--max-running", "8", str(REPO / "samples" / "vision" / "pipeline.yaml")], "--max-running"),
    (["--llm", str(REPO / "samples" / "data" / "vision")], "no LLM request"),
    (["--llm", str(STREAM / "data"), "--max-running", "0"], "--max-running 0"),
    (["--llm", str(STREAM / "data"), "--kv-tokens", "10"], "--kv-tokens 10: the longest request needs"),
    (["--llm", str(STREAM / "data"), str(REPO / "samples" / "vision" / "pipeline.yaml")], "not an LLM plan"),
])
def test_what_cannot_be_simulated_is_one_line_and_exit_2(tmp_path, args, says):
    done = CliRunner().invoke(main, ["simulate", *args, "-o", str(tmp_path / "sim")])
    assert done.exit_code == 2, done.output
    assert says in done.output and "Traceback" not in done.output


def test_the_documented_llm_example_runs_as_written(tmp_path):
    """docs/simulate.md's ``--llm`` command, from the clone's root, into a folder of the test's own."""
    text = (REPO / "docs" / "simulate.md").read_text(encoding="utf-8")
    section = text.split("## LLM engines: `--llm`", 1)[1]
    command = section.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ").strip()
    assert command.startswith("loadprobe simulate --llm")
    args = command.replace("/tmp/llm-sim", str(tmp_path / "sim")).split()[2:]
    done = CliRunner().invoke(main, ["simulate", *[a.replace("samples/", str(REPO / "samples") + "/", 1)
                                                   if a.startswith("samples/") else a for a in args]])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "sim" / "simulation.json").exists()


def test_what_the_replay_asks_past_the_recording_is_said(tmp_path):
    """The Azure code trace's prompts (thousands of tokens) through an engine recorded with prompts of a few
    hundred: the output says their prefill is extrapolated; the recording's own arrivals ask nothing past it."""
    trace = REPO / "samples" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
    done = _simulate("--llm", str(STREAM / "data"), "--trace", str(trace), "--preset", "azure-llm-2023", "--speed",
                     "0.25", "--duration", "120", "--max-running", "16", "--json", "-o", str(tmp_path / "azure"))
    assert done.exit_code == 0, done.output
    beyond = json.loads(done.output)["beyond_recording"]
    assert any("longer than the recording's longest" in line for line in beyond), beyond
    own = _simulate("--llm", str(STREAM / "data"), *SAMPLE, "--json", "-o", str(tmp_path / "own"))
    assert not any("prompt" in line for line in json.loads(own.output)["beyond_recording"])


def test_an_llm_plan_s_pools_replay_the_schedule_with_the_recording_s_lengths(tmp_path):
    """``simulate PLAN --llm DATA``: the pools of a plan of ``recommend --llm`` replace the recorded engine; goodput is
    judged against the plan's own targets."""
    plan = tmp_path / "plan" / "pipeline.yaml"
    made = CliRunner().invoke(main, ["recommend", "--llm", str(STREAM / "data"), "--max-running", "8", "--min-rps", "6",
                                     "--slo-ttft-ms", "80", "--slo-tpot-ms", "8", "-o", str(plan)],
                              catch_exceptions=False)
    assert made.exit_code == 0, made.output
    done = _simulate(str(plan), "--llm", str(STREAM / "data"), "--poisson", "--rate", "6", "--duration", "20",
                     "--seed", "3", "-o", str(tmp_path / "sim"), "--json")
    assert done.exit_code == 0, done.output
    document = json.loads(done.output)
    pools = document["plan"]["pools"]
    assert {p["role"] for p in pools.values()} <= {"colocated", "prefill", "decode"}
    assert document["llm"]["requests"] == document["workload"]["requests"] > 60
    goodput = document["llm"]["goodput"]
    assert (goodput["ttft_ms"], goodput["tpot_ms"]) == (80, 8)
    assert document["llm"]["engine"]["running"]["peak"] <= 8 * sum(p["replicas"] for p in pools.values())
    refused = _simulate(str(plan), "--llm", str(STREAM / "data"), "--max-running", "4", "-o", str(tmp_path / "x"))
    assert refused.exit_code == 2 and "sets each pool's engine" in refused.output
    needs_data = _simulate(str(plan), "--poisson", "--rate", "6", "-o", str(tmp_path / "y"))
    assert needs_data.exit_code == 2 and "give --llm DATA" in needs_data.output
