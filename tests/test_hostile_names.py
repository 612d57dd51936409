"""Hostile names, generated: whatever a stage or service is called -- ``/``, ``..``, quotes, newlines,
NUL, very long or non-ASCII -- record -> analyze -> recommend -> validate -> export exits 0 or 2 with
one line, never a traceback, and writes nothing outside the folders it was given.

Names come two ways: recorded by probes (the planner maps them to plan names and keeps the recorded
name beside each), and written straight into a pipeline.yaml that came from elsewhere (``validate``
and ``export`` refuse them, naming the field and the rule). CI runs a fixed, small set of examples;
``LOADPROBE_FUZZ_EXAMPLES=200`` draws fresh ones.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loadprobe
from loadprobe._errors import LoadprobeError
from loadprobe._files import inside
from loadprobe.cli import main
from loadprobe import pipeline
from loadprobe.pipeline import json_schema
from loadprobe.simulator.recorded import from_recording
from loadprobe.simulator.servicetimes import HOST_STAGE
from loadprobe.pipeline.names import PATTERN, is_name, plan_names, to_name

EXPLORE = int(os.environ.get("LOADPROBE_FUZZ_EXAMPLES", "0"))
ESCAPE = "loadprobe-hostile-escape"  # the folder an escaping name aims at, beside the test's own

KNOWN = [f"../../../{ESCAPE}/pwned", f"/tmp/{ESCAPE}/abs", "..", ".", "POST /inspect",
         "main\"; import os; os.system('touch pwned') #", "a\nb", "nul\x00name", "é" * 90, "x" * 300,
         "模型/推理", "model:v2", "$(touch pwned)", "back\\slash", " spaced ", "-leading", "9starts-with-digit"]
hostile_names = st.one_of(st.sampled_from(KNOWN), st.text(min_size=1, max_size=80))


def fuzz(examples: int):
    return settings(max_examples=EXPLORE or examples, derandomize=not EXPLORE, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def _outside(root: Path, given: list[Path], before: set[Path]) -> list[Path]:
    """What appeared under ``root`` that is neither one of ``given`` nor inside one."""
    return sorted(p for p in _files_under(root) - before
                  if not any(p == g or p.is_relative_to(g) for g in given))


def _one_line_or_ok(result) -> None:
    assert result.exit_code in (0, 2), (result.exit_code, result.output)
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    if result.exit_code == 2:
        assert len(result.output.strip().splitlines()) == 1 or "problem" in result.output, result.output


# -- the rule ------------------------------------------------------------------------------------------------


def test_the_schema_and_the_names_module_hold_one_rule():
    assert json_schema.schema()["$defs"]["name"]["pattern"] == PATTERN
    for ref in ("service", ):
        assert json_schema.schema()["properties"][ref]["$ref"] == "#/$defs/name"
    assert json_schema.schema()["$defs"]["stage"]["properties"]["name"]["$ref"] == "#/$defs/name"


@given(st.lists(hostile_names, min_size=1, max_size=6))
@fuzz(200)
def test_recorded_names_map_to_distinct_valid_names_and_valid_ones_stay(recorded):
    mapped = plan_names(recorded)
    assert set(mapped) == set(recorded)
    assert all(is_name(name) for name in mapped.values())
    assert len(set(mapped.values())) == len(mapped)
    assert all(mapped[name] == name for name in recorded if is_name(name))


@pytest.mark.parametrize("text, made", [("POST /inspect", "POST_inspect"), ("../../x", "x"), ("9b", "stage_9b"),
                                        ("é", "stage"), ("backbone", "backbone"), ("x" * 99, "x" * 64)])
def test_to_name_examples(text, made):
    assert to_name(text) == made


def test_inside_refuses_climbing_absolute_and_links_out(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "out" / "link")
    os.symlink(tmp_path / "out" / "sub", tmp_path / "out" / "inner")  # a link that stays inside is fine
    assert inside(tmp_path / "out", "a/b.txt") == tmp_path / "out" / "a" / "b.txt"
    assert inside(tmp_path / "out", "inner/x") == tmp_path / "out" / "inner" / "x"
    for bad in ("../x", "a/../../x", "/etc/passwd", "link/x", "link", ""):
        with pytest.raises(LoadprobeError):
            inside(tmp_path / "out", bad)


# -- a plan written by hand --------------------------------------------------------------------------------

PLAN = """version: 1
service: vision
engines:
  host: {{kind: cpu, count: 1, max_concurrency: 2, max_queue: 10}}
stages:
  - name: {name}
    engine: host
    timeout_ms: 100
