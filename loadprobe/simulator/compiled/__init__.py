"""The simulator's event loop compiled with numba: the same rules, the same draws, the same result, faster.

Usage (``simulate(..., loop="compiled")`` does this, and ``loop="auto"`` for long runs)::

    from loadprobe.simulator.compiled import run
    sim = run(config, arrivals, priorities, samplers, seed=1, window_s=10.0)
    sim.outcomes, sim.stages[0].latencies, sim.engines["npu0"].busy_s   # what result.py reads

Why it exists: speed. ``events.Simulation`` spends ~3 us of CPython per stage visit (an attempt
object, a heap tuple, half a dozen method calls); this loop runs the very same algorithm over
numpy arrays in compiled code, ~0.2 us a visit. It is a port, module for module, of the Python
one and of the policy core both ask (``loadprobe.route.policy``):

- ``layout``: the state's tables and their columns, and the numba ``STATE`` over them;
- ``heap``: events.py's heap of ``(time, sequence, kind)`` tuples, as arrays;
- ``scheduling``: ``policy.Slots`` (admission, shedding, batches under their windows);
- ``rules``: ``policy.StageRules`` and the windows behind them (steering, breakers, retries);
- ``loop``: events.py's ``Simulation`` (attempts, executions, timeouts, the event loop);
- ``driver``: Python's side (the arrays built from the policy core's reading of the plan, the
  draws fed in blocks, the attempt pool grown, the result read back);
- ``cache``: numba's disk cache, made stale by an edit to any of these modules.

What holds the port to the rules: tests/simulator/test_simulate_compiled.py runs generated
plans (shared engines, batching windows, timeouts, retries within a budget, fallbacks with
caps and ``queue_len_over``, breakers, priority shedding, executor errors, sync and async
executors, ...) through both loops and requires identical ``SimulationResult``s; it always runs
(numba is in the ``test`` extra). Each compiled function has one explicit signature and is
cached on disk: the first run on a machine compiles them (~10 s on a 2-core machine), later
processes load them (~0.5 s; docs/simulate.md).
"""

from .cache import stamp_with_package_sources

stamp_with_package_sources()  # before the modules below define (and load) their compiled functions

from .driver import CompiledRun, run  # noqa: E402

__all__ = ["CompiledRun", "run"]
