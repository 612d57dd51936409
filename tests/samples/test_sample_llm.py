"""The LLM sample: KV-cache numerics, the cost model, its recorded stages, its HTTP app."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import numpy as np
import pytest
from starlette.exceptions import StarletteDeprecationWarning

import loadprobe
from loadprobe.schema import FIRST_TOKEN, TOKEN

from ..conftest import REPO, by_stage, stopped_spans

try:
    from loadprobe.samples.llm import engine, model, serve
except ModuleNotFoundError as exc:  # an editable install made before samples/ joined the package
    if not (exc.name or "").startswith("loadprobe.samples"):
        raise
    from samples.llm import engine, model, serve

TINY = model.Config(n_layers=2, d_model=8, n_heads=2, d_ff=16, vocab=12, max_context=16, seed=3)


def reference_logits(m: model.Model, tokens) -> np.ndarray:
    """Logits at every position, written out plainly: no cache, one head at a time."""
    c = m.config
    n = len(tokens)

    def norm(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g

    x = m.embed[tokens] + m.pos[:n]
    causal = np.tril(np.ones((n, n), bool))
    for layer in m.layers:
        q, k, v = np.split(norm(x, layer["norm1"]) @ layer["wqkv"], 3, axis=1)
        heads = []
        for h in range(c.n_heads):
            cols = slice(h * c.d_head, (h + 1) * c.d_head)
            s = np.where(causal, q[:, cols] @ k[:, cols].T / math.sqrt(c.d_head), -np.inf)
            p = np.exp(s - s.max(1, keepdims=True))
            heads.append((p / p.sum(1, keepdims=True)) @ v[:, cols])
        x = x + np.concatenate(heads, axis=1) @ layer["wo"]
        u = norm(x, layer["norm2"]) @ layer["w1"]
        gelu = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
        x = x + gelu @ layer["w2"]
    return norm(x, m.norm_f) @ m.w_out


@pytest.mark.parametrize("config", [TINY, model.CONFIG], ids=["tiny", "default"])
def test_decoding_with_the_cache_matches_recomputing_without_it(config):
    n = min(40, config.max_context)
    tokens = np.random.default_rng(1).integers(0, 256 if config.vocab > 256 else config.vocab, n).tolist()
    expected = reference_logits(model.get_model(config), tokens)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(model.forward(tokens, config), expected, rtol=1e-4, atol=1e-5 * scale)

    split = n // 3
    logits, cache = model.prefill(tokens[:split], config)
    np.testing.assert_allclose(logits, expected[split - 1], rtol=1e-4, atol=1e-5 * scale)
    for i in range(split, n):
        logits = model.decode_step(tokens[i], cache, config)
        np.testing.assert_allclose(logits, expected[i], rtol=1e-4, atol=1e-5 * scale)
    assert cache.length == n


def test_the_context_limit_is_enforced():
    _, cache = model.prefill([i % TINY.vocab for i in range(TINY.max_context)], TINY)
    with pytest.raises(ValueError, match="max_context"):
        model.decode_step(0, cache, TINY)
    assert engine.fit_prompt(list(range(1000)), 64) == list(range(1000 - 448, 1000))


def test_cost_model_matches_the_work_the_code_does(monkeypatch):
    """Every matrix product counted as it runs: 2 FLOPs per multiply-add, operands read, result written."""
    counted = {"flops": 0, "bytes": 0}

    def counting_matmul(a, b):
        out = np.matmul(a, b)
        counted["flops"] += 2 * out.size * a.shape[-1]
        counted["bytes"] += a.nbytes + b.nbytes + out.nbytes
        return out

    monkeypatch.setattr(model, "matmul", counting_matmul)
    c = TINY

    def outside_products(n):
        # Read/written by no product: norm gains, embedding and position rows, new K/V into the cache.
        return 4 * (c.n_layers * (2 * c.d_model + 2 * n * c.d_model) + c.d_model + 2 * n * c.d_model)

    _, cache = model.prefill(list(range(5)), c)
    assert model.prefill_cost(5, c) == (counted["flops"], counted["bytes"] + outside_products(5))
    for _ in range(3):
        counted.update(flops=0, bytes=0)
        model.decode_step(1, cache, c)
        assert model.decode_cost(cache.length, c) == (counted["flops"], counted["bytes"] + outside_products(1))


def test_prefill_is_far_more_compute_intense_than_decode():
    weights = sum(a.nbytes for a in model.get_model().parameters())
    flops, nbytes = model.decode_cost(200)
    assert weights * 0.9 < nbytes < weights * 1.5  # decode reads about every weight once...
    assert 0.3 < flops / nbytes < 1.0  # ...for about 2 FLOPs per 4-byte weight
    p_flops, p_bytes = model.prefill_cost(128)
    assert p_flops > 100 * flops
    assert p_flops / p_bytes > 20 * flops / nbytes


def test_generate_records_prefill_and_decode_with_their_costs(recorder):
    prompts = ["Hello", "The quick brown fox", "numpy " * 20]
    new_tokens = 6
    sizes = {}
    for i, text in enumerate(prompts):
        with loadprobe.request(id=f"r{i}"):
            prompt = engine.tokenize(text)
            new = engine.generate(prompt, new_tokens)
            assert len(new) == new_tokens
            engine.detokenize(new)
        sizes[f"r{i}"] = len(prompt)
    rows = stopped_spans(recorder)
    roots = {r["request_id"]: r["span_id"] for r in by_stage(rows)["request"]}
    assert set(roots) == set(sizes)
    for rid, n_prompt in sizes.items():
        mine = by_stage([r for r in rows if r["request_id"] == rid])
        assert {s: len(v) for s, v in mine.items()} == {
            "request": 1, "tokenize": 1, "prefill": 1, "decode": new_tokens - 1, "detokenize": 1,
        }
        assert all(r["parent_id"] == roots[rid] for s, v in mine.items() if s != "request" for r in v)
        (pre,) = mine["prefill"]
        assert (pre["batch"], pre["shape"], pre["engine"]) == (1, str(n_prompt), "cpu")
        assert (pre["flops"], pre["bytes"]) == model.prefill_cost(n_prompt)
        steps = sorted(mine["decode"], key=lambda r: r["ts_ns"])
        assert [(r["flops"], r["bytes"]) for r in steps] == [
            model.decode_cost(n_prompt + k) for k in range(1, new_tokens)
        ]
        assert {(r["batch"], r["shape"], r["engine"], r["status"]) for r in steps} == {(1, "1", "cpu", "ok")}


def _client(app):
    with warnings.catch_warnings():  # starlette warns at import when it finds httpx, not httpx2
        warnings.simplefilter("ignore", StarletteDeprecationWarning)
        from starlette.testclient import TestClient
    return TestClient(app)


def test_http_app_answers_and_its_stages_nest_under_the_http_request(recorder):
    with _client(serve.create_app(max_running=2)) as client:
        answer = client.post("/generate", json={"prompt": "Hello, loadprobe", "max_new_tokens": 8})
        long = client.post("/generate", json={"prompt": "x" * 5000, "max_new_tokens": 64})
        too_many = client.post("/generate", json={"prompt": "hi", "max_new_tokens": engine.MAX_NEW_TOKENS + 1})
    assert answer.status_code == 200
    body = answer.json()
    assert set(body) == {"text", "tokens", "prompt_tokens"}
    assert isinstance(body["text"], str)
    assert (body["tokens"], body["prompt_tokens"]) == (8, len("Hello, loadprobe") + 1)
    assert long.status_code == 200
    assert long.json()["prompt_tokens"] == model.CONFIG.max_context - 64  # truncated to fit the context
    assert too_many.status_code == 422

    rows = stopped_spans(recorder)
    http = {r["request_id"]: r for r in rows if r["stage"] == "POST /generate"}
    assert len(http) == 3
    by_id = {r["span_id"]: r for r in rows}
    first, second = sorted(http, key=lambda i: http[i]["ts_ns"])[:2]
    for rid, tokens in ((first, 8), (second, 64)):
        spans = [r for r in rows if r["request_id"] == rid and r["stage"] != "POST /generate"]
        assert all(by_id[r["parent_id"]]["stage"] == "POST /generate" for r in spans)
        stages = sorted(r["stage"] for r in spans)
        assert stages.count("decode") == stages.count(TOKEN) == tokens - 1
        assert {"tokenize", "prefill", "detokenize", FIRST_TOKEN} <= set(stages)
        assert (http[rid]["tokens_out"], http[rid]["status"]) == (tokens, "ok")
    assert all(r["queue_ns"] is not None and r["queue_ns"] >= 0 for r in rows if r["stage"] == "prefill")


def test_batched_decode_gives_each_sequence_what_it_would_get_alone():
    prompts = [[256, 72, 105], [256] + list(range(40, 60)), [256, 7]]
    alone, batched = [], []
    for prompt in prompts:
        logits, cache = model.prefill(prompt)
        alone.append((model.decode_step(model.greedy(logits), cache), cache))
    caches = [model.prefill(p)[1] for p in prompts]
    firsts = [model.greedy(model.prefill(p)[0]) for p in prompts]
    batch = model.decode_batch(firsts, caches)
    for i, (logits, cache) in enumerate(alone):
        np.testing.assert_allclose(batch[i], logits, rtol=1e-4, atol=1e-4 * np.abs(logits).max())
        assert caches[i].length == cache.length == len(prompts[i]) + 1
    flops, nbytes = model.decode_batch_cost([c.length for c in caches])
    single = [model.decode_cost(c.length) for c in caches]
    assert flops == sum(f for f, _ in single)  # the same arithmetic ...
    assert nbytes < sum(b for _, b in single) / 2  # ... for the weights' bytes read once, not three times


def test_the_engine_batches_within_its_slots_and_kv_budget_first_come_first_served():
    from loadprobe.samples.llm.batching import Engine

    events: dict = {}
    done = []
    engine = Engine(max_running=2, kv_tokens=40).start()
    try:
        def on(name):
            def record(event):
                events.setdefault(name, []).append(event)
                if event[0] == "done":
                    done.append(name)
            return record

        for name, prompt_len, max_tokens in (("a", 10, 8), ("b", 10, 8), ("c", 20, 4), ("d", 4, 2)):
            engine.submit([256] * prompt_len, max_tokens, on(name))
        import time

        deadline = time.monotonic() + 30
        while len(done) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(ValueError, match="exceeds the 40 tokens one sequence may hold"):
            engine.submit([256] * 38, 4, on("too big"))
    finally:
        engine.stop()
    assert sorted(done) == ["a", "b", "c", "d"]
    for name, max_tokens in (("a", 8), ("b", 8), ("c", 4), ("d", 2)):
        kinds = [e[0] for e in events[name]]
        assert kinds == ["prefill"] + ["decode"] * (max_tokens - 1) + ["done"]
    # a and b (18 tokens each) fill the 40-token budget: c (24) waits for both, and d, behind it, waits too
    first_c = events["c"][0][1]
    assert first_c >= max(events[n][-2][2] for n in "ab")
    assert events["d"][0][1] >= first_c
    assert max(e[3] for n in "ab" for e in events[n] if e[0] == "decode") == 2  # decoded together
    assert events["c"][0][3] > events["a"][0][3]  # its prefill's recorded wait: queued behind a and b


def test_openai_endpoints_stream_usage_and_record_the_output_s_timing(recorder):
    with _client(serve.create_app(max_running=4)) as client:
        with client.stream("POST", "/v1/completions", json={"model": serve.MODEL_NAME, "prompt": "Hello there",
                                                             "max_tokens": 6, "stream": True,
                                                             "stream_options": {"include_usage": True}}) as answer:
            lines = [line for line in answer.iter_lines() if line.startswith("data: ")]
        chat = client.post("/v1/chat/completions", json={"model": serve.MODEL_NAME, "max_tokens": 3,
                                                         "messages": [{"role": "user", "content": "hi"}]})
        wrong = client.post("/v1/completions", json={"model": "gpt-9", "prompt": "x", "max_tokens": 2})
        models = client.get("/v1/models").json()
        metrics = client.get("/metrics").text
    events = [line[6:] for line in lines]
    assert events[-1] == "[DONE]"
    import json

    chunks = [json.loads(e) for e in events[:-1]]
    assert sum(1 for c in chunks if c["choices"]) == 6 and chunks[-1]["usage"]["completion_tokens"] == 6
    assert chunks[-1]["usage"]["prompt_tokens"] == len("Hello there") + 1
    assert chat.json()["usage"] == {"prompt_tokens": len(serve.chat_prompt([{"role": "user", "content": "hi"}])) + 1,
                                    "completion_tokens": 3, "total_tokens": chat.json()["usage"]["total_tokens"]}
    assert wrong.status_code == 404 and "does not exist" in wrong.json()["error"]["message"]
    assert models["data"][0]["id"] == serve.MODEL_NAME
    assert "loadprobe_llm:num_requests_running" in metrics and "loadprobe_llm:kv_cache_usage_perc" in metrics

    rows = stopped_spans(recorder)
    root = next(r for r in rows if r["stage"] == "POST /v1/completions")
    under = sorted((r for r in rows if r["parent_id"] == root["span_id"]), key=lambda r: (r["ts_ns"], r["stage"]))
    assert (root["tokens_in"], root["tokens_out"]) == (len("Hello there") + 1, 6)
    marks = [r for r in under if r["stage"] in (FIRST_TOKEN, TOKEN)]
    assert [m["stage"] for m in marks] == [FIRST_TOKEN] + [TOKEN] * 5
    # Epoch times are the monotonic clock plus an offset read at each flush: spans of one request written by
    # two flushes may differ by the clock's drift between them (nanoseconds), never by more than a millisecond.
    assert abs(marks[0]["ts_ns"] - root["ts_ns"]) < 1e6  # from the request's start ...
    prefill = next(r for r in under if r["stage"] == "prefill")
    assert abs(marks[0]["ts_ns"] + marks[0]["dur_ns"] - prefill["ts_ns"] - prefill["dur_ns"]) < 1e6  # ... to its end
    assert marks[0]["dur_ns"] - (prefill["ts_ns"] + prefill["dur_ns"] - root["ts_ns"]) < 1e6
    assert all(abs(a["ts_ns"] + a["dur_ns"] - b["ts_ns"]) < 1e6 for a, b in zip(marks[1:], marks[2:]))  # gaps tile


def test_serve_runs_as_a_script(tmp_path):
    script = REPO / "samples" / "llm" / "serve.py"
    done = subprocess.run([sys.executable, str(script), "--help"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--max-running" in done.stdout and "--kv-tokens" in done.stdout and "--port" in done.stdout
