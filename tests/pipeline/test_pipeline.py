"""pipeline.yaml v1: round trips, every kind of bad input located by line, column and field, and the CLI."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib

import pytest
from click.testing import CliRunner

from loadprobe import pipeline
from loadprobe._errors import LoadprobeError
from loadprobe.catalog import load_catalog
from loadprobe.cli import main
from loadprobe.pipeline.config import (
    BatchConfig,
    EngineConfig,
    FallbackConfig,
    FallbackWhen,
    PipelineConfig,
    StageConfig,
)
from loadprobe.pipeline.problems import PipelineError

from ..conftest import REPO

DOC = REPO / "docs" / "pipeline.md"

# Lines: 1 version, 4-6 engines, 8-10 stage preprocess, 11-16 stage backbone.
BASE = """\
version: 1
service: vision
engines:
  cpu: {kind: cpu, max_concurrency: 8, max_queue: 256}
  npu0: {kind: npu, device: ascend-310p, max_concurrency: 2, max_queue: 64}
  gpu0: {kind: gpu, device: nvidia-l4, max_concurrency: 4, max_queue: 128}
stages:
  - name: preprocess
    engine: cpu
    timeout_ms: 30
  - name: backbone
    engine: npu0
    precision: int8
    batch: {size: 4, max_wait_ms: 8}
    timeout_ms: 120
    fallback: {engine: gpu0, when: {queue_len_over: 48}, max_ratio: 0.3}
