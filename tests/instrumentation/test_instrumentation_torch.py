"""The PyTorch adapter on real modules, recording into real Parquet files."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from loadprobe.record import buffers as _buffers
from loadprobe import request  # noqa: E402
from loadprobe.instrumentation import torch as lp_torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from ..conftest import by_stage, run_python, stopped_spans  # noqa: E402


class Net(torch.nn.Module):
    """Conv -> ReLU -> Linear, small enough to run in microseconds."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4 * 8 * 8, 10)

    def forward(self, x, scale=None):
        y = self.head(torch.relu(self.conv(x)).flatten(1))
        return y if scale is None else y * scale


class Fails(torch.nn.Module):
    def forward(self, x):
        raise ValueError("bad input")


def param_bytes(module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def nbytes(t) -> int:
    return t.numel() * t.element_size()


@pytest.fixture
def net():
    model = Net().eval()
    yield model
    lp_torch.uninstrument(model)


def test_one_span_per_forward_of_each_stage_with_its_metadata(recorder, net):
    lp_torch.instrument(net, {"backbone": net.conv, "head": net.head})
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        for _ in range(3):
            net(x)
    rows = by_stage(stopped_spans(recorder))
    assert {stage: len(spans) for stage, spans in rows.items()} == {"backbone": 3, "head": 3}
    backbone, head = rows["backbone"][0], rows["head"][0]
    assert (backbone["batch"], backbone["shape"], backbone["engine"], backbone["status"]) == (4, "4x3x8x8", "cpu", "ok")
    assert (head["batch"], head["shape"], head["engine"]) == (4, "4x256", "cpu")
    # parameters + input + output, exactly
    assert backbone["bytes"] == param_bytes(net.conv) + nbytes(x) + 4 * 4 * 8 * 8 * 4
    assert head["bytes"] == param_bytes(net.head) + 4 * 256 * 4 + 4 * 10 * 4
    assert backbone["flops"] is None  # only with count_flops=True
    assert all(r["dur_ns"] > 0 for r in rows["backbone"] + rows["head"])


def test_default_stage_is_the_model_class_and_every_tensor_argument_is_a_shape(recorder, net):
    lp_torch.instrument(net)
    with torch.no_grad():
        net(torch.randn(2, 3, 8, 8), scale=torch.ones(2, 10))
    (row,) = stopped_spans(recorder)
    assert (row["stage"], row["batch"], row["shape"]) == ("Net", 2, "2x3x8x8,2x10")


def test_nested_stages_nest_as_parent_and_child_inside_a_request(recorder, net):
    lp_torch.instrument(net, {"model": net, "backbone": net.conv, "head": net.head})
    with torch.no_grad(), request(id="req-1"):
        net(torch.randn(1, 3, 8, 8))
    rows = {r["stage"]: r for r in stopped_spans(recorder)}
    assert set(rows) == {"request", "model", "backbone", "head"}
    assert all(r["request_id"] == "req-1" for r in rows.values())
    assert rows["model"]["parent_id"] == rows["request"]["span_id"]
    assert rows["backbone"]["parent_id"] == rows["model"]["span_id"]
    assert rows["head"]["parent_id"] == rows["model"]["span_id"]
    assert rows["backbone"]["dur_ns"] <= rows["model"]["dur_ns"]


def test_count_flops_matches_flop_counter_mode_and_is_cached_per_shape(recorder, net, monkeypatch):
    small, large = torch.randn(2, 3, 8, 8), torch.randn(5, 3, 8, 8)
    expected = {}
    with torch.no_grad():
        for x in (small, large):
            with FlopCounterMode(display=False) as total:
                net(x)
            with FlopCounterMode(display=False) as conv:
                net.conv(x)
            expected[x.shape[0]] = (total.get_total_flops(), conv.get_total_flops())
        assert expected[2][1] == 2 * (2 * 4 * 8 * 8) * (3 * 3 * 3)  # 2 x output elements x C_in x kernel

        lp_torch.instrument(net, {"model": net, "backbone": net.conv}, count_flops=True)
        for x in (small, small, large):
            net(x)
        # A later call with a counted shape does not count again: FlopCounterMode is not used.
        created = []
        monkeypatch.setattr(lp_torch._hooks[net], "counter", lambda **kw: created.append(kw))
        net(small)
    assert created == []
    rows = by_stage(stopped_spans(recorder))
    assert [r["flops"] for r in rows["model"]] == [expected[2][0], expected[2][0], expected[5][0], expected[2][0]]
    assert [r["flops"] for r in rows["backbone"]] == [expected[2][1], expected[2][1], expected[5][1], expected[2][1]]


def test_an_exception_in_forward_propagates_and_marks_the_span_error(recorder, net):
    failing = Fails()
    lp_torch.instrument(failing, count_flops=True)
    lp_torch.instrument(net)
    error_before = ValueError("handled by the caller")
    with pytest.raises(ValueError, match="bad input"):
        failing(torch.randn(3, 2))
    try:
        raise error_before
    except ValueError:
        net(torch.randn(1, 3, 8, 8))  # a forward inside an except block is still ok
    assert torch.utils._python_dispatch._get_current_dispatch_mode() is None  # the FLOP counter left
    rows = {r["stage"]: r for r in stopped_spans(recorder)}
    assert (rows["Fails"]["status"], rows["Fails"]["batch"], rows["Fails"]["flops"]) == ("error", 3, None)
    assert rows["Net"]["status"] == "ok"
    lp_torch.uninstrument(failing)


def test_instrumenting_twice_records_once_and_uninstrument_removes_the_hooks(recorder, net):
    lp_torch.uninstrument(net)  # not instrumented: a no-op
    lp_torch.instrument(net, {"backbone": net.conv})
    lp_torch.instrument(net, {"backbone": net.conv})
    lp_torch.instrument(net.conv, {"conv": net.conv})  # the same module under another model
    with torch.no_grad():
        net(torch.randn(1, 3, 8, 8))
        lp_torch.uninstrument(net)
        lp_torch.uninstrument(net)
        net(torch.randn(1, 3, 8, 8))
    assert not net.conv._forward_hooks and not net.conv._forward_pre_hooks
    assert [r["stage"] for r in stopped_spans(recorder)] == ["conv"]


def test_without_a_recorder_hooks_record_nothing_and_change_nothing(net):
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        expected = net(x)
        lp_torch.instrument(net, {"model": net, "backbone": net.conv}, count_flops=True)
        assert torch.equal(net(x), expected)
    assert _buffers.buffered() == 0
    assert lp_torch._hooks[net].flops == {}  # counting only happens for recorded spans


def test_a_failing_description_is_counted_and_never_reaches_the_model(recorder, net, monkeypatch):
    def broken(device):
        raise RuntimeError("no engine")

    monkeypatch.setattr(lp_torch, "_engine", broken)
    lp_torch.instrument(net, {"backbone": net.conv})
    with torch.no_grad():
        net(torch.randn(1, 3, 8, 8))
    assert recorder.stats().extractor_errors == 1
    (row,) = stopped_spans(recorder)
    assert (row["stage"], row["status"], row["engine"]) == ("backbone", "ok", None)


def test_threads_keep_their_own_open_spans(recorder, net):
    lp_torch.instrument(net, {"model": net, "backbone": net.conv})

    def serve(n):
        with torch.no_grad(), request(id=f"req-{n}"):
            for _ in range(5):
                net(torch.randn(n, 3, 8, 8))

    threads = [threading.Thread(target=serve, args=(n,)) for n in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = stopped_spans(recorder)
    spans = {r["span_id"]: r for r in rows}
    backbone = [r for r in rows if r["stage"] == "backbone"]
    assert len(backbone) == 20
    for row in backbone:
        parent = spans[row["parent_id"]]
        assert parent["stage"] == "model" and parent["batch"] == row["batch"]
        assert row["request_id"] == f"req-{row['batch']}"


def test_sync_cuda_skips_cpu_inputs(recorder, net, monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", synced.append)
    lp_torch.instrument(net, sync_cuda=True)
    with torch.no_grad():
        net(torch.randn(1, 3, 8, 8))
    assert synced == []
    assert [r["engine"] for r in stopped_spans(recorder)] == ["cpu"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_inputs_are_gpu_n_and_sync_cuda_synchronizes_that_device(recorder, net, monkeypatch):
    synced = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: (synced.append(device), real(device)))
    net.cuda()
    lp_torch.instrument(net, sync_cuda=True)
    with torch.no_grad():
        net(torch.randn(2, 3, 8, 8, device="cuda:0"))
    assert synced == [torch.device("cuda:0")] * 2  # before the start and before the end
    (row,) = stopped_spans(recorder)
    assert (row["engine"], row["batch"], row["status"]) == ("gpu0", 2, "ok")


def test_a_missing_torch_names_the_extra_to_install():
    result = run_python(
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "try:\n"
        "    import loadprobe.instrumentation.torch\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'loadprobe[torch]'" in result.stdout
