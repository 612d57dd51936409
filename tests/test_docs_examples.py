"""The README's and docs' command examples, run as written against a real sample server.

Each example is read from the Markdown file itself, so a doc that drifts from the product fails
here. Only the port (a free one) and long durations (a few seconds instead of a minute) change.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.request import urlopen

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("onnxruntime")

from .conftest import REPO  # noqa: E402


def bash_blocks(doc: str, heading: str) -> list[str]:
    """The command lines of the ```bash blocks under ``heading`` in ``doc``."""
    text = (REPO / doc).read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        lines += [line for line in block.splitlines() if line.strip()]
    return lines


def as_run_here(line: str, port: int) -> str:
    line = line.replace("127.0.0.1:8000", f"127.0.0.1:{port}").replace("--port 8000", f"--port {port}")
    return re.sub(r"--duration \d+", "--duration 2", line)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory):
    port = free_port()
    cwd = tmp_path_factory.mktemp("vision")
    env = dict(os.environ, LOADPROBE_CACHE=str(cwd / "cache"))
    env.pop("LOADPROBE_DIR", None)
    server = subprocess.Popen([sys.executable, "-m", "loadprobe.samples.vision.serve", "--port", str(port)],
                              cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                break
        except OSError:
            assert server.poll() is None, "the vision sample exited before serving"
            time.sleep(0.2)
    yield port, cwd
    server.terminate()
    server.wait(30)


def run_lines(lines: list[str], port: int, cwd: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)  # python3 and loadprobe of this environment
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    env.pop("LOADPROBE_DIR", None)
    for line in lines:
        command = as_run_here(line, port).replace("python3 ", f"{sys.executable} ", 1)
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"


@pytest.mark.timeout(400)
def test_the_readmes_load_section_records_the_server_it_loads_and_analyze_reads_it(vision_server, tmp_path):
    """The section is one shell session: the sample started under loadprobe record, loaded twice, stopped; its
    data/ is what the next section's ``loadprobe analyze data/`` reads."""
    from .conftest import spans_in

    _, models = vision_server  # the sample's models, built once by the fixture (LOADPROBE_CACHE)
    port = free_port()
    lines = bash_blocks("README.md", "## Load it")
    assert lines[0].startswith("loadprobe record -o data/ -- python3 -m loadprobe.samples.vision.serve")
    analyze = bash_blocks("README.md", "## Analyse it")[0]
    assert analyze.startswith("loadprobe analyze data/")
    script = "\n".join(as_run_here(line, port).replace("python3 ", f"{sys.executable} ", 1) for line in lines)
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
               LOADPROBE_CACHE=str(models / "cache"))
    env.pop("LOADPROBE_DIR", None)
    shell = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = shell.communicate(timeout=300)
    finally:  # whatever failed, no server is left running
        try:
            os.killpg(shell.pid, 9)
        except ProcessLookupError:
            pass
    assert shell.returncode == 0, out
    served = [r for r in spans_in(tmp_path / "data") if r["stage"] == "POST /inspect"]
    sent = sum(1 for r in spans_in(tmp_path / "client") if r["parent_id"] is None)
    assert sent and len(served) == 2 * sent, out  # every request of both loads (the replay resends client/'s)
    run_lines([analyze], port, tmp_path)
    assert (tmp_path / "loadprobe-report" / "portrait.json").is_file()


def test_the_vision_samples_commands_run_as_documented(vision_server):
    port, cwd = vision_server
    lines = [line for line in bash_blocks("docs/samples.md", "## `samples/vision`") if ".serve" not in line]
    assert any(line.startswith("curl") for line in lines)
    (cwd / "samples-doc").mkdir()
    run_lines(lines, port, cwd / "samples-doc")


def test_the_ecosystem_docs_otlp_file_example_runs_as_written(tmp_path):
    """docs/ecosystem.md's Python example: SDK spans written as OTLP/JSON, imported, analysed."""
    pytest.importorskip("opentelemetry.exporter.otlp.json.common")
    text = (REPO / "docs" / "ecosystem.md").read_text(encoding="utf-8")
    example = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    out = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "50" and "{}" in out.stdout  # 50 requests, nothing skipped
    assert list((tmp_path / "otel-data").rglob("spans-*.parquet"))
