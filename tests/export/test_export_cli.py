"""``loadprobe export``: what it writes and prints, what it refuses (exit 2, one line), and what it leaves alone."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from loadprobe.cli import main

from ..conftest import run_python
from .plans import PLAIN, VISION


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_line_error(result, *needles):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("loadprobe: error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("target", ["triton", "ray-serve"])
def test_export_writes_the_folder_and_says_what_it_lost(tmp_path, target):
    out = tmp_path / "out"
    result = cli("export", VISION, "--to", target, "-o", out, "--executor", "decode=svc.steps:decode",
                 "--no-import-check")
    assert result.exit_code == 0, result.output
    assert f"in {out}" in result.output and "README.md" in result.output
    assert (out / "README.md").is_file()
    lost = "NPU engines (backbone); fallback (backbone)" if target == "triton" else "shedding by priority"
    assert "not carried over" in result.output and lost in result.output
    missing = "preprocess, backbone, postprocess" if target == "triton" else \
        "preprocess, backbone, backbone@gpu0, postprocess"
    assert f"no executor for {missing}: those refuse to start" in result.output


@pytest.mark.parametrize("target", ["triton", "ray-serve"])
def test_a_folder_that_is_not_empty_is_refused_unless_force(tmp_path, target):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("the user's")
    _one_line_error(cli("export", VISION, "--to", target, "-o", out), str(out), "not empty", "mine.txt", "--force")
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    assert cli("export", VISION, "--to", target, "-o", out, "--force").exit_code == 0
    assert (out / "mine.txt").read_text() == "the user's" and (out / "README.md").is_file()
    (out / "README.md").write_text("edited")
    assert cli("export", VISION, "--to", target, "-o", out, "--force").exit_code == 0  # replaced, as asked
    assert (out / "README.md").read_text() != "edited"
    file = tmp_path / "a-file"
    file.write_text("x")
    _one_line_error(cli("export", VISION, "--to", target, "-o", file, "--force"), "not a folder")


def test_a_bad_plan_is_one_line_and_exit_2_with_nothing_written(tmp_path):
    bad = tmp_path / "pipeline.yaml"
    bad.write_text(PLAIN.replace("timeout_ms: 100", "timeout_ms: -1").replace("max_queue: 32", "max_queue: -2"))
    _one_line_error(cli("export", bad, "--to", "triton", "-o", tmp_path / "out"), f"{bad}:4:",
                    "engines.cpu.max_queue", "not a valid plan, nothing exported",
                    f"1 more problem: loadprobe validate {bad}")
    assert not (tmp_path / "out").exists()
    _one_line_error(cli("export", tmp_path / "missing.yaml", "--to", "triton", "-o", tmp_path / "out"), "missing.yaml")


@pytest.mark.parametrize("spec, needle", [
    ("nosuch=svc:fn", "the plan has no stage 'nosuch'"),
    ("work@gpu9=svc:fn", "stage 'work' runs on cpu, not 'gpu9'"),
    ("work=not a path", "is not an import path MODULE:NAME"),
    ("svc:fn", "no STAGE= before the import path"),
])
def test_a_bad_executor_is_refused_naming_it(tmp_path, spec, needle):
    plan = tmp_path / "pipeline.yaml"
    plan.write_text(PLAIN)
    _one_line_error(cli("export", plan, "--to", "ray-serve", "-o", tmp_path / "out", "--executor", spec), needle)
    assert not (tmp_path / "out").exists()


def test_strict_and_num_cpus_are_checked(tmp_path):
    _one_line_error(cli("export", VISION, "--to", "triton", "-o", tmp_path / "a", "--strict"),
                    "triton cannot express NPU engines (backbone)", "nothing written")
    assert not (tmp_path / "a").exists()
    _one_line_error(cli("export", VISION, "--to", "triton", "-o", tmp_path / "b", "--num-cpus", "1"),
                    "only for --to ray-serve")
    _one_line_error(cli("export", VISION, "--to", "ray-serve", "-o", tmp_path / "c", "--num-cpus", "0"),
                    "num_cpus must be more than 0")


def test_an_executor_for_one_engine_wins_over_the_stages(tmp_path):
    from loadprobe.export import export

    done = export(VISION, "ray-serve", tmp_path / "out", executors={"backbone": "svc:int8", "backbone@gpu0": "svc:fp32"},
                  check_imports=False)
    module = next(p for p in done.files if p.suffix == ".py").read_text()
    assert "super().__init__('backbone', 'npu0', 'svc:int8')" in module
    assert "super().__init__('backbone', 'gpu0', 'svc:fp32')" in module
    assert "backbone" not in done.missing and "backbone@gpu0" not in done.missing


def test_help_imports_no_exporter():
    done = run_python("import json, sys\nfrom click.testing import CliRunner\nfrom loadprobe.cli import main\n"
                      "CliRunner().invoke(main, ['export', '--help'])\n"
                      "print(json.dumps(sorted(m for m in sys.modules if m.startswith('loadprobe.export') "
                      "or m.split('.')[0] in ('ray', 'tritonclient', 'yaml'))))")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize("spec, needle", [
    ("decode=nosuchmodule:fn", "executor nosuchmodule:fn: cannot import it (ModuleNotFoundError: No module named "
                               "'nosuchmodule')"),
    ("decode=json:no_such_function", "executor json:no_such_function: cannot import it (json has no no_such_function)"),
    ("decode=json.decoder:NaN", "executor json.decoder:NaN: float is not callable"),
])
def test_an_executor_that_does_not_import_is_refused_before_anything_is_written(tmp_path, spec, needle):
    out = tmp_path / "out"
    _one_line_error(cli("export", VISION, "--to", "triton", "-o", out, "--executor", spec), needle)
    assert not out.exists()
    done = cli("export", VISION, "--to", "triton", "-o", out, "--executor", spec, "--no-import-check")
    assert done.exit_code == 0, done.output  # the service's code may live elsewhere: the check can be skipped
    assert cli("export", VISION, "--to", "triton", "-o", tmp_path / "real", "--executor",
               "decode=json:dumps").exit_code == 0


def test_the_import_check_finds_the_service_in_the_current_folder_and_leaves_sys_path_as_it_was(tmp_path,
                                                                                               monkeypatch):
    import sys

    from loadprobe.export import export

    (tmp_path / "mysteps_for_export.py").write_text("def decode(x):\n    return x\n")
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    done = export(VISION, "triton", tmp_path / "out", executors=["decode=mysteps_for_export:decode"])
    assert "decode" not in done.missing and sys.path == before


def test_the_command_offers_exactly_the_targets_export_writes():
    from loadprobe.cli import export as command
    from loadprobe.export import TARGETS

    assert command.TARGETS == TARGETS  # a copy, so that --help imports nothing more
