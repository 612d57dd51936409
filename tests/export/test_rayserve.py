"""``--to ray-serve``: Ray Serve's own schema takes the config, and the application deployed on 127.0.0.1 answers."""

from __future__ import annotations

import ast
import json
import os
import socket
import urllib.error
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from loadprobe.export import export

from .plans import HERE, PLANS, RAY_DEMO_EXECUTORS


def _ray_serve():
    """Ray Serve's modules, or a skip saying why (no wheel for this platform, or not installed)."""
    try:
        with warnings.catch_warnings():  # ray's own pydantic deprecations, not this project's
            warnings.simplefilter("ignore", DeprecationWarning)
            import ray
            from ray import serve
            from ray.serve.schema import ServeDeploySchema
    except ImportError as exc:
        pytest.skip(f"ray[serve] cannot be imported here ({exc}); pip install 'loadprobe[ray]' where a wheel exists")
    return ray, serve, ServeDeploySchema


def exported(tmp_path, name, **options):
    config = PLANS[name]()
    options.setdefault("check_imports", False)  # most executors here are names only; test_export_cli imports them
    done = export(config, "ray-serve", tmp_path / "serve", **options)
    files = {p.name: p for p in done.files}
    module = next(p for p in done.files if p.suffix == ".py")
    return config, done, yaml.safe_load(files["serve_config.yaml"].read_text()), module


def _decorators(module) -> dict[str, dict]:
    """Each class's @serve.deployment keywords and, where batched, its @serve.batch keywords."""
    found = {}
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.decorator_list:
            (deployment,) = node.decorator_list
            entry = {"deployment": {k.arg: ast.literal_eval(k.value) for k in deployment.keywords}}
            for item in node.body:
                if isinstance(item, ast.AsyncFunctionDef) and item.name == "__call__" and item.decorator_list:
                    entry["batch"] = {k.arg: ast.literal_eval(k.value) for k in item.decorator_list[0].keywords}
            found[entry["deployment"]["name"]] = entry
    return found


@pytest.mark.parametrize("name", sorted(PLANS))
def test_ray_serves_own_schema_accepts_the_config(tmp_path, name):
    _, _, ServeDeploySchema = _ray_serve()
    config, _, document, module = exported(tmp_path, name)
    schema = ServeDeploySchema.model_validate(document)
    (app,) = schema.applications
    assert app.import_path == f"{module.stem}:app"
    assert [d.name for d in app.deployments][1:] == [s.name if e == s.engine else f"{s.name}@{e}"
                                                      for s in config.stages for e in s.runs_on]


@pytest.mark.parametrize("name", sorted(PLANS))
def test_each_deployment_carries_the_plans_placement_and_batch_window(tmp_path, name):
    config, _, document, module = exported(tmp_path, name, num_cpus=0.25)
    compile(module.read_text(), str(module), "exec")
    deployments = {d["name"]: d for d in document["applications"][0]["deployments"]}
    code = _decorators(module)
    sharing = {}
    for stage in config.stages:
        for engine in stage.runs_on:
            sharing[engine] = sharing.get(engine, 0) + 1
    for stage in config.stages:
        for name_ in stage.runs_on:
            engine = config.engines[name_]
            key = stage.name if name_ == stage.engine else f"{stage.name}@{name_}"
            d = deployments[key]
            assert code[key]["deployment"] == d  # the decorator and the YAML say the same
            slots = min(stage.max_concurrency or engine.max_concurrency, engine.max_concurrency)
            per_replica = -(-slots // engine.count)
            assert d["num_replicas"] == engine.count
            assert d["max_ongoing_requests"] == per_replica * (stage.batch.size if stage.batch else 1)
            assert d["max_queued_requests"] == max(engine.max_queue, 1)
            actor = d["ray_actor_options"]
            assert actor["num_cpus"] == 0.25
            share = actor.get("num_gpus") or sum(actor.get("resources", {}).values())
            if engine.kind == "cpu":
                assert "num_gpus" not in actor and "resources" not in actor
            else:
                assert 0 < share <= 1 / sharing[name_] and share * sharing[name_] > 0.999
                assert ("num_gpus" in actor) == (engine.kind == "gpu")
            if stage.batch:
                assert code[key]["batch"] == {"max_batch_size": stage.batch.size,
                                              "batch_wait_timeout_s": stage.batch.max_wait_ms / 1000,
                                              "max_concurrent_batches": per_replica}
            else:
                assert "batch" not in code[key]


def test_npu_engines_ask_for_the_accelerators_ray_resource(tmp_path):
    _, _, document, _ = exported(tmp_path, "vision")
    deployments = {d["name"]: d for d in document["applications"][0]["deployments"]}
    assert deployments["backbone"]["ray_actor_options"]["resources"] == {"NPU": 1.0}   # Ascend: Ray's NPU
    assert deployments["backbone@gpu0"]["ray_actor_options"]["num_gpus"] == 0.5       # shares gpu0 with postprocess
    assert deployments["postprocess"]["ray_actor_options"]["num_gpus"] == 0.5


def test_the_readme_lists_exactly_what_ray_serve_loses(tmp_path):
    _, done, _, module = exported(tmp_path, "vision")
    readme = (module.parent / "README.md").read_text()
    dropped = readme.split("## Not carried over")[1].split("## Approximated")[0]
    assert [line.split("**")[1] for line in dropped.splitlines() if line.startswith("- **")] == \
        ["routing by shape or precision", "shedding by priority"]
    assert [(loss.feature, loss.where) for loss in done.losses if not loss.dropped] == \
        [("failover threshold", "backbone"), ("engine shared by stages", "cpu"), ("engine shared by stages", "gpu0")]
    _, done, _, module = exported(tmp_path / "f", "fleet")
    assert [loss.feature for loss in done.dropped] == ["canary"]
    assert "breaker above 50% errors" in (module.parent / "README.md").read_text()
    _, done, _, _ = exported(tmp_path / "p", "plain")
    assert done.losses == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.timeout(600)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_exported_application_deploys_on_ray_serve_and_answers(tmp_path, monkeypatch):
    ray, serve, ServeDeploySchema = _ray_serve()
    from ray.serve.context import _get_global_client

    # num_cpus as export sizes it from the plan's 2 cores: every replica schedules on the 2 CPUs given to Ray below
    _, _, document, module = exported(tmp_path, "ray-demo", executors=RAY_DEMO_EXECUTORS)
    assert sum(d["ray_actor_options"]["num_cpus"] for d in document["applications"][0]["deployments"]) == 2
    document["http_options"]["port"] = port = _free_port()
    config = ServeDeploySchema.model_validate(document)
    # What `PYTHONPATH=... serve run serve_config.yaml` does: Ray's workers import the module and
    # the executors through the environment of the process that starts Ray.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(module.parent), str(HERE)]))
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, namespace="serve", log_to_driver=False)
    try:
        serve.start(http_options=config.http_options.model_dump(), proxy_location=config.proxy_location)
        _get_global_client().deploy_apps(config, _blocking=True)  # as `serve deploy` does, through the controller
        url = f"http://127.0.0.1:{port}/ray-demo"
        assert _post(url, {"value": 3}) == (200, {"value": 3, "score": 6, "batch": 1, "done": True})
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: _post(url, {"value": i}), range(8)))
        assert [(status, body["score"]) for status, body in answers] == [(200, 2 * i) for i in range(8)]
        assert all(1 <= body["batch"] <= 4 for _, body in answers)  # @serve.batch within the plan's size
        status, body = _post(url, {"value": 1, "fail": "now"})
        assert status == 500 and body["stage"] == "parse" and body["type"] == "ValueError"
        assert "asked to fail at parse: now" in body["message"]
        status, body = _post(url, {"value": 1, "hang": True})
        assert status == 504 and (body["stage"], body["engine"]) == ("finish", "cpu")
        assert "within its 1500 ms timeout" in body["message"]
        handle = serve.get_app_handle("ray-demo")
        assert handle.submit.remote({"value": 4}).result(timeout_s=60)["score"] == 8
        status, body = _post(url.replace("ray-demo", "ray-demo/"), "not an object")  # JSON, but parse wants a dict
        assert status == 500 and body["stage"] == "parse"
    finally:
        serve.shutdown()
        ray.shutdown()


