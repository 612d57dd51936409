"""The package list, the public surface and what ``import loadprobe`` costs."""

from __future__ import annotations

import json
import textwrap
import tomllib
from pathlib import Path

import pytest

import loadprobe

from .conftest import REPO, run_python


def test_package_list_matches_the_folders():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(config["packages"])
    roots = {"loadprobe": REPO / "loadprobe", **{k: REPO / v for k, v in config["package-dir"].items()}}
    found = set()
    for name, root in roots.items():
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root).parts
            found.add(".".join((name, *rel)))
    assert declared == found


def test_public_surface_is_pinned():
    assert loadprobe.__all__ == sorted(loadprobe.__all__)
    assert loadprobe.__all__ == [
        "LoadprobeError", "Portrait", "Recorder", "RecorderStats", "Span", "__version__", "analyze", "current", "flush",
        "portrait_frames", "probe", "read_samples", "read_spans", "receive_otlp", "recommend", "record_span", "request",
        "simulate", "start", "stop",
    ]
    for name in loadprobe.__all__:
        assert getattr(loadprobe, name) is not None


def test_import_and_recording_stay_light(tmp_path):
    code = textwrap.dedent(f"""
        import json, sys
        import loadprobe
        after_import = sorted(sys.modules)
        from loadprobe import probe
        @probe("x")
        def x():
            pass
        loadprobe.start({str(tmp_path)!r}, flush_interval_s=0.05)
        for _ in range(100):
            x()
        loadprobe.flush()
        loadprobe.stop()
        print(json.dumps({{"import": after_import, "recording": sorted(sys.modules)}}))
    """)
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout)
    heavy = {"pandas", "plotly", "jinja2", "duckdb", "polars", "torch"}
    assert not heavy & {m.split(".")[0] for m in modules["recording"]}
    # importing alone loads no third-party package at all
    assert not {"pyarrow", "psutil", "numpy", "click", "pynvml"} & {m.split(".")[0] for m in modules["import"]}


def test_instrumentation_and_reports_are_installed_under_loadprobe():
    import loadprobe.instrumentation
    import loadprobe.reports

    assert Path(loadprobe.instrumentation.__file__).parent.name == "instrumentation"
    assert Path(loadprobe.reports.__file__).parent.name == "reports"


def test_the_c_map_kernel_is_built_wherever_a_compiler_is():
    import shutil

    import pytest

    from loadprobe.analysis import kernels

    if not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler here: the install skips the optional kernel and analysis uses numpy")
    assert kernels.kernel_available(), kernels.unavailable_reason()


@pytest.mark.parametrize("old", ["loadprobe.tco", "loadprobe.constraints", "loadprobe.histogram", "loadprobe.importer"])
def test_a_module_that_moved_still_imports_under_its_old_name(old):
    # The modules that sat directly in loadprobe/ before the split by data-flow steps.
    from loadprobe._imports import MOVED

    code = (f"import importlib, warnings\nwarnings.simplefilter('error')\n"
            f"try:\n    importlib.import_module({old!r})\nexcept DeprecationWarning as w:\n    print(w)\n"
            f"warnings.simplefilter('ignore')\nold = importlib.import_module({old!r})\n"
            f"print(old is importlib.import_module({MOVED[old]!r}))")
    out = run_python(code).stdout.split("\n")
    assert out[0] == f"{old} is now {MOVED[old]}" and out[1] == "True", out
