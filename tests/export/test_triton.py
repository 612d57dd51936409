"""``--to triton``: every config.pbtxt is read by Triton's own ModelConfig protobuf and says what the plan says."""

from __future__ import annotations

import json
import math
import sys
import types

import numpy as np
import pytest

from loadprobe.export import export
from loadprobe.export.triton import ensemble_name

from .plans import PLANS

model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2",
                                       reason="tritonclient is not installed: pip install 'loadprobe[triton]'")
from google.protobuf import text_format  # noqa: E402  (tritonclient brings protobuf)

ALL = ["decode=stage_functions:parse", "preprocess=stage_functions:parse", "backbone=stage_functions:score",
       "postprocess=stage_functions:finish"]


def parse(path) -> "model_config_pb2.ModelConfig":
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def exported(tmp_path, name, **options):
    config = PLANS[name]()
    options.setdefault("check_imports", False)  # most executors here are names only; test_export_cli imports them
    done = export(config, "triton", tmp_path / "repo", **options)
    return config, done, tmp_path / "repo"


@pytest.mark.parametrize("name", sorted(PLANS))
def test_every_stage_model_carries_the_batch_window_queue_and_instances(tmp_path, name):
    config, _, repo = exported(tmp_path, name)
    gpus_seen = []
    for stage in config.stages:
        engine = config.engines[stage.engine]
        model = parse(repo / stage.name / "config.pbtxt")
        assert model.name == stage.name and model.backend == "python"
        assert (repo / stage.name / "1" / "model.py").is_file()
        assert [(t.name, t.data_type, list(t.dims)) for t in model.input] == [("INPUT", model_config_pb2.TYPE_STRING, [1])]
        assert [(t.name, t.data_type, list(t.dims)) for t in model.output] == [("OUTPUT", model_config_pb2.TYPE_STRING, [1])]
        batching = model.dynamic_batching
        if stage.batch:
            assert model.max_batch_size == stage.batch.size
            assert list(batching.preferred_batch_size) == [stage.batch.size]
            assert batching.max_queue_delay_microseconds == round(stage.batch.max_wait_ms * 1000)
        else:  # one request at a time; the batcher is there for its queue policy only
            assert model.max_batch_size == 1 and not batching.preferred_batch_size
            assert batching.max_queue_delay_microseconds == 0
        policy = batching.default_queue_policy
        assert policy.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT
        assert policy.default_timeout_microseconds == round(stage.timeout_ms * 1000)
        assert not policy.allow_timeout_override
        assert policy.max_queue_size == max(engine.max_queue, 1)
        (group,) = model.instance_group
        slots = min(stage.max_concurrency or engine.max_concurrency, engine.max_concurrency)
        kind = model_config_pb2.ModelInstanceGroup
        if engine.kind == "gpu":
            assert group.kind == kind.KIND_GPU
            assert len(group.gpus) == engine.count and group.count == math.ceil(slots / engine.count)
            gpus_seen.append(list(group.gpus))
        else:
            assert group.kind == {"cpu": kind.KIND_CPU, "npu": kind.KIND_MODEL}[engine.kind]
            assert group.count == slots and not group.gpus
        parameters = {key: value.string_value for key, value in model.parameters.items()}
        assert parameters == {"loadprobe_stage": stage.name, "loadprobe_engine": stage.engine,
                              "loadprobe_executor": "", "loadprobe_batched": "true" if stage.batch else "false"}
    # no two GPU engines share a GPU index
    flat = [g for ids in {tuple(ids) for ids in gpus_seen} for g in ids]
    assert len(flat) == len(set(flat))


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_ensemble_runs_the_stages_in_order(tmp_path, name):
    config, _, repo = exported(tmp_path, name)
    ensemble = parse(repo / ensemble_name(config) / "config.pbtxt")
    assert ensemble.platform == "ensemble" and ensemble.max_batch_size == 1
    assert (repo / ensemble.name / "1").is_dir()
    steps = ensemble.ensemble_scheduling.step
    assert [s.model_name for s in steps] == [s.name for s in config.stages]
    assert steps[0].input_map["INPUT"] == "INPUT" and steps[-1].output_map["OUTPUT"] == "OUTPUT"
    for before, after in zip(steps, steps[1:]):
        assert after.input_map["INPUT"] == before.output_map["OUTPUT"]
    tensors = [s.output_map["OUTPUT"] for s in steps]
    assert len(set(tensors)) == len(tensors)
    models = {p.parent.name for p in repo.glob("*/config.pbtxt")}
    assert models == {s.name for s in config.stages} | {ensemble.name}


def test_gpu_indices_follow_the_plan_and_the_ensemble_is_named_for_the_service(tmp_path):
    config, _, repo = exported(tmp_path, "fleet")
    assert ensemble_name(config) == "fleet-v2"
    assert list(parse(repo / "encoder" / "config.pbtxt").instance_group[0].gpus) == [0, 1]
    assert list(parse(repo / "head" / "config.pbtxt").instance_group[0].gpus) == [2]
    assert parse(repo / "tokenize" / "config.pbtxt").dynamic_batching.default_queue_policy.max_queue_size == 1