FAILOVER = """\
version: 1
service: failover
engines:
  npu0: {kind: npu, device: ascend-310p, max_concurrency: 1, max_queue: 4}
  gpu0: {kind: gpu, max_concurrency: 1, max_queue: 4}
stages:
  - name: backbone
    engine: npu0
    timeout_ms: 60000
    retry: {max_attempts: 2}
    fallback: {engine: gpu0, max_ratio: 0.5}
    breaker: {error_rate_over: 0.5, window_s: 600, min_requests: 4, open_s: 600}
"""


class _Call:
    """What a DeploymentHandle's ``.remote()`` returns, as far as the ingress uses it: awaitable, cancellable."""

    def __init__(self, run, payload):
        self.run, self.payload = run, payload

    def __await__(self):
        return self._result().__await__()

    async def _result(self):
        return self.run(self.payload)

    def cancel(self):
        pass


class _Handle:
    def __init__(self, run):
        self.run, self.calls = run, 0

    def remote(self, payload):
        self.calls += 1
        return _Call(self.run, payload)


def _ingress(tmp_path, primary, fallback):
    """The exported ingress class itself (its rules, no cluster), given stand-in handles for its stages."""
    import importlib.util

    _ray_serve()
    from loadprobe import pipeline

    done = export(pipeline.loads(FAILOVER), "ray-serve", tmp_path / "serve")
    path = next(p for p in done.files if p.suffix == ".py")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        spec.loader.exec_module(module)
    handles = {"backbone": {"npu0": _Handle(primary), "gpu0": _Handle(fallback)}}
    return module, module.Pipeline.func_or_class(handles), handles["backbone"]


def _outcomes(module, ingress, n):
    import asyncio

    async def run():
        out = []
        for i in range(n):
            try:
                out.append(await ingress.submit(i))
            except (module.Rejected, module.StageFailed) as exc:
                out.append(getattr(exc, "reason", type(exc).__name__))
        return out

    return asyncio.run(run())


def test_a_full_stage_moves_to_its_fallback_within_the_cap(tmp_path):
    _ray_serve()
    from ray.serve.exceptions import BackPressureError

    def full(payload):
        raise BackPressureError(num_queued_requests=4, max_queued_requests=4)

    module, ingress, handles = _ingress(tmp_path, full, lambda payload: f"gpu {payload}")
    # max_ratio 0.5, counted with each move: the 1st and 3rd would pass half of the requests
    assert _outcomes(module, ingress, 4) == ["failover_cap", "gpu 1", "failover_cap", "gpu 3"]
    assert handles["npu0"].calls == 4 and handles["gpu0"].calls == 2


def test_failures_are_retried_then_open_the_breaker_which_moves_traffic(tmp_path):
    def broken(payload):
        raise ValueError("the device is gone")

    module, ingress, handles = _ingress(tmp_path, broken, lambda payload: f"gpu {payload}")
    # two requests x two attempts fail on npu0 (4 of 4 > 50%, min_requests 4): the breaker opens,
    # and the third request goes to gpu0 within the cap (1 move of 5 attempts)
    assert _outcomes(module, ingress, 3) == ["StageFailed", "StageFailed", "gpu 2"]
    assert handles["npu0"].calls == 4