"""


def doc_example() -> str:
    return re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.S).group(1)


def at(text: str, needle: str) -> tuple[int, int]:
    """1-based line and column of the first ``needle`` in ``text``."""
    index = text.index(needle)
    return text.count("\n", 0, index) + 1, index - text.rfind("\n", 0, index)


def only_problem(text: str) -> pipeline.Problem:
    problems = pipeline.validate_text(text, "pipeline.yaml")
    assert len(problems) == 1, problems
    return problems[0]


# --- Valid plans ---------------------------------------------------------------------------------------------

def test_the_documented_example_validates_and_round_trips():
    config = pipeline.loads(doc_example(), "docs/pipeline.md")
    assert [s.name for s in config.stages] == ["preprocess", "backbone", "head"]
    backbone = config.stages[1]
    assert backbone.input.shape == (4, 3, 640, 640) and backbone.keep_fp16 == ("conv3",)
    assert backbone.fallback == FallbackConfig(engine="gpu0", when=FallbackWhen(queue_len_over=48), max_ratio=0.3,
                                               otherwise="reject")
    assert backbone.why["timeout_ms"] == "3x the recorded p99 of 38 ms"
    assert config.stages[2].input.shape == (None, 256)
    assert config.engines["gpu0"].count == 2 and config.engines["cpu"].count == 1
    assert config.routing.canary.weight == 0.05 and config.why["scenario"].startswith("online")

    text = pipeline.dump(config)
    assert pipeline.loads(text) == config
    assert pipeline.dump(pipeline.loads(text)) == text
    assert text.index("version:") < text.index("service:") < text.index("slo:") < text.index("engines:") \
        < text.index("stages:") < text.index("routing:")
    assert "keep_fp16: [conv3]" in text and "shape: [4, 3, 640, 640]" in text  # short lists stay inline


def test_defaults_fill_in_and_a_plan_built_in_code_round_trips(tmp_path):
    config = pipeline.loads(BASE)
    assert config.engines["cpu"] == EngineConfig(kind="cpu", max_concurrency=8, max_queue=256)
    assert config.stages[0].batch is None and config.stages[0].why == {} and config.slo is None
    assert config.stages[1].fallback.otherwise == "reject"

    built = PipelineConfig(
        service="tricky", why={"scenario": "line one\nline two", "cost": "yes", "note": "a: b # c"},
        engines={"cpu": EngineConfig(kind="cpu", max_concurrency=1, max_queue=0, why="  padded ")},
        stages=[StageConfig(name="s", engine="cpu", timeout_ms=0.5, keep_fp16=[], batch=BatchConfig(size=2),
                            why={"engine": "123", "batch": "null"})])
    assert isinstance(built.stages, tuple)
    text = pipeline.dump(built)
    assert pipeline.loads(text) == built and pipeline.dump(pipeline.loads(text)) == text
    assert "&" not in text and "*" not in text  # no anchors, which load() would refuse


def test_the_dataclasses_mirror_the_schema():
    defs = pipeline.schema()["$defs"]
    stage = defs["stage"]["properties"]
    classes = {
        PipelineConfig: pipeline.schema(), pipeline.SLOConfig: defs["slo"], EngineConfig: defs["engine"],
        StageConfig: defs["stage"], pipeline.InputConfig: stage["input"], BatchConfig: stage["batch"],
        pipeline.RetryConfig: stage["retry"], FallbackConfig: stage["fallback"],
        FallbackWhen: stage["fallback"]["properties"]["when"], pipeline.BreakerConfig: stage["breaker"],
        pipeline.ServiceTimeConfig: defs["service_time"], pipeline.RoutingConfig: defs["routing"],
        pipeline.HostConfig: pipeline.schema()["properties"]["host"],
        pipeline.RetryBudgetConfig: defs["routing"]["properties"]["retry"],
        pipeline.ShedConfig: defs["routing"]["properties"]["shed"],
        pipeline.CanaryConfig: defs["routing"]["properties"]["canary"],
    }
    for cls, schema in classes.items():
        names = [f.name for f in dataclasses.fields(cls)]
        assert names == list(schema["properties"]), cls  # dump() writes fields in this order
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        assert sorted(required) == sorted(set(schema.get("required", [])) - {"version"}), cls


def test_the_schema_is_valid_closed_and_bounds_every_number():
    from jsonschema import Draft202012Validator

    schema = pipeline.schema()
    Draft202012Validator.check_schema(schema)
    defs = schema["$defs"]

    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                node = {**defs[node["$ref"].rsplit("/", 1)[1]], **node}
            types = node.get("type")
            types = [types] if isinstance(types, str) else types or []
            if "object" in types:
                assert "additionalProperties" in node, node  # false, or the schema of a map's values
            if {"integer", "number"} & set(types):
                assert "maximum" in node or "const" in node, node
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)


def test_the_schema_is_package_data_and_every_field_is_documented():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "pipeline.schema.json" in config["tool"]["setuptools"]["package-data"]["loadprobe"]
    text = DOC.read_text()
    fields = set()

    def walk(node):
        if isinstance(node, dict):
            fields.update(node.get("properties", {}))
            for value in node.values():
                walk(value)

    walk(pipeline.schema())
    assert [f for f in sorted(fields) if f"`{f}`" not in text] == []


# --- Problems, each at its line, column and field ------------------------------------------------------------

def test_the_documented_message_format():
    bad = BASE.replace("size: 4", "size: 0")
    problem = only_problem(bad)
    assert (problem.line, problem.column) == (14, 19)
    assert str(problem) == "pipeline.yaml:14:19: stages[1].batch.size: 0 is less than the minimum of 1 " \
                           "(allowed: 1 to 65536)"


CASES = [
    # (what, replace this, with this, problem at the first occurrence of, field path, part of the message)
    ("wrong type", "timeout_ms: 30", "timeout_ms: fast", "fast", "stages[0].timeout_ms",
     "expected a number, got 'fast'"),
    ("wrong type: list for text", "service: vision", "service: [vision]", "[vision]", "service",
     "expected text, got a list"),
    ("boolean is not a count", "max_concurrency: 8", "max_concurrency: true", "true", "engines.cpu.max_concurrency",
     "expected a whole number, got true"),
    ("2.0 is not a whole number", "max_queue: 64", "max_queue: 64.0", "64.0", "engines.npu0.max_queue",
     "expected a whole number, got 64.0"),
    ("exponent without a dot is text in YAML", "timeout_ms: 120", "timeout_ms: 1e2", "1e2", "stages[1].timeout_ms",
     "in YAML write 1.0e+2"),
    ("unknown key at the top", "service: vision\n", "service: vision\ncolour: red\n", "colour", "colour",
     "unknown key; expected one of: version, service, slo, engines, stages, routing, host, interpreter, calibration, llm, why"),
    ("unknown key nested", "max_wait_ms: 8}", "max_wait_ms: 8, wait: 2}", "wait: 2", "stages[1].batch.wait",
     "unknown key; expected one of: size, max_wait_ms"),
    ("unknown key in an engine", "kind: cpu,", "kind: cpu, threads: 4,", "threads", "engines.cpu.threads",
     "unknown key"),
    ("cores on a gpu", "kind: gpu,", "kind: gpu, cores: 4,", "4, device", "engines.gpu0.cores",
     "only a cpu engine has cores"),
    ("misspelt why key", "    timeout_ms: 30\n", "    timeout_ms: 30\n    why: {timeout: x}\n", "timeout:",
     "stages[0].why.timeout", "is not allowed as a key here; one of name, engine"),
    ("missing required field", "    timeout_ms: 30\n", "", "name: preprocess", "stages[0].timeout_ms",
     "required, but missing"),
    ("unknown enum value", "kind: npu", "kind: tpu", "tpu", "engines.npu0.kind", "'tpu' is not one of: cpu, gpu, npu"),
    ("wrong version", "version: 1", "version: 2", "2", "version", "2 is not supported; expected 1"),
    ("bad engine name", "  gpu0:", "  0gpu: {kind: gpu, max_concurrency: 1, max_queue: 0}\n  gpu0:", "0gpu", 'engines["0gpu"]', "a name starts with a letter"),
    ("unknown engine", "engine: cpu", "engine: cpu9", "cpu9", "stages[0].engine",
     "unknown engine 'cpu9'; the engines are: cpu, npu0, gpu0"),
    ("unknown fallback engine", "engine: gpu0,", "engine: gpu1,", "gpu1", "stages[1].fallback.engine",
     "unknown engine 'gpu1'"),
    ("duplicate stage names", "name: backbone", "name: preprocess", "preprocess\n    engine: npu0",
     "stages[1].name", "duplicate stage name 'preprocess'; stages[0] (line 8) has it too"),
    ("fallback to itself", "engine: gpu0,", "engine: npu0,", "npu0, when", "stages[1].fallback.engine",
     "falls back to its own engine 'npu0', a fallback cycle"),
    ("huge timeout", "timeout_ms: 120", "timeout_ms: 99999999999999999999", "9999", "stages[1].timeout_ms",
     "is greater than the maximum of 3600000 (allowed: more than 0 to 3600000)"),
    ("huge batch", "size: 4", "size: 1000000", "1000000", "stages[1].batch.size",
     "1000000 is greater than the maximum of 65536 (allowed: 1 to 65536)"),
    ("huge queue", "max_queue: 256", "max_queue: 10000001", "10000001", "engines.cpu.max_queue",
     "greater than the maximum of 10000000"),
    ("huge count", "kind: cpu,", "kind: cpu, count: 5000,", "5000", "engines.cpu.count",
     "greater than the maximum of 4096"),
    ("infinite ratio", "max_ratio: 0.3", "max_ratio: .inf", ".inf", "stages[1].fallback.max_ratio",
     "inf is greater than the maximum of 1"),
    ("NaN", "max_wait_ms: 8", "max_wait_ms: .nan", ".nan", "stages[1].batch.max_wait_ms", ".nan is not a number"),
    ("negative timeout", "timeout_ms: 30", "timeout_ms: -5", "-5", "stages[0].timeout_ms",
     "-5 is not greater than 0 (allowed: more than 0 to 3600000)"),
    ("zero timeout", "timeout_ms: 30", "timeout_ms: 0", "0\n", "stages[0].timeout_ms", "0 is not greater than 0"),
    ("ratio above 1", "max_ratio: 0.3", "max_ratio: 1.5", "1.5", "stages[1].fallback.max_ratio",
     "1.5 is greater than the maximum of 1 (allowed: 0 to 1)"),
    ("keep_fp16 without int8", "    engine: cpu\n", "    engine: cpu\n    keep_fp16: [conv3]\n", "[conv3]",
     "stages[0].keep_fp16", "only applies with precision: int8, and the stage has no precision"),
    ("keep_fp16 with fp16", "precision: int8", "precision: fp16\n    keep_fp16: [conv3]", "[conv3]",
     "stages[1].keep_fp16", "the stage has precision: fp16"),
    ("unknown catalog device", "device: nvidia-l4", "device: nvidia-l5", "nvidia-l5", "engines.gpu0.device",
     "unknown device 'nvidia-l5' in the hardware catalog; did you mean nvidia-l4"),
    ("device of another kind", "device: ascend-310p", "device: nvidia-t4", "nvidia-t4", "engines.npu0.device",
     "'nvidia-t4' is a gpu, but the engine's kind is npu; npu devices in the catalog: ascend-310p"),
    ("duplicate key", "    precision: int8\n", "    precision: int8\n    precision: fp16\n", "precision: fp16",
     "stages[1].precision", "duplicate key 'precision' (first on line 13)"),
    ("empty stages", "stages:\n", "stages: []\nx:\n", "[]", "stages", "empty; at least 1 needed"),
]


@pytest.mark.parametrize("what, old, new, needle, path, message", CASES, ids=[c[0] for c in CASES])
def test_each_problem_is_reported_at_its_line_column_and_field(what, old, new, needle, path, message):
    assert old in BASE
    bad = BASE.replace(old, new, 1)
    if what == "empty stages":  # the old stage list must go too
        bad = bad[:bad.index("x:\n")]
    problem = only_problem(bad)
    assert (problem.line, problem.column) == at(bad, needle)
    assert problem.path == path
    assert message in problem.message
    assert problem.source == "pipeline.yaml"


def test_engines_may_back_each_other_up_through_different_stages():
    # the documented one-hop rule: npu0's stage -> gpu0 and gpu0's stage -> npu0 is not a cycle
    mutual = BASE + "  - name: head\n    engine: gpu0\n    timeout_ms: 80\n    fallback: {engine: npu0}\n"
    assert pipeline.validate_text(mutual) == []


def test_a_device_from_an_extra_catalog_file(tmp_path):
    extra = tmp_path / "site.json"
    extra.write_text(json.dumps({"version": "1.0", "devices": {"acme-npu": {
        "kind": "npu", "vendor": "Acme", "name": "Acme NPU", "peak_flops": {}, "memory_bandwidth_bytes_per_s": None,
        "memory_bytes": None, "tdp_w": None, "price_usd": None, "dynamic_shapes": "poor", "int8": True,
        "sources": {}, "aliases": []}}}))
    text = BASE.replace("device: ascend-310p", "device: acme-npu")
    assert "unknown device 'acme-npu'" in only_problem(text).message
    assert pipeline.validate_text(text, catalog=load_catalog(extra)) == []


def test_every_problem_in_a_file_is_reported_in_order():
    bad = BASE.replace("size: 4", "size: 0").replace("kind: cpu,", "kind: cpu, x: 1,").replace("engine: cpu", "engine: c")
    problems = pipeline.validate_text(bad, "p.yaml")
    assert [p.path for p in problems] == ["engines.cpu.x", "stages[0].engine", "stages[1].batch.size"]
    with pytest.raises(PipelineError) as caught:
        pipeline.loads(bad, "p.yaml")
    lines = str(caught.value).splitlines()
    assert lines[0] == "p.yaml: 3 problems; not a valid pipeline.yaml v1 (fields: docs/pipeline.md)"
    assert lines[1:] == [str(p) for p in problems]
    assert re.fullmatch(r"p\.yaml:4:\d+: engines\.cpu\.x: unknown key; .*", lines[1])
    assert isinstance(caught.value, LoadprobeError) and caught.value.problems == problems


# --- Hostile and broken YAML ---------------------------------------------------------------------------------

def test_a_python_tag_is_refused_and_never_runs(tmp_path):
    target = tmp_path / "pwned"
    text = f'version: 1\nservice: !!python/object/apply:os.mkdir ["{target}"]\n'
    problem = only_problem(text)
    assert (problem.line, problem.column) == (2, 10)
    assert "the YAML tag !!python/object/apply:os.mkdir is not allowed" in problem.message
    with pytest.raises(PipelineError):
        pipeline.loads(text)
    assert not target.exists()
    assert "!!python/object/apply:os.system is not allowed" in only_problem(
        'version: !!python/object/apply:os.system ["echo hi"]\n').message


@pytest.mark.parametrize("text", ["x: !!binary aGk=\n", "x: !!set {a: null}\n", "x: !custom 1\n",
                                  "x: !!python/name:os.system\n"])
def test_only_plain_tags_are_accepted(text):
    assert "is not allowed; pipeline.yaml holds plain values only" in only_problem(text).message


def test_the_billion_laughs_bomb_is_refused_at_its_first_anchor():
    bomb = 'version: 1\na: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for letter, prev in zip("bcdefghi", "abcdefgh"):
        bomb += f"{letter}: &{letter} [{', '.join(['*' + prev] * 9)}]\n"
    problem = only_problem(bomb)
    # Line 2, the first anchor: reading stopped there, before any alias was reached, so nothing was expanded.
    assert (problem.line, problem.column) == (2, 4)
    assert "anchors and aliases (&name, *name) are not allowed" in problem.message


def test_an_alias_alone_is_refused():
    assert (only_problem("version: 1\nservice: *x\n").line, "aliases") == (2, "aliases")


@pytest.mark.parametrize("text, line_column, message", [
    ("version: 1\n---\nversion: 1\n", (2, 1), "a second YAML document starts here"),
    ("", (1, 1), "the file is empty"),
    ("# only a comment\n\n", (1, 1), "the file is empty"),
    ("---\n...\n", (1, 1), "the file is empty"),
    ("- version: 1\n", (1, 1), "expected a mapping of 'key: value' lines at the top level, got a list"),
    ("just text\n", (1, 1), "got the value 'just text'"),
    ("version: 1\nservice: [a\n", (3, 1), "not valid YAML"),
    ("version: 1\nservice: \"a\x07\"\n", (2, 12), "the control character '\\x07' is not allowed"),
    ("? [a, b]\n: 1\n", (1, 3), "a key must be plain text"),
    ("x: " + "[" * 40 + "]" * 40 + "\n", (1, 35), "nested deeper than 32 levels"),
    ("version: " + "9" * 5000 + "\n", (1, 10), "cannot be read as !!int"),
])
def test_unreadable_documents_give_one_located_problem(text, line_column, message):
    problem = only_problem(text)
    assert (problem.line, problem.column) == line_column and problem.path == ""
    assert message in problem.message


def test_size_and_value_count_are_capped(tmp_path, monkeypatch):
    big = "service: x\n" + "# padding\n" * (pipeline.MAX_BYTES // 10)
    assert "larger than 1 MiB" in only_problem(big).message
    path = tmp_path / "big.yaml"
    path.write_text(big)
    with pytest.raises(PipelineError, match="larger than 1 MiB"):
        pipeline.load(path)
    assert len("x: [" + "1, " * pipeline.MAX_NODES + "1]\n") < pipeline.MAX_BYTES  # so the cap matters
    from loadprobe.pipeline import safe_yaml

    monkeypatch.setattr(safe_yaml, "MAX_NODES", 1000)  # the same code path, a thousand times faster
    many = "x: [" + "1, " * 1000 + "1]\n"
    problem = only_problem(many)
    # value 1,001 (after the mapping, its key and the list) is the 998th item: column 5 + 3 x 997
    assert "more than 1,000 values" in problem.message and (problem.line, problem.column) == (1, 2996)


def test_files_that_are_not_utf8_or_missing(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"version: 1\nservice: caf\xe9\n")
    with pytest.raises(PipelineError) as caught:
        pipeline.load(path)
    assert (caught.value.problems[0].line, caught.value.problems[0].column) == (2, 13)
    with pytest.raises(LoadprobeError, match=r"missing\.yaml: cannot read the pipeline file"):
        pipeline.load(tmp_path / "missing.yaml")


def test_keys_are_taken_as_written():
    # YAML 1.1 reads a bare "on" as true; as a key it is the name "on"
    config = pipeline.loads(BASE + "why: {on: call, yes: sure}\n")
    assert config.why == {"on": "call", "yes": "sure"}
    assert pipeline.loads(BASE.replace("service: vision", "service: v2024-01-01")).service == "v2024-01-01"


# --- Files -----------------------------------------------------------------------------------------------------

def test_load_reads_paths_and_text(tmp_path):
    path = tmp_path / "pipeline.yaml"
    path.write_text(BASE)
    assert pipeline.load(path) == pipeline.load(str(path)) == pipeline.load(BASE) == pipeline.loads(BASE)
    path.write_text(BASE.replace("size: 4", "size: 0"))
    with pytest.raises(PipelineError, match=rf"^{re.escape(str(path))}: 1 problem;.*\n{re.escape(str(path))}:14:19: "):
        pipeline.load(path)


def test_save_writes_atomically_and_refuses_to_overwrite(tmp_path):
    config = pipeline.loads(doc_example())
    path = tmp_path / "pipeline.yaml"
    assert pipeline.save(config, path) == path
    assert pipeline.load(path) == config
    with pytest.raises(LoadprobeError, match=r"pipeline\.yaml already exists; use --force"):
        pipeline.save(config, path)
    changed = dataclasses.replace(config, service="other")
    pipeline.save(changed, path, overwrite=True)
    assert pipeline.load(path).service == "other"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipeline.yaml"]  # no temporary file left


def test_save_refuses_an_invalid_plan(tmp_path):
    config = pipeline.loads(BASE)
    broken = dataclasses.replace(config, stages=(*config.stages, dataclasses.replace(config.stages[0], engine="x")))
    with pytest.raises(PipelineError, match="unknown engine 'x'"):
        pipeline.save(broken, tmp_path / "p.yaml")
    assert not (tmp_path / "p.yaml").exists()
    with pytest.raises(LoadprobeError, match="cannot write"):
        pipeline.save(config, tmp_path / "no" / "such" / "dir.yaml")


# --- loadprobe validate ---------------------------------------------------------------------------------------

def invoke(*args):
    return CliRunner().invoke(main, list(args))


def test_validate_a_valid_file(tmp_path):
    path = tmp_path / "pipeline.yaml"
    path.write_text(doc_example())
    result = invoke("validate", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{path}: valid (3 stages, 3 engines)\n"


def test_validate_prints_one_problem_per_line_and_exits_2(tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(BASE)
    bad.write_text(BASE.replace("size: 4", "size: 0").replace("engine: cpu", "engine: c"))
    result = invoke("validate", str(good), str(bad), str(tmp_path / "missing.yaml"))
    assert result.exit_code == 2
    assert result.stdout.splitlines() == [
        f"{good}: valid (2 stages, 3 engines)",
        f"{bad}:9:13: stages[0].engine: unknown engine 'c'; the engines are: cpu, npu0, gpu0",
        f"{bad}:14:19: stages[1].batch.size: 0 is less than the minimum of 1 (allowed: 1 to 65536)",
        f"{tmp_path / 'missing.yaml'}: cannot read the pipeline file (No such file or directory)",
    ]
    assert result.stderr == "loadprobe: error: 2 of 3 files not valid; pipeline.yaml fields: docs/pipeline.md\n"


def test_validate_schema_and_usage():
    result = invoke("validate", "--schema")
    assert result.exit_code == 0 and json.loads(result.stdout) == pipeline.schema()
    result = invoke("validate")
    assert result.exit_code == 2 and "give at least one FILE" in result.stderr


def test_the_package_gives_each_public_name_from_the_module_that_owns_it():
    """``loadprobe.pipeline`` was one module; its names now live in the modules that own them."""
    import importlib

    assert {"load", "loads", "save", "dump", "validate_text", "PipelineConfig", "PipelineError"} <= set(pipeline._OWNERS)
    for name, owner in pipeline._OWNERS.items():
        assert getattr(pipeline, name) is getattr(importlib.import_module(f"loadprobe.pipeline.{owner}"), name), name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pipeline.nope  # noqa: B018


def test_the_routing_window_is_a_file_field_the_router_uses():
    from loadprobe.route import Router

    text = """
version: 1
service: w
engines:
  cpu: {kind: cpu, max_concurrency: 1, max_queue: 4}
stages:
  - {name: work, engine: cpu, timeout_ms: 100}
routing:
  window_s: 30
"""
    config = pipeline.loads(text)
    assert config.window_s == 30
    assert pipeline.loads(text.replace("routing:\n  window_s: 30\n", "")).window_s == 10
    router = Router(config, {"work": {"cpu": lambda payload: payload}})
    assert router._engines["cpu"].window_s == 30
    assert Router(config, {"work": {"cpu": lambda payload: payload}}, window_s=5)._engines["cpu"].window_s == 5
    problems = pipeline.validate_text(text.replace("window_s: 30", "window_s: 0"))
    assert problems and "window_s" in str(problems[0])
