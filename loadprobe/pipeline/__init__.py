"""pipeline.yaml: the plan as a file, what ``loadprobe recommend`` writes and ``loadprobe.route``
and ``loadprobe.simulator`` read: ``config = loadprobe.pipeline.load("pipeline.yaml")``.

``config`` holds the dataclasses; ``files`` reads and writes files (``load``, ``loads``, ``dump``,
``save``); ``validation`` finds every problem of a text (``validate_text``), with ``safe_yaml``
(the loader that remembers lines and columns), ``json_schema`` (``schema()``) and ``problems``
(``Problem``, ``PipelineError``). docs/pipeline.md.
"""

from .._imports import forward

# Each public name and the module that owns it: building a config in code loads neither PyYAML nor the schema.
_OWNERS = {
    **dict.fromkeys(("BatchConfig", "BreakerConfig", "CanaryConfig", "EngineConfig", "FallbackConfig", "FallbackWhen",
                     "InputConfig", "PipelineConfig", "RetryBudgetConfig", "RetryConfig", "RoutingConfig", "SLOConfig",
                     "ServiceTimeConfig", "ShedConfig", "StageConfig", "HostConfig", "InterpreterConfig",
                     "LlmConfig", "LlmModelConfig", "LlmPoolConfig"),
                    "config"),
    **dict.fromkeys(("dump", "load", "loads", "save"), "files"),
    **dict.fromkeys(("MAX_BYTES", "validate_text"), "validation"),
    **dict.fromkeys(("MAX_DEPTH", "MAX_NODES"), "safe_yaml"),
    **dict.fromkeys(("PipelineError", "Problem"), "problems"),
    "schema": "json_schema",
}


__getattr__ = forward(__name__, _OWNERS)