"""


@pytest.mark.parametrize("name", [f"../../../{ESCAPE}/pwned", "main\"; import os; os.system('id') #", "a/b",
                                  "..", "POST /inspect"])
def test_validate_and_export_refuse_a_path_like_stage_name(tmp_path, name):
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    plan = deep / "pipeline.yaml"
    plan.write_text(PLAN.format(name=yaml.safe_dump(name, default_style='"').strip()))
    before = _files_under(tmp_path)
    checked = CliRunner().invoke(main, ["validate", str(plan)])
    assert checked.exit_code == 2 and "stages[0].name" in checked.output and "a name starts with a letter" \
        in checked.output, checked.output
    for target in ("triton", "ray-serve"):
        done = CliRunner().invoke(main, ["export", str(plan), "--to", target, "-o", str(deep / "out")])
        assert done.exit_code == 2 and "stages[0].name" in done.output, done.output
        assert len(done.output.strip().splitlines()) == 1
    assert _files_under(tmp_path) == before
    assert not Path("/tmp", ESCAPE).exists()


def test_export_of_a_config_built_in_code_checks_its_names(tmp_path):
    from loadprobe.export import export

    config = pipeline.PipelineConfig(
        service="vision", engines={"host": pipeline.EngineConfig(kind="cpu", max_concurrency=1, max_queue=1)},
        stages=[pipeline.StageConfig(name="../../escape", engine="host", timeout_ms=10)])
    with pytest.raises(LoadprobeError, match="not a valid name"):
        export(config, "triton", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_writers_refuse_a_symlink_out_of_their_folder(tmp_path):
    """-o's folder may be anything; a link inside it that leads out is not followed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(elsewhere / "portrait.json", out / "portrait.json")
    loadprobe.start(tmp_path / "data", service="svc", sample_devices=False)
    with loadprobe.request():
        loadprobe.record_span("decode", 1, 2_000_000)
    loadprobe.stop()
    done = CliRunner().invoke(main, ["analyze", str(tmp_path / "data"), "-o", str(out), "--no-html"])
    assert done.exit_code == 2 and "symbolic link" in done.output, done.output
    assert list(elsewhere.iterdir()) == []


# -- recorded names, end to end -----------------------------------------------------------------------------


@given(st.lists(hostile_names, min_size=2, max_size=3, unique=True), hostile_names)
@fuzz(6)
def test_hostile_recorded_names_go_through_every_command_inside_their_folders(tmp_path_factory, stages, service):
    root = tmp_path_factory.mktemp("hostile")
    work = root / "a" / "b" / "c"
    data, report, plan_dir, triton, ray = (work / n for n in ("data", "report", "plan", "triton", "ray"))
    work.mkdir(parents=True)
    before = _files_under(root)
    loadprobe.start(data, service=service, sample_devices=False, flush_interval_s=0.05)
    try:
        for i in range(60):
            with loadprobe.request():
                for stage in stages:
                    start = time.perf_counter_ns()
                    while time.perf_counter_ns() - start < 200_000 + i * 1000:
                        pass
                    loadprobe.record_span(stage, start, time.perf_counter_ns(), engine="cpu", batch=1)
    finally:
        loadprobe.stop()
    runner = CliRunner()
    analysed = runner.invoke(main, ["analyze", str(data), "-o", str(report)])
    assert analysed.exit_code == 0, analysed.output
    recommended = runner.invoke(main, ["recommend", str(report / "portrait.json"), "-o", str(plan_dir / "pipeline.yaml")])
    assert recommended.exit_code == 0, recommended.output  # whatever the names, a valid plan is written
    written = yaml.safe_load((plan_dir / "pipeline.yaml").read_text())
    assert is_name(written["service"])
    assert sorted(stage.get("recorded", stage["name"]) for stage in written["stages"]) == sorted(stages)
    assert all(is_name(stage["name"]) for stage in written["stages"])
    validated = runner.invoke(main, ["validate", str(plan_dir / "pipeline.yaml")])
    assert validated.exit_code == 0, validated.output
    for target, out in (("triton", triton), ("ray-serve", ray)):
        exported = runner.invoke(main, ["export", str(plan_dir / "pipeline.yaml"), "--to", target, "-o", str(out)])
        assert exported.exit_code == 0, exported.output
    simulated = runner.invoke(main, ["simulate", str(plan_dir / "pipeline.yaml"), "--trace", str(data),
                                     "--service-times", str(data), "-o", str(work / "sim")])
    assert simulated.exit_code == 0, simulated.output
    samplers = from_recording(pipeline.load(plan_dir / "pipeline.yaml"), data)  # found by the recorded names
    assert all(sampler.how.startswith("measured") for (stage, _), sampler in samplers.items()
               if stage != HOST_STAGE), samplers  # the host's own work comes from the plan's host: section
    escaped = _outside(root, [data, report, plan_dir, triton, ray, work / "sim"], before)
    assert escaped == [], escaped
    assert not Path("/tmp", ESCAPE).exists()
    assert not any(re.search("pwned", p.name) for p in Path.cwd().iterdir())
