"""``loadprobe align`` on the command line: the tables and the file, and one-line errors for bad input."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from click.testing import CliRunner

from loadprobe.cli import main

from ..support.align_models import outlier_net, write_capture

torch = pytest.importorskip("torch")

from loadprobe.instrumentation import torch as lp_torch  # noqa: E402


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("loadprobe: error: "), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    root = tmp_path_factory.mktemp("captures")
    net = outlier_net()
    images = torch.randn(12, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    half = copy.deepcopy(net).half().float()  # weights rounded to FP16: a near-identical candidate
    return {"root": root, "net": net, "images": images,
            "base": lp_torch.capture(net, images, out=root / "fp32.npz"),
            "cand": lp_torch.capture(half, images, out=root / "fp16w.npz")}


def test_align_prints_the_tables_and_writes_align_json(captures, tmp_path):
    out = tmp_path / "align.json"
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(str(i % 2) for i in range(12)) + "\n")
    result = invoke("align", captures["base"], captures["cand"], "--labels", labels, "--stage", "classifier",
                    "-o", out)
    assert result.exit_code == 0, result.output
    assert "SQNR dB" in result.output and "verdict: int8-ok" in result.output
    doc = json.loads(out.read_text())
    assert doc["stage"] == "classifier" and doc["labels"]["classes"] == 2
    assert [c["class"] for c in doc["classes"]] == [0, 1]
    # --json prints the same document; an existing file needs --force
    again = invoke("align", captures["base"], captures["cand"], "--stage", "classifier", "-o", out, "--json")
    assert_one_line_error(again, str(out), "--force")
    forced = invoke("align", captures["base"], captures["cand"], "--stage", "classifier", "-o", out, "--json",
                    "--force")
    assert forced.exit_code == 0 and json.loads(forced.output.split("\nalign:")[0])["stage"] == "classifier"


def test_thresholds_are_options(captures, tmp_path):
    result = invoke("align", captures["base"], captures["cand"], "--min-sqnr-db", "140", "--max-keep", "0",
                    "-o", tmp_path / "a.json")
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["thresholds"]["min_sqnr_db"] == 140 and doc["verdict"]["decision"] == "fp16-only"
    assert "--max-keep 0" in doc["verdict"]["why"]


def test_different_sample_counts(captures, tmp_path):
    fewer = lp_torch.capture(captures["net"], captures["images"][:8], out=tmp_path / "fewer.npz")
    result = invoke("align", captures["base"], fewer, "-o", tmp_path / "a.json")
    assert_one_line_error(result, "12 samples", "8", "same samples")


def test_different_samples(captures, tmp_path):
    other = lp_torch.capture(captures["net"], captures["images"] + 1, out=tmp_path / "other.npz")
    assert_one_line_error(invoke("align", captures["base"], other, "-o", tmp_path / "a.json"),
                          "different samples", "same order")


def test_mismatched_layer_shapes_name_the_layer(captures, tmp_path):
    from torch import nn

    wider = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 24, 3, padding=1, stride=2),
                          nn.ReLU(), nn.Conv2d(24, 32, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(32 * 8 * 8, 6)).eval()
    other = lp_torch.capture(wider, captures["images"], out=tmp_path / "wider.npz")
    assert_one_line_error(invoke("align", captures["base"], other, "-o", tmp_path / "a.json"),
                          "layer '2'", "32x8x8", "24x8x8")


def test_mismatched_layer_names_name_the_layer(captures, tmp_path):
    base = lp_torch.capture(captures["net"], captures["images"], layers=["2"], out=tmp_path / "base.npz")
    cand = lp_torch.capture(captures["net"], captures["images"], layers=["4"], out=tmp_path / "cand.npz")
    assert_one_line_error(invoke("align", base, cand, "-o", tmp_path / "a.json"), "layer '2'", "capture the same")


def test_nans_name_the_first_layer_that_has_them(captures, tmp_path):
    broken = outlier_net()
    with torch.no_grad():
        broken[2].weight[3, 0, 0, 0] = float("nan")
    cand = lp_torch.capture(broken, captures["images"], out=tmp_path / "nan.npz")
    assert_one_line_error(invoke("align", captures["base"], cand, "-o", tmp_path / "a.json"),
                          "nan.npz", "layer '2'", "NaN")


def test_labels_must_match_the_samples(captures, tmp_path):
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps([0, 1, 2]))
    assert_one_line_error(invoke("align", captures["base"], captures["cand"], "--labels", labels,
                                 "-o", tmp_path / "a.json"), "labels.json", "3 labels for 12 samples")


def test_not_a_capture(captures, tmp_path):
    junk = tmp_path / "junk.npz"
    junk.write_text("not a zip")
    assert_one_line_error(invoke("align", junk, captures["cand"], "-o", tmp_path / "a.json"), "junk.npz",
                          "not a capture")
    plain = tmp_path / "plain.npz"
    np.savez(plain, x=np.zeros(3))
    assert_one_line_error(invoke("align", plain, captures["cand"], "-o", tmp_path / "a.json"), "plain.npz",
                          "no metadata")
    assert_one_line_error(invoke("align", tmp_path / "missing.npz", captures["cand"], "-o", tmp_path / "a.json"),
                          "missing.npz", "no such file")


def test_an_input_file_is_never_overwritten(captures):
    before = captures["cand"].read_bytes()
    result = invoke("align", captures["base"], captures["cand"], "-o", captures["cand"], "--force")
    assert_one_line_error(result, "input files")
    assert captures["cand"].read_bytes() == before


def test_kept_must_name_nodes(captures, tmp_path):
    result = invoke("align", captures["base"], captures["cand"], "--kept", "4,conv9", "-o", tmp_path / "a.json")
    assert_one_line_error(result, "--kept 'conv9'", "keep_fp16")


def test_debug_shows_the_traceback(captures, tmp_path):
    result = invoke("--debug", "align", captures["base"], tmp_path / "missing.npz", "-o", tmp_path / "a.json")
    assert result.exit_code != 0 and result.exception is not None


def test_capture_refuses_to_replace_a_file(captures):
    from loadprobe._errors import LoadprobeError

    with pytest.raises(LoadprobeError, match="exists"):
        lp_torch.capture(captures["net"], captures["images"], out=captures["base"])


def test_capture_errors_name_the_module(captures, tmp_path):
    from loadprobe._errors import LoadprobeError

    with pytest.raises(LoadprobeError, match="no module named 'backbone'"):
        lp_torch.capture(captures["net"], captures["images"], layers=["backbone"], out=tmp_path / "x.npz")


def test_recommend_and_report_take_align(tmp_path):
    """--align on recommend and report, on a committed recording's portrait."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((10, 40)).astype(np.float32)
    out = rng.standard_normal((10, 2, 4)).astype(np.float32)
    base = write_capture(tmp_path / "b.npz", {"a": a, "out": out})
    cand = write_capture(tmp_path / "c.npz", {"a": a * 1.001, "out": out * 1.001})
    align_json = tmp_path / "align.json"
    assert invoke("align", base, cand, "--stage", "no-such-stage", "-o", align_json).exit_code == 0
    from ..conftest import REPO

    result = invoke("recommend", REPO / "samples" / "data" / "vision", "--align", align_json,
                    "-o", tmp_path / "plan" / "pipeline.yaml")
    assert_one_line_error(result, "align.json", "'no-such-stage' is not a stage", "--stage")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert_one_line_error(invoke("report", REPO / "samples" / "data" / "vision", "--align", bad,
                                 "-o", tmp_path / "r.html"), "bad.json", "not an align.json")
