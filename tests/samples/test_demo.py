"""``loadprobe demo`` end to end: a real server process, real HTTP load, a real recording."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

import loadprobe

pytest.importorskip("fastapi")
pytest.importorskip("onnxruntime")

from ..conftest import spans_in  # noqa: E402


def demo(out, *args, env=None, python=(), **kwargs):
    full_env = dict(os.environ, LOADPROBE_CACHE=str(out / "cache"), **(env or {}))
    full_env.pop("LOADPROBE_DIR", None)
    return subprocess.Popen([sys.executable, *python, "-m", "loadprobe", "demo", "-o", str(out / "runs"), *args],
                            env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def test_demo_serves_loads_records_and_analyses(tmp_path):
    # Run from a folder holding a package named loadprobe that is not the installed one, as a
    # clone's root does (its ./loadprobe has no samples): the demo's server must not import it.
    shadow = tmp_path / "clone"
    (shadow / "loadprobe").mkdir(parents=True)
    (shadow / "loadprobe" / "__init__.py").write_text("raise ImportError('the source tree shadowed the install')\n")
    safe = ("-P",) if sys.version_info >= (3, 11) else ()  # the demo itself: the installed package
    proc = demo(tmp_path, "--seconds", "6", "--rate", "8", python=safe, cwd=shadow if safe else None)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    (run,) = (tmp_path / "runs").iterdir()
    portrait = json.loads((run / "report" / "portrait.json").read_text())
    stages = {s["name"] for s in portrait["stages"]}
    assert {"POST /inspect", "decode", "preprocess", "backbone", "head", "nms"} <= stages
    served = [r for r in spans_in(run / "data") if r["stage"] == "POST /inspect"]
    sent = spans_in(run / "client")
    ok_at_client = {r["request_id"] for r in sent if r["status"] == "ok"}
    assert len(ok_at_client) > 20
    # every request the client saw complete has exactly one request span at the server
    served_ids = [r["request_id"] for r in served]
    assert ok_at_client <= set(served_ids) and len(served_ids) == len(set(served_ids))
    assert portrait["devices"], "the server's recorder sampled the devices"
    # analysed once the server stopped: its recorder finished its files and final counters
    assert portrait["data_quality"]["counters_unknown"] == [], portrait["data_quality"]["warnings"]
    # the sample explains its request time: stages and the queues before them, not "no probed stage"
    assert portrait["requests"]["unattributed_share"] <= 0.10 and portrait["requests"]["queued_share"] > 0  # >= 90%
    by_name = {s["name"]: s for s in portrait["stages"]}
    for name in ("preprocess", "backbone", "head", "nms"):  # every computing stage: its FLOPs and bytes
        assert by_name[name]["intensity"]["flops_per_byte"] > 0, name
        assert by_name[name]["intensity"]["roofline"]["device"] == "nvidia-l4"
    assert portrait["roofline_device"] == "nvidia-l4"
    assert str(run / "report" / "portrait.json") in out
    html = (run / "report" / "portrait.html").read_text(encoding="utf-8")  # the report, with the plan
    assert str(run / "report" / "portrait.html") in out
    assert '<section id="plan"' in html and "Copy pipeline.yaml" in html
    # the backbone's INT8 check ran, the plan used its verdict and the report shows it
    align = json.loads((run / "report" / "align.json").read_text())
    assert align["stage"] == "backbone" and align["verdict"]["decision"] in ("int8-ok", "int8-keep-fp16", "fp16-only")
    plans = json.loads((run / "report" / "plans.json").read_text())
    assert plans["constraints"]["align"]["backbone"]
    # sized for a rate the host CPU alone cannot carry: accelerators take the backbone, decode stays
    assert "host CPU alone" in plans["sizing_why"]
    all_cpu = next(o for o in plans["alternatives"] if o["name"] == "all-cpu")
    assert all_cpu["estimate"]["max_rps"] < plans["sizing_rate_rps"]
    placed = {d["stage"]: d for d in plans["recommended"]["stages"]}
    assert placed["backbone"]["engine"] != "cpu" and placed["decode"]["engine"] == "cpu"
    assert len({d["engine"].rstrip("0123456789") for d in placed.values()}) >= 2
    # placements follow the evidence: dynamic shapes stay off the NPU, INT8 only where align.json allows it
    verdicts = {stage: v["decision"] for stage, v in plans["constraints"]["align"].items()}
    for option in [plans["recommended"], *plans["alternatives"]]:
        for d in option["stages"]:
            assert not (d["dynamic_shape"] and d["kind"] == "npu"), (option["name"], d["stage"])
            if d["precision"] == "int8":
                assert verdicts.get(d["stage"]) in ("int8-ok", "int8-keep-fp16"), (option["name"], d["stage"])
    # what to buy: each accelerator engine of the plan with its units, said in the output
    bought = {n: e for n, e in plans["recommended"]["engines"].items() if e["kind"] != "cpu"}
    assert bought and all(e["count"] >= 1 and e["device"] for e in bought.values())
    assert "what to rent" in out or "what to buy" in out
    # ranked on money from published figures, each printed with its source and date (issue #36)
    assert plans["constraints"]["basis_why"] and all(o["tco"]["comparable"] for o in [plans["recommended"],
                                                                                       *plans["alternatives"]]
                                                       if o.get("tco"))
    assert "cost figures (each as used, with its source and date):" in out
    for device in {e["device"] for e in bought.values()}:
        assert f"{device} {'hourly_usd' if plans['constraints']['rent'] else 'price_usd'} =" in out
    # the plans differ where their engines differ
    feasible_options = [o for o in [plans["recommended"], *plans["alternatives"]] if o["pipeline"]]
    for i, a in enumerate(feasible_options):
        for b in feasible_options[i + 1:]:
            if {d["stage"]: d["kind"] for d in a["stages"]} != {d["stage"]: d["kind"] for d in b["stages"]}:
                assert (a["estimate"]["p95_ms"], a["engines"]) != (b["estimate"]["p95_ms"], b["engines"]), \
                    (a["name"], b["name"])
    assert f"{plans['sizing_rate_rps']:.0f}" in html and "host CPU alone" in html
    assert '<section id="precision"' in html
    # every plan was replayed under the recorded arrivals at 1.5x, and the report shows it
    simulation = json.loads((run / "report" / "simulation.json").read_text())
    plans = json.loads((run / "report" / "plans.json").read_text())
    feasible = [o["name"] for o in [plans["recommended"], *plans["alternatives"]] if o["pipeline"]]
    assert list(simulation["plans"]) == feasible
    assert simulation["requests"] == len(served_ids) and "1.5x" in simulation["arrivals"]
    assert all(sum(r["outcomes"].values()) == r["requests"] for r in simulation["plans"].values())
    assert '<section id="sim-plans"' in html
    # a second run never touches the first
    before = sorted(p.name for p in run.rglob("*"))
    again = demo(tmp_path, "--seconds", "2", "--rate", "4")
    again.communicate(timeout=240)
    assert len(list((tmp_path / "runs").iterdir())) == 2
    assert sorted(p.name for p in run.rglob("*")) == before


def test_ctrl_c_stops_the_server(tmp_path):
    proc = demo(tmp_path, "--seconds", "60", "--rate", "4")
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    server = None
    while time.monotonic() < deadline and server is None:
        for child in parent.children(recursive=True):
            if "loadprobe.samples.vision.serve" in " ".join(child.cmdline()):
                server = child
        time.sleep(0.2)
    assert server is not None, "the demo did not start its server"
    while not list((tmp_path / "runs").rglob("client")) and time.monotonic() < deadline:
        time.sleep(0.2)  # the load has started
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "Aborted" not in err
    # what was sent and kept is said, and kept: the load's summary, then the folder with both recordings
    assert "interrupted: the figures below are the requests that finished before it" in out
    (run,) = (tmp_path / "runs").iterdir()
    assert f"demo: interrupted; everything written so far is kept in {run}" in out
    # the client's run was closed properly (how many requests had finished by then depends on the machine)
    assert list((run / "client").rglob("run.json")) and not list((run / "client").rglob(".spans-*.arrows"))
    assert list((run / "data").rglob("run.json"))
    server.wait(timeout=30) if server.is_running() else None
    assert not server.is_running()


def test_demo_llm_streams_to_the_batching_engine_and_writes_the_llm_section(tmp_path):
    proc = demo(tmp_path, "--llm", "--seconds", "5", "--rate", "1.5")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    (run,) = (tmp_path / "runs").iterdir()
    portrait = json.loads((run / "report" / "portrait.json").read_text())
    llm = portrait["llm"]
    sent = [r for r in spans_in(run / "client") if r["parent_id"] is None]
    served = [r for r in spans_in(run / "data") if r["stage"] == "POST /v1/completions"]
    # the client's view, joined to the engine's own spans of the same requests
    assert llm["source"] == "client" and llm["requests"] == len(sent) > 0
    assert portrait["requests"]["joined_requests"] == len(sent)
    assert {r["request_id"] for r in sent} <= {r["request_id"] for r in served}
    assert llm["tokens_out"]["total"] == sum(r["tokens_out"] for r in served if r["request_id"] in
                                             {s["request_id"] for s in sent})
    assert llm["ttft_ms"]["p50"] > 0 and llm["tpot_ms"]["p50"] > 0 and llm["goodput"]["derived"]
    split = llm["ttft_split_ms"]  # the engine's phases, and what the client waited more, for the same requests
    assert split["paired"] == len(sent) and split["outside_ms"] > 0
    assert sum(split[k] for k in ("queue_ms", "prefill_ms", "rest_ms", "outside_ms")) == pytest.approx(
        llm["ttft_ms"]["mean"], rel=1e-3)
    assert not any(r["stage"] == "GET /metrics" for r in spans_in(run / "data"))  # its scrapes are no traffic
    stages = {s["name"]: s for s in portrait["stages"]}
    assert stages["decode"]["batch"]["max"] >= 1 and stages["prefill"]["queue_ms"] is not None
    # the engine's load: counted from its own spans, its KV cache from its scraped gauges
    engine = llm["engine"]
    assert engine["running"]["source"] == "spans" and 0 < engine["running"]["mean"] <= engine["running"]["peak"] <= 8
    assert engine["kv_cache_pct"]["source"] == "scraped" and 0 <= engine["kv_cache_pct"]["peak"] <= 100
    alone = loadprobe.analyze([run / "data"]).llm.engine.running  # the engine's side alone: the same count
    assert (alone.mean, alone.peak) == (pytest.approx(engine["running"]["mean"]), engine["running"]["peak"])
    assert "LLM: " in out and "goodput: " in out and "engine: ran " in out
    html = (run / "report" / "portrait.html").read_text(encoding="utf-8")
    assert '<section id="llm"' in html and '"llm_goodput"' in html
