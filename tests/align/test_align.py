"""``loadprobe align`` with real models: captures from ONNX Runtime and PyTorch, the figures, the
verdict, and the plan and report that use it.

The two real checks re-quantise the models with the layers align ranks first kept in float and
measure the output error again: it must fall, and by more than keeping the last-ranked layer.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadprobe._errors import LoadprobeError
from loadprobe.align.compare import Thresholds, align, evidence, read_align, write_align
from loadprobe.align.capture import EXACT_MAX_VALUES, load_capture

from ..support.align_models import fake_int8, outlier_net, write_capture

ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from loadprobe.instrumentation import onnxruntime as lp_ort  # noqa: E402
from loadprobe.instrumentation import torch as lp_torch  # noqa: E402


def sqnr_db(baseline: np.ndarray, candidate: np.ndarray) -> float:
    """Output SQNR measured on the full tensors."""
    b, c = np.asarray(baseline, np.float64), np.asarray(candidate, np.float64)
    return float(10 * np.log10((b * b).sum() / ((c - b) ** 2).sum()))


# -- the vision sample: FP32 backbone against ONNX Runtime static INT8 (QDQ) --------------------


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    from loadprobe.samples.vision.model import calibration_batch, ensure_models

    root = tmp_path_factory.mktemp("vision")
    fp32, int8 = ensure_models(root)  # INT8 calibrated on 32 of the sample's images (seed 11)
    images = calibration_batch(16, seed=5)  # other images, for the comparison
    base = lp_ort.capture(fp32, images, out=root / "fp32.npz")
    cand = lp_ort.capture(int8, images, out=root / "int8.npz")
    return {"root": root, "fp32": fp32, "int8": int8, "images": images, "base": base, "cand": cand,
            "calibration": calibration_batch(32)}


def run_backbone(path, images) -> np.ndarray:
    from loadprobe.samples.vision.model import INPUT, open_session

    return open_session(path).run(None, {INPUT: images})[0]


def test_the_qdq_model_is_captured_under_the_fp32_names(vision):
    base, cand = load_capture(vision["base"]), load_capture(vision["cand"])
    assert base.framework == cand.framework == "onnxruntime" and base.samples == cand.samples == 16
    assert base.digest == cand.digest
    assert base.names() == ["conv0", "act0", "conv1", "act1", "conv2", "act2", "conv3", "features"]
    # the quantiser fused each ReLU into its convolution: the pre-ReLU tensors are gone, the rest keep their names
    assert cand.names() == ["act0", "act1", "act2", "features"]
    assert base.layer("act0").inputs == ("conv0",) and base.layer("act0").nodes == ("relu0",)
    assert base.layer("features").output and cand.layer("features").output
    assert cand.layer("act1").nodes == ("conv1",)  # Q/DQ nodes are not layers' nodes
    # 24x80x80 values per image: summarised, 256 projected values and 4 statistics per channel
    layer = base.layer("act0")
    assert not layer.exact and layer.channels == 24
    assert base.data("act0").proj.shape == (16, 256) and base.data("act0").stats.shape == (16, 24, 4)
    assert vision["base"].stat().st_size < 400_000  # 16 images of a 4-layer backbone


def test_align_finds_the_layers_whose_exclusion_recovers_the_most(vision, tmp_path):
    doc = align(vision["base"], vision["cand"], stage="backbone", thresholds=Thresholds(min_sqnr_db=28))
    layers = {x["name"]: x for x in doc["layers"]}
    assert list(layers) == ["act0", "act1", "act2", "features"]
    assert [s["name"] for s in doc["skipped_layers"]] == ["conv0", "conv1", "conv2", "conv3"]
    # the skipped pre-ReLU tensors fold into the layers computed from them
    assert layers["act0"]["nodes"] == ["conv0", "relu0"] and layers["act0"]["inputs"] == []
    assert layers["act1"]["inputs"] == ["act0"] and layers["act1"]["readers"] == ["act2"]
    # growth is the noise-to-signal power each layer adds; the ranking and shares follow it
    for x in doc["layers"]:
        parent = max((layers[p]["rel_l2"] ** 2 for p in x["inputs"]), default=0.0)
        assert x["growth"] == pytest.approx(x["rel_l2"] ** 2 - parent, rel=1e-3, abs=1e-9)
        assert x["sqnr_db"] == pytest.approx(-20 * np.log10(x["rel_l2"]), abs=0.01)
    assert sum(x["error_share"] for x in doc["layers"]) == pytest.approx(1.0, abs=1e-4)
    ranked = sorted((x for x in doc["layers"] if x["rank"]), key=lambda x: x["rank"])
    assert [x["name"] for x in ranked] == doc["ranking"]

    # the summarised output's figures approximate the full tensors' (Johnson-Lindenstrauss)
    fp32_out = run_backbone(vision["fp32"], vision["images"])
    int8_out = run_backbone(vision["int8"], vision["images"])
    before = sqnr_db(fp32_out, int8_out)
    assert doc["output"]["layer"] == "features"
    assert doc["output"]["sqnr_db"] == pytest.approx(before, abs=1.0)

    # measured: re-quantise keeping the top-ranked layer's nodes in float, and the last-ranked one's
    from loadprobe.samples.vision.model import build_int8

    top, last = ranked[0], ranked[-1]
    keep_top = build_int8(vision["fp32"], tmp_path / "keep-top.onnx", vision["calibration"], exclude=top["keep_nodes"])
    keep_last = build_int8(vision["fp32"], tmp_path / "keep-last.onnx", vision["calibration"],
                           exclude=last["keep_nodes"])
    after_top = sqnr_db(fp32_out, run_backbone(keep_top, vision["images"]))
    after_last = sqnr_db(fp32_out, run_backbone(keep_last, vision["images"]))
    assert after_top > before + 1.5, (before, after_top)  # the output error measurably falls ...
    assert after_top > after_last + 1.0, (after_top, after_last)  # ... more than keeping the last-ranked layer
    # and the estimate made without re-quantising was close to what re-quantising measured
    estimate = doc["recovery"][0]
    assert estimate["keep_layers"] == [top["name"]] and estimate["basis"] == "estimate"
    assert estimate["output"]["sqnr_db"] == pytest.approx(after_top, abs=2.0)

    # the verdict: INT8 misses 28 dB, keeping one layer is estimated to reach it
    verdict = doc["verdict"]
    assert verdict["decision"] == "int8-keep-fp16" and verdict["basis"] == "estimate"
    assert verdict["keep_fp16"] == top["keep_nodes"]  # what computes the output, and what reads it
    assert verdict["text"] == f"int8 with {len(top['keep_nodes'])} layers kept in FP16"
    assert verdict["failed"][0]["figure"] == "sqnr_db"

    # aligning the re-quantised model, told what it keeps, measures the recovery and confirms the verdict
    kept = lp_ort.capture(keep_top, vision["images"], out=tmp_path / "keep-top.npz")
    confirmed = align(vision["base"], kept, stage="backbone", thresholds=Thresholds(min_sqnr_db=28),
                      kept=verdict["keep_fp16"])
    assert confirmed["output"]["sqnr_db"] == pytest.approx(after_top, abs=1.0)
    assert confirmed["verdict"]["decision"] == "int8-keep-fp16" and confirmed["verdict"]["basis"] == "measured"
    assert confirmed["verdict"]["keep_fp16"] == verdict["keep_fp16"]
    assert confirmed["verdict"]["text"] == verdict["text"]


def test_with_default_thresholds_the_sample_int8_backbone_passes(vision):
    doc = align(vision["base"], vision["cand"])
    assert doc["stage"] == "backbone-v2-fp32"  # the model's name, unless --stage says otherwise
    assert doc["verdict"]["decision"] == "int8-ok" and doc["verdict"]["keep_fp16"] == []
    assert doc["output"]["cosine"] > 0.99 and doc["output"]["sqnr_db"] > 20
    assert doc["classes"] == [] and doc["task_head"] is False  # a backbone: no classes without labels


def test_labels_group_the_output_error_by_class(vision):
    labels = [i % 3 for i in range(16)]
    doc = align(vision["base"], vision["cand"], labels=labels)
    assert [c["class"] for c in doc["classes"]] == [0, 1, 2]
    assert sum(c["samples"] for c in doc["classes"]) == 16
    assert all("agreement" not in c for c in doc["classes"])  # a feature map has no predicted class
    assert doc["labels"] == {"source": "given", "classes": 3}


def test_onnx_capture_of_a_fixed_batch_two_input_model_is_exact(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["s"], name="add"),
         helper.make_node("MatMul", ["s", "w"], ["m"], name="mm"),
         helper.make_node("Relu", ["m"], ["out"], name="relu")], "two_inputs",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8]) for n in ("x", "y")],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 5])], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "two.onnx"
    onnx.save(model, str(path))
    x, y = np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)  # 5 samples: batches 2, 2, 1+pad
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    capture = load_capture(lp_ort.capture(session, {"x": x, "y": y}, out=tmp_path / "two.npz"))
    assert capture.names() == ["s", "m", "out"] and capture.model == "two.onnx" and capture.samples == 5
    assert capture.layer("m").nodes == ("mm",) and capture.layer("m").inputs == ("s",)
    np.testing.assert_allclose(capture.data("s").values, x + y, rtol=1e-6)
    np.testing.assert_allclose(capture.data("out").values, np.maximum((x + y) @ w, 0), rtol=1e-5, atol=1e-6)
    named = load_capture(lp_ort.capture(path, {"x": x, "y": y}, layers=["mm"], out=tmp_path / "named.npz"))
    assert named.names() == ["m", "out"] and named.selection == ["mm"]  # a node's name stands for its output
    assert named.layer("m").nodes == ("add", "mm")  # what computes it from the inputs
    with pytest.raises(LoadprobeError, match="no layer named 'conv9'"):
        lp_ort.capture(path, {"x": x, "y": y}, layers=["conv9"], out=tmp_path / "x.npz")
    with pytest.raises(LoadprobeError, match="lack the input 'y'"):
        lp_ort.capture(path, {"x": x}, out=tmp_path / "x.npz")


# -- a small torch classifier against plain-torch INT8 -------------------------------------------


@pytest.fixture(scope="module")
def torch_case(tmp_path_factory):
    root = tmp_path_factory.mktemp("torch")
    net = outlier_net()
    g = torch.Generator().manual_seed(0)
    calibration, images = torch.randn(32, 3, 16, 16, generator=g), torch.randn(48, 3, 16, 16, generator=g)
    with torch.no_grad():
        labels = net(images).argmax(1)
    labels[:4] = (labels[:4] + 1) % 6  # a few mistakes, so the baseline's accuracy is not trivially 100%
    base = lp_torch.capture(net, images, out=root / "fp32.npz")
    cand = lp_torch.capture(fake_int8(net, calibration), images, out=root / "int8.npz")
    return {"root": root, "net": net, "calibration": calibration, "images": images, "labels": labels.tolist(),
            "base": base, "cand": cand}


def test_torch_capture_names_modules_and_follows_tensors(torch_case):
    base = load_capture(torch_case["base"])
    assert base.framework == "torch" and base.model == "Sequential" and base.samples == 48
    assert base.names() == [str(i) for i in range(8)]  # every leaf module, in call order
    assert base.layer("7").output and base.layer("7").exact and base.layer("7").shape == (6,)
    assert base.layer("3").inputs == ("2",) and base.layer("0").inputs == ()
    assert base.layer("7").inputs == ("6",)  # through Flatten, a module too
    assert base.layer("0").shape == (16, 16, 16) and 16 ** 3 == EXACT_MAX_VALUES
    assert all(layer.exact for layer in base.layers)  # up to 4,096 values per sample: stored as they are
    assert torch_case["net"].training is False  # left in the mode it was in


def test_torch_capture_keeps_outputs_an_in_place_module_changes_later(tmp_path):
    from torch import nn

    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True), nn.Flatten(), nn.Linear(4 * 6 * 6, 3)).eval()
    images = torch.randn(6, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    capture = load_capture(lp_torch.capture(net, images, out=tmp_path / "inplace.npz", batch_size=4))
    with torch.no_grad():
        conv = net[0](images).flatten(1).numpy()
    assert capture.names() == ["0", "1", "2", "3"] and capture.layer("1").inputs == ("0",)
    np.testing.assert_allclose(capture.data("0").values, conv, rtol=1e-5, atol=1e-6)  # negatives and all
    np.testing.assert_allclose(capture.data("1").values, np.maximum(conv, 0), rtol=1e-5, atol=1e-6)


def test_torch_int8_outlier_layer_is_found_and_keeping_it_recovers(torch_case, tmp_path):
    net, images = torch_case["net"], torch_case["images"]
    doc = align(torch_case["base"], torch_case["cand"], labels=torch_case["labels"], stage="classifier")
    ranked = sorted((x for x in doc["layers"] if x["rank"]), key=lambda x: x["rank"])
    assert ranked[0]["name"] == "4"  # the convolution whose INT8 input range the outlier channel ruins
    assert ranked[0]["error_share"] > 0.5
    assert ranked[0]["keep_nodes"] == ["4", "5"]

    # a classifier with labels: agreement and accuracy per class, overall and per class consistent
    out = doc["output"]
    assert doc["task_head"] is True and out["layer"] == "7"
    assert out["accuracy_drop"] == pytest.approx(out["baseline_accuracy"] - out["candidate_accuracy"], abs=1e-6)
    assert sum(c["samples"] for c in doc["classes"]) == 48
    assert all({"agreement", "baseline_accuracy", "candidate_accuracy", "accuracy_drop"} <= set(c)
               for c in doc["classes"])
    # INT8 changes predictions: agreement cannot be estimated for kept layers, so no INT8 verdict yet
    assert out["agreement"] < 0.98
    assert doc["verdict"]["decision"] == "fp16-only"
    assert "--kept" in doc["verdict"]["why"] and "4" in doc["verdict"]["why"]

    with torch.no_grad():
        reference = net(images).numpy()
        before = sqnr_db(reference, fake_int8(net, torch_case["calibration"])(images).numpy())
        keep = fake_int8(net, torch_case["calibration"], exclude=ranked[0]["keep_nodes"])
        after_top = sqnr_db(reference, keep(images).numpy())
        after_last = sqnr_db(reference, fake_int8(net, torch_case["calibration"],
                                                  exclude=ranked[-1]["keep_nodes"])(images).numpy())
    assert doc["output"]["sqnr_db"] == pytest.approx(before, abs=0.01)  # an exact output: exact figures
    assert after_top > before + 10, (before, after_top)
    assert after_top > after_last + 10, (after_top, after_last)

    kept = lp_torch.capture(keep, images, out=tmp_path / "keep.npz")
    confirmed = align(torch_case["base"], kept, labels=torch_case["labels"], stage="classifier", kept=["4", "5"])
    assert confirmed["output"]["agreement"] == 1.0
    assert confirmed["verdict"]["decision"] == "int8-keep-fp16" and confirmed["verdict"]["basis"] == "measured"
    assert confirmed["verdict"]["keep_fp16"] == ["4", "5"]


def test_a_model_against_itself_has_no_error(torch_case, tmp_path):
    again = lp_torch.capture(torch_case["net"], torch_case["images"], out=tmp_path / "again.npz")
    doc = align(torch_case["base"], again)
    assert all(x["sqnr_db"] == 150 and x["cosine"] == 1 and x["growth"] == 0 for x in doc["layers"])
    assert doc["ranking"] == [] and doc["recovery"] == []
    assert doc["verdict"]["decision"] == "int8-ok"


# -- figures and verdicts from captures with known errors ----------------------------------------


def noisy(x: np.ndarray, nsr: float, seed: int) -> np.ndarray:
    """``x`` plus Gaussian noise of ``nsr`` times its power."""
    noise = np.random.default_rng(seed).standard_normal(x.shape)
    return (x + noise * np.sqrt(nsr * (x ** 2).sum() / (noise ** 2).sum())).astype(np.float32)


@pytest.fixture
def synthetic(tmp_path):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((20, 8, 20, 20)).astype(np.float32)  # 3,200 values: exact
    b = (rng.standard_normal((20, 64, 12, 12)) + 3.0).astype(np.float32)  # 9,216 values: summarised
    out = rng.standard_normal((20, 2, 5)).astype(np.float32)  # not a classifier's scores
    base = write_capture(tmp_path / "base.npz", {"a": a, "b": b, "out": out})

    def candidate(name, nsr_a, nsr_b, nsr_out):
        return write_capture(tmp_path / f"{name}.npz", {"a": noisy(a, nsr_a, 2), "b": noisy(b, nsr_b, 3),
                                                         "out": noisy(out, nsr_out, 4)})

    return base, candidate


def test_summarised_figures_match_the_exact_ones(synthetic):
    base, candidate = synthetic
    doc = align(base, candidate("c", 1e-4, 2e-3, 3e-3))
    layers = {x["name"]: x for x in doc["layers"]}
    assert layers["a"]["exact"] and not layers["b"]["exact"]
    assert layers["a"]["rel_l2"] == pytest.approx(1e-2, rel=1e-3)  # exact
    assert layers["b"]["rel_l2"] == pytest.approx(np.sqrt(2e-3), rel=0.05)  # projected: within a few percent
    assert layers["b"]["cosine"] == pytest.approx(1 / np.sqrt(1 + 2e-3), abs=1e-4)
    assert 0 < layers["b"]["max_abs_error"]  # a lower bound from the statistics
    assert layers["b"]["growth"] == pytest.approx(2e-3 - 1e-4, rel=0.1)


@pytest.mark.parametrize("nsr, decision, text, keep", [
    ((1e-5, 2e-5, 3e-5), "int8-ok", "int8-ok", []),
    # b adds almost all the noise: keeping it (and its reader, out) is estimated to be enough
    ((1e-5, 5e-3, 5.5e-3), "int8-keep-fp16", "int8 with 2 layers kept in FP16", ["b_node", "out_node"]),
    # every layer adds as much: keeping two of three cannot reach 25 dB
    ((5e-3, 1e-2, 1.5e-2), "fp16-only", "fp16-only", []),
])
def test_verdicts(synthetic, nsr, decision, text, keep):
    base, candidate = synthetic
    doc = align(base, candidate("c", *nsr), thresholds=Thresholds(min_sqnr_db=25))
    assert doc["verdict"]["decision"] == decision and doc["verdict"]["text"] == text
    assert doc["verdict"]["keep_fp16"] == keep
    assert doc["verdict"]["precision"] == ("fp16" if decision == "fp16-only" else "int8")


def test_align_json_round_trip_and_evidence(synthetic, tmp_path):
    base, candidate = synthetic
    doc = align(base, candidate("c", 1e-5, 5e-3, 5.5e-3), stage="backbone", thresholds=Thresholds(min_sqnr_db=25))
    path = write_align(doc, tmp_path / "align.json")
    json.loads(path.read_text())  # plain JSON, no NaN
    assert read_align(path) == doc
    with pytest.raises(LoadprobeError, match="exists"):
        write_align(doc, path)
    ev = evidence(read_align(path), str(path))
    assert ev.stage == "backbone" and ev.policy == "int8-ok" and ev.keep_fp16 == ("b_node", "out_node")
    assert [x["name"] for x in ev.layers] == ["a", "b", "out"]


# -- into the plan and the report ------------------------------------------------------------


@pytest.fixture(scope="module")
def portrait(tmp_path_factory):
    from ..plan.test_recommend import VISION, record

    return record(tmp_path_factory.mktemp("scenario"), VISION, requests=40)


@pytest.fixture
def align_files(tmp_path):
    """align.json files for the stage 'backbone': one per verdict."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((20, 64)).astype(np.float32), rng.standard_normal((20, 32)).astype(np.float32)
    out = rng.standard_normal((20, 2, 8)).astype(np.float32)
    base = write_capture(tmp_path / "base.npz", {"a": a, "b": b, "out": out})
    files = {}
    for name, nsr in {"ok": (1e-6, 2e-6, 3e-6), "keep": (1e-6, 5e-3, 5.1e-3), "fp16": (5e-2, 1e-1, 1.5e-1)}.items():
        cand = write_capture(tmp_path / f"{name}.npz", {"a": noisy(a, nsr[0], 1), "b": noisy(b, nsr[1], 2),
                                                         "out": noisy(out, nsr[2], 3)})
        doc = align(base, cand, stage="backbone", thresholds=Thresholds(min_sqnr_db=25))
        files[name] = write_align(doc, tmp_path / f"align-{name}.json")
    return files