def _sections(readme: str) -> tuple[list[str], list[str]]:
    dropped = readme.split("## Not carried over")[1].split("## Approximated")[0]
    approx = readme.split("## Approximated")[1]
    names = lambda text: [line.split("**")[1] for line in text.splitlines() if line.startswith("- **")]  # noqa: E731
    return names(dropped), names(approx)


def test_the_readme_lists_exactly_what_the_plan_uses_and_triton_loses(tmp_path):
    _, done, repo = exported(tmp_path, "vision")
    dropped, approx = _sections((repo / "README.md").read_text())
    assert dropped == ["NPU engines", "fallback", "retries", "retry budget", "shedding by priority"]
    assert approx == ["timeouts", "engine shared by stages"]  # cpu: decode and preprocess (the fallback is not exported)
    assert [loss.feature for loss in done.dropped] == dropped

    _, _, repo = exported(tmp_path / "f", "fleet")
    dropped, approx = _sections((repo / "README.md").read_text())
    assert dropped == ["circuit breakers", "retries", "canary"]
    assert approx == ["timeouts", "executions over devices", "no queue"]

    _, done, repo = exported(tmp_path / "p", "plain")
    readme = (repo / "README.md").read_text()
    assert _sections(readme) == ([], ["timeouts"]) and "Nothing in this plan." in readme
    assert not done.dropped


def test_npu_stages_are_placed_by_the_backend_and_said_so_or_refused_with_strict(tmp_path):
    from loadprobe import LoadprobeError

    _, done, repo = exported(tmp_path, "vision")
    kind = model_config_pb2.ModelInstanceGroup
    assert parse(repo / "backbone" / "config.pbtxt").instance_group[0].kind == kind.KIND_MODEL
    readme = (repo / "README.md").read_text()
    assert "**NPU engines** (backbone)" in readme and "Triton has no NPU instance kind" in readme
    with pytest.raises(LoadprobeError, match=r"triton cannot express NPU engines \(backbone\); fallback"):
        export(PLANS["vision"](), "triton", tmp_path / "strict", strict=True)
    assert not (tmp_path / "strict").exists()
    export(PLANS["plain"](), "triton", tmp_path / "plain", strict=True)  # nothing dropped: written


# -- the Python-backend model.py, run against a stand-in of the module tritonserver provides ------------


class _Tensor:
    def __init__(self, name, array):
        self.name, self.array = name, array

    def as_numpy(self):
        return self.array


class _Response:
    def __init__(self, output_tensors, error=None):
        self.output_tensors, self.error = output_tensors, error


def _backend_utils() -> types.ModuleType:
    utils = types.ModuleType("triton_python_backend_utils")
    utils.Tensor = _Tensor
    utils.InferenceResponse = _Response
    utils.TritonError = str
    utils.TritonModelException = type("TritonModelException", (Exception,), {})
    utils.get_input_tensor_by_name = lambda request, name: request[name]
    return utils


def _model(monkeypatch, repo, stage):
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", _backend_utils())
    namespace: dict = {}
    exec(compile((repo / stage / "1" / "model.py").read_text(), "model.py", "exec"), namespace)
    config = parse(repo / stage / "config.pbtxt")
    from google.protobuf import json_format

    model = namespace["TritonPythonModel"]()
    model.initialize({"model_config": json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True)),
                      "model_name": stage})
    return model


def _request(*payloads):
    return {"INPUT": _Tensor("INPUT", np.array([json.dumps(p).encode() for p in payloads],
                                               dtype=np.object_).reshape(-1, 1))}


def test_the_model_skeleton_calls_the_executor_the_routers_way(tmp_path, monkeypatch):
    from .plans import HERE

    monkeypatch.syspath_prepend(str(HERE))
    _, _, repo = exported(tmp_path, "vision", executors=ALL)
    backbone = _model(monkeypatch, repo, "backbone")  # batched, async: one call for the whole batch
    try:
        responses = backbone.execute([_request({"value": 1}), _request({"value": 2}, {"value": 3})])
    finally:
        backbone.finalize()  # closes the event loop it awaits async executors on
    outs = [[json.loads(x) for x in r.output_tensors[0].as_numpy().reshape(-1)] for r in responses]
    assert outs == [[{"value": 1, "score": 2, "batch": 3}], [{"value": 2, "score": 4, "batch": 3},
                                                             {"value": 3, "score": 6, "batch": 3}]]
    assert responses[1].output_tensors[0].as_numpy().shape == (2, 1)

    decode = _model(monkeypatch, repo, "decode")  # unbatched plain function; an error names the stage
    (ok,) = decode.execute([_request({"value": 5})])
    assert json.loads(ok.output_tensors[0].as_numpy()[0, 0]) == {"value": 5, "parsed": True}
    (failed,) = decode.execute([_request({"fail": "now"})])
    assert failed.error == "stage 'decode' on engine 'cpu': ValueError: asked to fail at parse: now"


def test_a_model_without_an_executor_refuses_to_load_saying_how_to_fix_it(tmp_path, monkeypatch):
    _, done, repo = exported(tmp_path, "plain")
    assert done.missing == ["work"]
    with pytest.raises(Exception, match=r"stage 'work' has no executor: export again with --executor work=MODULE:NAME"):
        _model(monkeypatch, repo, "work")
