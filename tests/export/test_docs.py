"""docs/export.md's export commands, run as written (the plan's path made absolute, the folder a temporary one)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from ..conftest import REPO


def _commands(heading: str) -> list[str]:
    section = (REPO / "docs" / "export.md").read_text(encoding="utf-8").split(f"\n## {heading}\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    return [line for block in re.findall(r"```bash\n(.*?)```", section, re.S) for line in block.splitlines()
            if line.startswith("loadprobe export ")]


@pytest.mark.parametrize("heading, folder", [("Triton", "triton-repo"), ("Ray Serve", "serve")])
def test_the_documented_export_runs_as_written(tmp_path, heading, folder):
    (command,) = _commands(heading)
    args = [str(REPO / a) if a.startswith("samples/") else a for a in shlex.split(command)[1:]]
    # run from the service's own folder, as the docs say: export imports each executor it names
    names = sorted({a.rpartition(":")[2] for a in args if a.startswith(("decode=", "preprocess=", "backbone",
                                                                          "postprocess="))})
    (tmp_path / "myservice").mkdir()
    (tmp_path / "myservice" / "__init__.py").write_text("")
    (tmp_path / "myservice" / "steps.py").write_text("".join(f"def {n}(x):\n    return x\n" for n in names))
    done = subprocess.run([sys.executable, "-m", "loadprobe", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / folder / "README.md").is_file()
    assert "no executor" not in done.stderr  # the example names every stage's