def plan_with(portrait, *aligns, **kwargs):
    from loadprobe.plan.constraints import Constraints
    from loadprobe.plan.planner import recommend

    from ..plan.test_recommend import PRICES

    constraints = Constraints.parse(engines="cpu,gpu:nvidia-l4,npu:ascend-310px2", slo_p95_ms=50, min_rps=300,
                                    prices=PRICES, align=aligns, **kwargs)
    return recommend(portrait, constraints, cpu_cores=4)


def test_recommend_takes_the_precision_and_kept_layers_from_align(portrait, align_files, tmp_path):
    from loadprobe.pipeline.files import dump, loads
    from loadprobe.plan.files import plan_dict
    from loadprobe.reports.html import render_report

    plan = plan_with(portrait, align_files["keep"])
    backbone = next(d for d in plan.recommended.decisions if d.stage == "backbone")
    assert backbone.precision == "int8" and backbone.keep_fp16 == ("b_node", "out_node")
    assert "loadprobe align" in backbone.why["precision"]
    assert "int8 with 2 layers kept in FP16" in backbone.why["precision"]
    config = loads(dump(plan.to_pipeline()))  # valid pipeline.yaml, keep_fp16 included
    stage = next(s for s in config.stages if s.name == "backbone")
    assert stage.precision == "int8" and stage.keep_fp16 == ("b_node", "out_node")
    assert all(not s.keep_fp16 for s in config.stages if s.name != "backbone")

    # the plan carries the evidence, and the report draws it
    plans = json.loads(json.dumps(plan_dict(plan)))
    assert plans["constraints"]["align"]["backbone"]["decision"] == "int8-keep-fp16"
    html = render_report(portrait, plans=plans, pipeline_yaml=dump(plan.to_pipeline()))
    assert '<section id="precision"' in html and 'data-figure="align_0"' in html
    assert "keep_fp16:" in html


