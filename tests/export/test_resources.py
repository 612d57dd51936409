"""Issue #32.7: an export fits the line-up its plan was sized on -- Ray Serve's CPU reservations are shares of the
plan's cores, GPU and accelerator shares of its devices, Triton's instance groups use the plan's GPUs -- and says
at export what will not schedule."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from loadprobe import pipeline
from loadprobe.cli import main
from loadprobe.export import export

from .plans import FLEET
from .test_rayserve import _ray_serve

pytestmark = pytest.mark.timeout(300)

# The host: three stages on a 2-core machine, the backbone on an L4.
TWO_CORES = """\
version: 1
service: small-host
engines:
  cpu: {kind: cpu, cores: 2, max_concurrency: 4, max_queue: 64}
  gpu0: {kind: gpu, device: nvidia-l4, max_concurrency: 2, max_queue: 64}
stages:
  - {name: decode, engine: cpu, timeout_ms: 100}
  - {name: backbone, engine: gpu0, timeout_ms: 100, batch: {size: 4, max_wait_ms: 2}}
  - {name: encode, engine: cpu, timeout_ms: 100}
"""


def _deployments(out) -> list[dict]:
    return yaml.safe_load((out / "serve_config.yaml").read_text())["applications"][0]["deployments"]


def _cpus(deployments) -> float:
    return sum(d["num_replicas"] * d["ray_actor_options"]["num_cpus"] for d in deployments)


def test_ray_replicas_share_the_plans_cores_and_ray_accepts_the_config(tmp_path):
    _, _, ServeDeploySchema = _ray_serve()
    done = export(pipeline.loads(TWO_CORES), "ray-serve", tmp_path / "serve", check_imports=False)
    deployments = _deployments(tmp_path / "serve")
    assert len(deployments) == 4  # the ingress and three stages, one replica each
    assert {d["ray_actor_options"]["num_cpus"] for d in deployments} == {0.5}
    assert _cpus(deployments) == pytest.approx(2.0)  # all of the host's cores, no more
    assert done.warnings == []
    document = yaml.safe_load((tmp_path / "serve" / "serve_config.yaml").read_text())
    ServeDeploySchema.model_validate(document)  # fractional num_cpus, as Ray Serve takes them
    readme = (tmp_path / "serve" / "README.md").read_text()
    assert "4 replicas x num_cpus 0.5 = 2 CPUs (an equal share of the plan's cores, at most 1 each) of the plan's " \
           "2 cores (cpu: 2 cores)" in readme
    assert "gpu0 (gpu, nvidia-l4): 1 deployment asks for 1 GPU of its 1" in readme


def test_a_num_cpus_that_does_not_fit_is_said_at_export_and_in_the_readme(tmp_path):
    plan = tmp_path / "pipeline.yaml"
    plan.write_text(TWO_CORES)
    result = CliRunner().invoke(main, ["export", str(plan), "--to", "ray-serve", "-o", str(tmp_path / "serve"),
                                       "--num-cpus", "1"])
    assert result.exit_code == 0, result.output
    warning = ("ray-serve: 4 replicas ask for 4 CPUs (num_cpus 1 each); the plan's host has 2 cores (cpu: 2 cores): "
               "Ray cannot schedule them all")
    assert warning in result.output and "give at most 0.5" in result.output
    assert _cpus(_deployments(tmp_path / "serve")) == 4  # as asked: the warning says so, nothing is changed
    assert warning in (tmp_path / "serve" / "README.md").read_text()


def test_many_replicas_on_several_hosts_share_all_their_cores(tmp_path):
    plan = TWO_CORES.replace("cores: 2,", "cores: 2, count: 3,").replace("max_concurrency: 2,", "count: 4, "
                                                                         "max_concurrency: 8,")
    done = export(pipeline.loads(plan), "ray-serve", tmp_path / "serve", check_imports=False)
    deployments = _deployments(tmp_path / "serve")
    replicas = sum(d["num_replicas"] for d in deployments)
    assert replicas == 1 + 3 + 4 + 3  # the ingress, decode and encode on 3 hosts, the backbone on 4 GPUs
    assert 6 - replicas * 1e-4 <= _cpus(deployments) <= 6  # 6 cores over 11 replicas, rounded down to Ray's 1e-4
    assert done.warnings == []


def test_a_plan_without_its_cores_keeps_one_cpu_each_and_says_why(tmp_path):
    done = export(pipeline.loads(TWO_CORES.replace("cores: 2, ", "")), "ray-serve", tmp_path / "serve",
                  check_imports=False)
    assert {d["ray_actor_options"]["num_cpus"] for d in _deployments(tmp_path / "serve")} == {1.0}
    assert done.warnings == []  # nothing to check against
    assert "the plan does not give its host's cores" in (tmp_path / "serve" / "README.md").read_text()


def test_triton_says_which_gpus_and_cores_its_instance_groups_use(tmp_path):
    done = export(pipeline.loads(FLEET.replace("kind: cpu,", "kind: cpu, cores: 8,")), "triton", tmp_path / "repo",
                  check_imports=False)
    assert done.warnings == []
    resources = (tmp_path / "repo" / "README.md").read_text().split("## Resources")[1].split("\n## ")[0]
    assert ("GPU: encoder 2 instances per GPU, head 2 instances per GPU, on GPUs 0 to 2 of the plan's 3 (GPUs 0 to 2 "
            "must be visible to tritonserver)") in resources
    assert "CPU: tokenize 6 KIND_CPU instances, 6 in all, on the plan's 16 cores (host: 8 cores x 2 hosts)" in resources


def test_the_planner_writes_the_cores_it_sized_on_and_its_export_fits_them(tmp_path):
    from loadprobe.plan.constraints import Constraints
    from loadprobe.plan.planner import recommend

    from ..plan.test_recommend import record

    portrait = record(tmp_path, {"prep": {"ms": 2.0}, "model": {"ms": 3.0}, "post": {"ms": 1.0}}, requests=40)
    plan = recommend(portrait, Constraints.parse(engines="cpu", min_rps=20), cpu_cores=2)
    text = pipeline.dump(plan.to_pipeline())
    config = pipeline.loads(text)
    assert config.engines["cpu"].cores == 2
    done = export(config, "ray-serve", tmp_path / "serve", check_imports=False)
    assert _cpus(_deployments(tmp_path / "serve")) <= 2 and done.warnings == []


def test_the_docs_resources_examples_are_what_export_says(tmp_path):
    from ..conftest import REPO
    from .plans import VISION

    section = (REPO / "docs" / "export.md").read_text(encoding="utf-8").split("\n## Resources\n", 1)[1]
    shown = [line for block in section.split("\n## ", 1)[0].split("```text\n")[1:]
             for line in block.split("```", 1)[0].splitlines()]
    fitted = CliRunner().invoke(main, ["export", str(VISION), "--to", "ray-serve", "-o", str(tmp_path / "a"),
                                       "--no-import-check"])
    asked = CliRunner().invoke(main, ["export", str(VISION), "--to", "ray-serve", "-o", str(tmp_path / "b"),
                                      "--no-import-check", "--num-cpus", "1"])
    said = (tmp_path / "a" / "README.md").read_text() + asked.output
    assert fitted.exit_code == asked.exit_code == 0 and len(shown) == 4
    for line in shown:
        assert line in said, line
