"""vLLM's own spans, received live: its CPU build (started once per session) sends one ``llm_request``
span per request to ``loadprobe record --otlp`` (passed through a tap that keeps what vLLM sent,
read by the OpenTelemetry protobuf classes), its /metrics scraped meanwhile. Each request's TTFT
and end-to-end time must read back as vLLM's gen_ai.latency attributes said, and the portrait's
mean TTFT (the prefill stage's mean start in its request plus its mean time) must agree with vLLM's
own TTFT histogram over the same requests."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

import loadprobe
from loadprobe.record.scrape import parse

pytestmark = pytest.mark.timeout(600)

REQUESTS = 24


def _histogram(page: str, family: str) -> tuple[float, float]:
    samples = parse(page)[family].samples
    return (sum(v for name, _, v in samples if name == family + "_sum"),
            sum(v for name, _, v in samples if name == family + "_count"))


@contextmanager
def _recorded(engine, folder, requests: int):
    """``loadprobe record --otlp --scrape`` receiving the engine's spans (through its tap) and reading its
    metrics into ``folder`` while the block runs, until ``requests`` request spans have arrived."""
    tap = engine.tap
    record = subprocess.Popen([sys.executable, "-m", "loadprobe", "record", "--otlp", "127.0.0.1:0", "--service",
                               "vllm", "--scrape", engine.url + "/metrics", "--every", "0.5", "--no-devices",
                               "-o", str(folder)], stderr=subprocess.PIPE, text=True)
    try:
        line = record.stderr.readline()
        tap.clear()
        tap.forward_to = line.split(" at ", 1)[1].split(" -> ")[0]
        yield tap
        deadline = time.monotonic() + 60
        while len(tap.spans("llm_request")) < requests and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.5)  # a scrape or two after the last request
        record.send_signal(signal.SIGTERM)
        _, err = record.communicate(timeout=60)
    finally:
        tap.forward_to = None
        if record.poll() is None:
            record.kill()
    assert record.returncode == 0, err


def test_vllm_spans_received_live_give_its_ttft_and_e2e(vllm_engine, tmp_path):
    with _recorded(vllm_engine, tmp_path / "data", REQUESTS) as tap:
        before = _histogram(vllm_engine.metrics(), "vllm:time_to_first_token_seconds")
        prompts = [("the quick brown fox " * (1 + i % 5), 8 + 4 * (i % 4)) for i in range(REQUESTS)]
        with ThreadPoolExecutor(3) as pool:  # a few at once: the engine batches them
            answers = list(pool.map(lambda p: vllm_engine.complete(p[0], max_tokens=p[1]), prompts))
        after = _histogram(vllm_engine.metrics(), "vllm:time_to_first_token_seconds")
    sent = tap.spans("llm_request")
    assert len(sent) == REQUESTS and set(tap.answers) == {200}
    assert after[1] - before[1] == REQUESTS

    spans = loadprobe.read_spans([str(tmp_path / "data")])
    requests = spans[spans["parent_id"].isna() & (spans["stage"] == "llm_request")].set_index("span_id")
    prefill = spans[spans["stage"] == "prefill"].set_index("parent_id")
    assert len(requests) == REQUESTS
    ttfts = []
    for span in sent:
        span_id = int.from_bytes(span["span_id"], "big") & ((1 << 63) - 1)
        request = requests.loc[span_id]
        first_token_ns = prefill.loc[span_id, "ts_ns"] + prefill.loc[span_id, "dur_ns"] - request["ts_ns"]
        attributes = span["attributes"]
        assert abs(first_token_ns - attributes["gen_ai.latency.time_to_first_token"] * 1e9) <= 1
        assert abs(request["dur_ns"] - attributes["gen_ai.latency.e2e"] * 1e9) <= 1
        assert request["tokens_out"] == attributes["gen_ai.usage.completion_tokens"]
        ttfts.append(first_token_ns / 1e9)
    assert sorted(requests["tokens_out"]) == sorted(a["usage"]["completion_tokens"] for a in answers)

    histogram_mean = (after[0] - before[0]) / (after[1] - before[1])
    assert sum(ttfts) / len(ttfts) == pytest.approx(histogram_mean, rel=0.02)
    portrait = loadprobe.analyze([str(tmp_path / "data")])
    assert portrait.requests.count == REQUESTS
    stages = {stage.name: stage for stage in portrait.stages}
    assert {"queue", "prefill", "decode"} <= set(stages) and stages["decode"].share > 0
    # The portrait's own mean TTFT: where prefill starts in its request, plus its mean time (it ends at the first token)
    portrait_ttft_s = (stages["prefill"].start_offset_ms + stages["prefill"].latency_ms.mean) / 1e3
    assert portrait_ttft_s == pytest.approx(histogram_mean, rel=0.02)
    # ... and its llm section, from the engine's side: TTFT as vLLM measured it, the tokens it counted
    assert (portrait.llm.source, portrait.llm.requests) == ("service", REQUESTS)
    assert portrait.llm.ttft_ms.mean / 1e3 == pytest.approx(histogram_mean, rel=1e-6)
    assert portrait.llm.tokens_out.total == sum(a["usage"]["completion_tokens"] for a in answers)
    scraped = {m.metric.split("{")[0] for m in portrait.devices.metrics if m.device.startswith("scrape:")}
    assert {"vllm:num_requests_running", "vllm:kv_cache_usage_perc"} <= scraped

    # the engine's load, counted from its spans (3 at a time at most); its KV cache from the scraped gauge
    engine = portrait.llm.engine
    assert engine.running.source == "spans" and 0 < engine.running.mean <= engine.running.peak <= 3
    assert engine.kv_cache_pct.source == "scraped" and 0 <= engine.kv_cache_pct.mean <= engine.kv_cache_pct.peak <= 100


def test_the_load_client_pairs_with_vllm_s_spans_by_the_trace_it_sent(vllm_engine, tmp_path):
    """vLLM records no request header, but continues the trace of the client's ``traceparent``: analysed
    together, each request counts once and the client's TTFT splits into vLLM's phases and the rest."""
    from loadprobe.load import client, openai, schedules

    n = 12
    workload = openai.prepare(vllm_engine.url, openai.lengths("--prompt-tokens", "32:64", n, seed=2),
                              openai.lengths("--output-tokens", "16", n), timeout=120)
    with _recorded(vllm_engine, tmp_path / "server", n):
        report = client.run(workload.url, schedules.constant(4, requests=n), openai=workload,
                            record=str(tmp_path / "client"), timeout=120)
    assert report.succeeded == n
    portrait = loadprobe.analyze([tmp_path / "client", tmp_path / "server"])
    assert portrait.requests.count == n and portrait.requests.joined_requests == n  # once each, not twice
    llm, split = portrait.llm, portrait.llm.ttft_split_ms
    assert (llm.source, llm.requests, split.paired) == ("client", n, n)
    assert split.outside_ms > 0  # vLLM's TTFT starts when its front end took the request; the client's before
    assert split.queue_ms + split.prefill_ms + split.rest_ms + split.outside_ms == pytest.approx(llm.ttft_ms.mean,
                                                                                                rel=1e-6)
