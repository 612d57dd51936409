"""``loadprobe export --to vllm``: an LLM plan's pools as ``vllm serve`` scripts, their flags read back by vLLM's own
argument parser (where vLLM CPU is installed), each replica started on its own devices and port."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadprobe.catalog import load_catalog
from loadprobe.cli import main
from loadprobe.export import export
from loadprobe.pipeline.files import dump
from loadprobe.plan.constraints import Pricing, parse_engines
from loadprobe.plan.llm import plan_llm
from loadprobe.plan.llm_files import llm_pipeline
from loadprobe.simulator.llm.roofline import model_shape

from ..conftest import REPO
from ..support import vllm_cpu

pytestmark = pytest.mark.timeout(180)

STREAM = REPO / "samples" / "data" / "llm-stream" / "data"
DOCS = REPO / "docs"


def _plan(model: str, engines: str):
    """The recording planned for ``model`` on ``engines`` at 30 req/s, TTFT 2 s and TPOT 100 ms."""
    catalog = load_catalog()
    return plan_llm([str(STREAM)], model=model_shape(model), engines=parse_engines(engines, catalog), ttft_ms=2000,
                    tpot_ms=100, rate=30, pricing=Pricing(), catalog=catalog)


@pytest.fixture(scope="module")
def plans():
    """The colocated and the disaggregated plan of a 70B model on H100s (tensor-parallel) at 30 req/s."""
    plan = _plan("llama-3.1-70b", "gpu:nvidia-h100-sxm")
    colocated = next(o for o in plan.options if not o.disaggregated)
    apart = next(o for o in plan.options if o.disaggregated)
    return {"colocated": llm_pipeline(plan, colocated), "disaggregated": llm_pipeline(plan, apart)}


@pytest.fixture(scope="module")
def tpu_plan():
    """The colocated plan of an 8B model on TPU v6e (an NPU pool), as docs/recommend.md's worked example recommends."""
    plan = _plan("llama-3.1-8b", "npu:google-tpu-v6e")
    return llm_pipeline(plan, next(o for o in plan.options if not o.disaggregated))


def _flags(script: str) -> list[str]:
    """The arguments after ``vllm serve "$MODEL" --port ...`` in a written script, as bash would pass them."""
    tail = script.split('vllm serve "$MODEL"', 1)[1]
    words = subprocess.run(["bash", "-c", f"printf '%s\\n' {tail}"], capture_output=True, text=True, check=True,
                           env={**os.environ, "REPLICA": "0"}).stdout.splitlines()
    return [w for w in words if w][2:]  # past --port and its value