def test_an_fp16_only_verdict_keeps_the_stage_off_int8(portrait, align_files):
    plan = plan_with(portrait, align_files["fp16"])
    placed = [d for o in [plan.recommended, *plan.alternatives] for d in o.decisions if d.stage == "backbone"]
    assert placed and all(d.precision != "int8" and d.keep_fp16 == () for d in placed)
    accelerated = [d for d in placed if d.kind != "cpu"]
    assert accelerated and all("loadprobe align" in d.why["precision"] and "fp16-only" in d.why["precision"]
                               for d in accelerated)
    ok = plan_with(portrait, align_files["ok"])
    assert next(d for d in ok.recommended.decisions if d.stage == "backbone").precision == "int8"


def test_align_for_an_unknown_stage_or_twice_is_an_error(portrait, align_files, tmp_path):
    doc = read_align(align_files["ok"])
    doc["stage"] = "detector"
    other = write_align(doc, tmp_path / "detector.json")
    with pytest.raises(LoadprobeError, match="'detector' is not a stage of the portrait.*backbone"):
        plan_with(portrait, other)
    with pytest.raises(LoadprobeError, match="one align.json per stage"):
        plan_with(portrait, align_files["ok"], align_files["keep"])
    with pytest.raises(LoadprobeError, match="give one of them"):
        plan_with(portrait, align_files["ok"], precision=["backbone=int8-ok"])


def test_the_report_draws_the_per_layer_chart_in_a_browser(portrait, align_files, tmp_path):
    from loadprobe.align.compare import load_evidence
    from loadprobe.reports.html import render_report, write_html

    from ..support import report_browser as browser

    if browser.skip_reason():
        pytest.skip(browser.skip_reason())
    path = tmp_path / "portrait.html"
    write_html(path, render_report(portrait, align=[load_evidence(align_files["keep"])]))
    with browser.launch(tmp_path / "profile") as context:
        visit = browser.open_report(context, path)
        assert visit.errors == [] and visit.requests == [visit.url]
        charts = {c["id"]: c for c in visit.page.evaluate(browser.DRAWN)}
        chart = charts["align_0"]
        assert chart["traces"] == 3 and chart["points"] > 0 and chart["drawn"] > 0 and chart["label"]
        assert visit.page.locator("section#precision table").count() == 1
