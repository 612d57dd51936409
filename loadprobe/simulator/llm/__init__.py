"""An LLM engine simulated iteration by iteration: continuous batching on a step-time model fitted to a recording.

- ``steps.py``: how long one iteration takes (``StepModel``), fitted to the engine's recorded requests;
- ``engine.py``: the scheduler replayed step by step (``EngineSettings``, ``run_engine``);
- ``replay.py``: ``loadprobe simulate --llm``: fit, check on the recording's own arrivals, replay others
  (``simulate_llm``), the result holding the portrait's ``llm`` fields.
"""