def _start(tmp_path, command: list[str], cwd, model: str) -> str:
    """What ``command`` (a script and its replica) hands ``vllm``: a stand-in on PATH prints its devices and args."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "vllm").write_text('#!/usr/bin/env bash\necho "devices=${CUDA_VISIBLE_DEVICES:-} args=$*"\n')
    (fake / "vllm").chmod(0o755)
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True, timeout=30,
                          env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "MODEL": model}).stdout


def _section(readme: str, title: str) -> list[str]:
    """The bullets of one section of a written README ("Not carried over", "Approximated")."""
    return [line for line in readme.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0].splitlines()
            if line.startswith("- ")]


@pytest.mark.parametrize("which", ["colocated", "disaggregated"])
def test_each_pool_is_a_script_whose_flags_are_the_plan_s(tmp_path, plans, which):
    config = plans[which]
    done = export(config, "vllm", tmp_path / "out")
    names = sorted(p.name for p in done.files)
    assert names == sorted(["README.md", *(f"serve-{n}.sh" for n in config.llm.pools)])
    readme = (tmp_path / "out" / "README.md").read_text()
    for name, pool in config.llm.pools.items():
        script = (tmp_path / "out" / f"serve-{name}.sh").read_text()
        subprocess.run(["bash", "-n", str(tmp_path / "out" / f"serve-{name}.sh")], check=True)
        flags = _flags(script)
        expected = {"--tensor-parallel-size": str(pool.tensor_parallel), "--max-num-seqs": str(pool.max_running),
                    "--max-num-batched-tokens": str(pool.token_budget),
                    "--num-gpu-blocks-override": str(pool.kv_tokens // 16)}
        for flag, value in expected.items():
            assert flags[flags.index(flag) + 1] == value
        assert pool.tensor_parallel == 2  # 141 GB of weights: two 80 GB devices per replica
        assert ("--kv-transfer-config" in flags) == (which == "disaggregated")
        assert f"| {name} | {pool.role} | {pool.replicas} |" in readme
        assert 'MODEL=${MODEL:-meta-llama/Llama-3.1-70B}' in script
    assert ("prefill/decode routing" in readme) == (which == "disaggregated")
    assert "device type" in readme and "targets" in readme
    assert "KV capacity" not in readme  # a GPU pool's is the flag above


def test_vllm_s_own_parser_reads_the_flags_as_the_plan_sets_them(tmp_path, plans):
    python = vllm_cpu.python()
    if python is None:
        pytest.skip(vllm_cpu.missing())
    config = plans["disaggregated"]
    export(config, "vllm", tmp_path / "out")
    flags = {name: _flags((tmp_path / "out" / f"serve-{name}.sh").read_text()) for name in config.llm.pools}
    code = ("import json, sys\nfrom vllm.engine.arg_utils import AsyncEngineArgs\n"
            "from vllm.utils.argparse_utils import FlexibleArgumentParser\nout = {}\n"
            "for name, flags in json.loads(sys.argv[1]).items():\n"
            "    a = AsyncEngineArgs.from_cli_args(AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())"
            ".parse_args(['--model', 'm', *flags]))\n"
            "    out[name] = [a.max_num_seqs, a.max_num_batched_tokens, a.enable_chunked_prefill, "
            "a.tensor_parallel_size, a.num_gpu_blocks_override, a.dtype, a.kv_transfer_config.kv_role]\n"
            "print(json.dumps(out))")
    done = subprocess.run([str(python), "-c", code, json.dumps(flags)], capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-2000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    for name, pool in config.llm.pools.items():
        assert read[name] == [pool.max_running, pool.token_budget, pool.chunked_prefill, pool.tensor_parallel,
                              pool.kv_tokens // 16, "bfloat16", "kv_both"]


def test_a_replica_starts_on_its_own_devices_and_port(tmp_path, plans):
    export(plans["colocated"], "vllm", tmp_path / "out")
    started = _start(tmp_path, ["bash", "serve-engine.sh", "2"], tmp_path / "out", "/models/mine")
    assert re.search(r"devices=4,5 args=serve /models/mine --port 8002 ", started)


def test_the_scripts_are_executable(tmp_path, plans):
    done = export(plans["disaggregated"], "vllm", tmp_path / "out")
    for path in done.files:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == 0o755 if path.suffix == ".sh" else not mode & 0o111, (path.name, oct(mode))
    # started as docs/export.md and the script's own usage line start it: ./serve-POOL.sh N
    started = _start(tmp_path, ["./serve-decode.sh", "0"], tmp_path / "out", "/models/mine")
    assert "args=serve /models/mine --port 8100 " in started


def test_the_documented_example_starts_a_script_the_documented_plan_writes(tmp_path, tpu_plan):
    """docs/export.md's vLLM example exports recommend.md's worked plan (colocated on TPU v6e) and starts its one
    script; run here on the same kind of plan, the folder a temporary one."""
    section = (DOCS / "export.md").read_text().split("\n## vLLM\n", 1)[1].split("\n## ", 1)[0]
    command, start = section.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    args = shlex.split(command)
    worked = (DOCS / "recommend.md").read_text().split("\n## LLM serving\n", 1)[1]
    assert command in worked.split("```bash\n", 1)[1].split("```", 1)[0]  # the same export of the same plan ...
    assert re.search(r"^recommended: colocated on google-tpu-v6e", worked, re.M)  # ... one pool, "engine"
    assignment, script, replica = shlex.split(start, comments=True)
    assert Path(script).parent == Path(args[args.index("-o") + 1])
    done = export(tpu_plan, "vllm", tmp_path / "out")
    assert Path(script).name in [p.name for p in done.files]
    started = _start(tmp_path, ["bash", Path(script).name, replica], tmp_path / "out", assignment.split("=", 1)[1])
    assert started.startswith(f"devices= args=serve /models/llama-3.1-8b --port {8000 + int(replica)} ")


def test_a_tpu_pool_s_kv_capacity_is_listed_as_not_carried_over(tmp_path, tpu_plan):
    done = export(tpu_plan, "vllm", tmp_path / "out")
    ((name, pool),) = tpu_plan.llm.pools.items()
    readme = (tmp_path / "out" / "README.md").read_text()
    assert f"| {pool.kv_tokens} | serve-{name}.sh |" in readme  # the plan sized it; the flag is for GPUs only
    assert "--num-gpu-blocks-override" not in _flags((tmp_path / "out" / f"serve-{name}.sh").read_text())
    (kv,) = [line for line in _section(readme, "Not carried over") if line.startswith("- **KV capacity**")]
    assert f"({name})" in kv and f"{pool.kv_tokens} tokens" in kv and "--num-gpu-blocks-override" in kv
    assert [loss.where for loss in done.dropped if loss.feature == "KV capacity"] == [name]  # and on the terminal


def test_the_readme_says_the_replicas_were_sized_for_requests_sent_in_turn(tmp_path, plans):
    export(plans["colocated"], "vllm", tmp_path / "out")
    (replicas,) = [line for line in _section((tmp_path / "out" / "README.md").read_text(), "Approximated")
                   if line.startswith("- **replicas**")]
    assert "in turn" in replicas and "random" not in replicas


def test_the_terminal_names_the_files_written(tmp_path, plans):
    (tmp_path / "plan.yaml").write_text(dump(plans["colocated"]))
    done = CliRunner().invoke(main, ["export", str(tmp_path / "plan.yaml"), "--to", "vllm", "-o", str(tmp_path / "o")])
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[:3] == [f"export: 2 files for vLLM in {tmp_path / 'o'}", "  serve-engine.sh",
                                            "  README.md"]


PLAIN = """version: 1
service: svc
engines:
  cpu: {kind: cpu, max_concurrency: 4, max_queue: 16}
stages:
  - {name: s, engine: cpu, timeout_ms: 100}
"""


def test_a_plan_without_llm_or_with_executors_is_refused_in_one_line(tmp_path, plans):
    runner = CliRunner()
    (tmp_path / "llm.yaml").write_text(dump(plans["colocated"]))
    done = runner.invoke(main, ["export", str(tmp_path / "llm.yaml"), "--to", "vllm", "-o", str(tmp_path / "o1"),
                                "--executor", "generate=x:y"])
    assert done.exit_code == 2 and "vLLM runs the model itself" in done.output
    (tmp_path / "plain.yaml").write_text(PLAIN)
    done = runner.invoke(main, ["export", str(tmp_path / "plain.yaml"), "--to", "vllm", "-o", str(tmp_path / "o2")])
    assert done.exit_code == 2 and "no llm: section" in done.output and len(done.output.strip().splitlines()) == 1
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
