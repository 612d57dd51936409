"""samples/vision: real ONNX Runtime models, a real uvicorn server, real recordings."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("onnxruntime")

import loadprobe  # noqa: E402
from loadprobe.samples.vision.batcher import DynamicBatcher  # noqa: E402
from loadprobe.samples.vision.images import inspection_jpegs  # noqa: E402
from loadprobe.samples.vision.model import INPUT, ensure_models, open_session  # noqa: E402
from loadprobe.samples.vision.pipeline import decode, detect, preprocess  # noqa: E402
from loadprobe.samples.vision.serve import create_app  # noqa: E402

from ..conftest import by_stage, stopped_spans  # noqa: E402
from ..support.http_servers import fetch, serve_asgi  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return ensure_models(tmp_path_factory.mktemp("models"))


def test_int8_backbone_tracks_fp32_and_heads_vary_with_the_image(models):
    fp32, int8 = (open_session(p) for p in models)
    prepared = [preprocess(decode(j)) for j in inspection_jpegs(12, seed=4)]
    x = np.stack([p[0] for p in prepared])
    a, b = fp32.run(None, {INPUT: x})[0], int8.run(None, {INPUT: x})[0]
    assert a.shape == b.shape == (12, 64, 20, 20)
    cosine = float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))
    assert 0.9 < cosine < 1.0  # close, not identical: it really is quantised
    counts = {len(detect(a[i], prepared[i][1])) for i in range(12)}
    assert len(counts) > 3  # output sizes change from image to image


def test_batcher_fills_to_max_batch_or_closes_the_window():
    sizes = []

    def run(batch):
        sizes.append(len(batch))
        return batch * 2

    async def scenario():
        batcher = DynamicBatcher(run, max_batch=4, window_ms=50)
        batcher.start()
        burst = await asyncio.gather(*(batcher.submit(np.full(2, i)) for i in range(6)))
        alone = await batcher.submit(np.full(2, 9))
        await batcher.stop()
        return burst, alone

    burst, alone = asyncio.run(scenario())
    assert sizes == [4, 2, 1]
    assert [int(d.output[0]) for d in burst] == [0, 2, 4, 6, 8, 10]  # each gets its own row back
    assert [d.first for d in burst] == [True, False, False, False, True, False]
    assert alone.size == 1 and alone.start_ns >= alone.enqueued_ns


def test_served_requests_record_every_stage_and_batch_once(recorder, models, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    jpegs = inspection_jpegs(60, seed=8)
    app = create_app(max_batch=8, window_ms=20, model_dir=models[0].parent)
    with serve_asgi(app) as base:
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(
                lambda i: fetch(base, "/inspect", method="POST", body=jpegs[i], headers={"x-request-id": f"v{i}"}),
                range(len(jpegs))))
    assert all(status == 200 for status, _ in answers)
    counts = [json.loads(body)["count"] for _, body in answers]
    rows = stopped_spans(recorder)
    stages = by_stage(rows)
    roots = stages["POST /inspect"]
    assert Counter(r["request_id"] for r in roots) == Counter(f"v{i}" for i in range(60))
    for name in ("decode", "preprocess", "backbone", "head", "nms"):
        assert len(stages[name]) == 60, name
    root_of = {r["span_id"]: r["request_id"] for r in roots}
    backbone = stages["backbone"]
    assert all(root_of[b["parent_id"]] == b["request_id"] for b in backbone)
    assert max(b["batch"] for b in backbone) > 1  # concurrent requests were batched
    # members of one execution share its exact duration (their epoch starts may differ by the
    # flusher's clock mapping when they are written in different flushes)
    executions = {(b["dur_ns"], b["batch"]) for b in backbone}
    with_flops = [b for b in backbone if b["flops"] is not None]
    assert len(with_flops) == len(executions)  # the batch's FLOPs are counted once per execution
    assert all(b["queue_ns"] >= 0 for b in backbone)
    assert {b["shape"] for b in backbone} == {"3x160x160"}  # fixed per-sample shape
    assert sum(counts) > 0

    portrait = loadprobe.analyze([recorder.run_dir])
    by_name = {s.name: s for s in portrait.stages}
    assert by_name["nms"].shapes.dynamic_shape
    assert not by_name["backbone"].shapes.dynamic_shape
    assert by_name["backbone"].intensity.flops_per_byte > 1


def test_a_failing_batch_fails_its_requests_and_the_batcher_goes_on():
    calls = []

    def run(batch):
        calls.append(len(batch))
        if len(calls) == 1:
            raise RuntimeError("device lost")
        return batch

    async def scenario():
        batcher = DynamicBatcher(run, max_batch=2, window_ms=20)
        batcher.start()
        first = await asyncio.gather(batcher.submit(np.zeros(2)), batcher.submit(np.zeros(2)),
                                     return_exceptions=True)
        mismatched = await asyncio.gather(batcher.submit(np.zeros(2)), batcher.submit(np.zeros(3)),
                                          return_exceptions=True)  # np.stack fails: shapes differ
        after = await batcher.submit(np.ones(2))
        await batcher.stop()
        return first, mismatched, after

    first, mismatched, after = asyncio.run(scenario())
    assert all(isinstance(r, RuntimeError) for r in first)
    assert all(isinstance(r, ValueError) for r in mismatched)
    assert after.output.tolist() == [1.0, 1.0]


def test_the_routed_service_runs_each_stage_on_its_engine(recorder, models):
    from concurrent.futures import ThreadPoolExecutor

    from loadprobe.samples.vision.routed import create_app as routed_app

    jpegs = inspection_jpegs(24, seed=9)
    with serve_asgi(routed_app(model_dir=models[0].parent)) as base:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda j: fetch(base, "/inspect", method="POST", body=j), jpegs))
        strict = fetch(base, "/inspect", method="POST", body=jpegs[0], headers={"x-precision": "fp16"})
        metrics = json.loads(fetch(base, "/metrics")[1])
    assert [status for status, _ in answers] == [200] * 24 and strict[0] == 200
    rows = stopped_spans(recorder)
    stages = by_stage(rows)
    engines = {name: {r["engine"] for r in stages[name]} for name in ("decode", "preprocess", "postprocess")}
    assert engines == {"decode": {"cpu"}, "preprocess": {"cpu"}, "postprocess": {"gpu0"}}
    assert {r["engine"] for r in stages["backbone"]} <= {"npu0", "gpu0"} and len(stages["backbone"]) == 25
    assert len(stages["nms"]) == 25  # the head and NMS probes nest inside the routed postprocess stage
    backbone = metrics["stages"]["backbone"]
    assert backbone["routed_by_shape_or_precision"] == 1  # the fp16-only request skipped the INT8 model
    assert backbone["failover_share"] <= 0.3
