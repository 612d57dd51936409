"""pipeline.yaml v1 as Python: the frozen config dataclasses, field order the schema's order.

    from loadprobe import pipeline

    config = pipeline.load("pipeline.yaml")        # PipelineConfig; PipelineError lists every problem
    config.stages[0].engine, config.engines["npu0"].max_queue
    config = pipeline.PipelineConfig(service="vision", engines={...}, stages=[...])   # or build one in code

Every field is described in docs/pipeline.md. Reading and writing files is ``files``
(``load``, ``loads``, ``dump``, ``save``); checking text is ``validation`` (``validate_text``),
with ``safe_yaml`` (the loader) and ``json_schema`` (``schema()``); ``problems`` holds
``Problem`` and ``PipelineError``; the package (``loadprobe.pipeline``) gives them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from ..formats import PIPELINE

__all__ = [
    "BatchConfig", "BreakerConfig", "CalibrationConfig", "CanaryConfig", "EngineConfig", "FallbackConfig", "FallbackWhen",
    "InputConfig", "PipelineConfig", "RetryBudgetConfig", "RetryConfig", "RoutingConfig", "SLOConfig",
    "HostConfig", "LlmConfig", "LlmModelConfig", "LlmPoolConfig", "ServiceTimeConfig", "ShedConfig", "StageCalibration", "StageConfig",
]


def _nested(cls: type, **kwargs: Any) -> Any:
    """A field holding another config class (or, with ``many="list"``/``"map"``, a list or map of them)."""
    return field(metadata={"nested": cls, "many": kwargs.pop("many", None)}, **kwargs)


@dataclass(frozen=True, kw_only=True)
class SLOConfig:
    p95_ms: float | None = None
    p99_ms: float | None = None
    min_rps: float | None = None
    p50_ms: float | None = None
    ttft_p95_ms: float | None = None  # an LLM load's
    tpot_p95_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    kind: str
    device: str | None = None
    count: int = 1
    cores: int | None = None  # a cpu engine's logical cores per host, as planned (count hosts of them)
    max_concurrency: int
    max_queue: int
    power_w: float | None = None
    why: str | None = None


@dataclass(frozen=True, kw_only=True)
class InputConfig:
    shape: tuple[int | None, ...] | None = None
    dynamic: bool = False

    def __post_init__(self) -> None:
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(self.shape))


@dataclass(frozen=True, kw_only=True)
class BatchConfig:
    size: int
    max_wait_ms: float = 0


@dataclass(frozen=True, kw_only=True)
class RetryConfig:
    max_attempts: int


@dataclass(frozen=True, kw_only=True)
class FallbackWhen:
    queue_len_over: int


@dataclass(frozen=True, kw_only=True)
class FallbackConfig:
    engine: str
    when: FallbackWhen | None = _nested(FallbackWhen, default=None)
    max_ratio: float = 1.0
    otherwise: str = "reject"


@dataclass(frozen=True, kw_only=True)
class BreakerConfig:
    error_rate_over: float
    window_s: float = 10
    min_requests: int = 20
    open_s: float = 5


@dataclass(frozen=True, kw_only=True)
class ServiceTimeConfig:
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    mean: float | None = None  # what loads the engine: the recorded mean (a heavy tail puts it far above p50)
    cdf: tuple[tuple[float, float], ...] = ()  # [[ms, fraction <= ms], ...]: the recorded shape (estimate.distribution)
    source: str
    error_factor: float = 1.0  # an estimate's stated error bound (estimate.servicetime.ESTIMATE_ERROR)
    cpu_share: float = 1.0  # on a cpu engine, the share of it that uses a core (the rest waits)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cdf", tuple(tuple(point) for point in self.cdf))


@dataclass(frozen=True, kw_only=True)
class StageConfig:
    name: str
    recorded: str | None = None  # the recording's name for the stage, where ``name`` had to differ (pipeline.names)
    engine: str
    precision: str | None = None
    keep_fp16: tuple[str, ...] = ()
    input: InputConfig | None = _nested(InputConfig, default=None)
    batch: BatchConfig | None = _nested(BatchConfig, default=None)
    timeout_ms: float
    max_concurrency: int | None = None
    retry: RetryConfig | None = _nested(RetryConfig, default=None)
    fallback: FallbackConfig | None = _nested(FallbackConfig, default=None)
    breaker: BreakerConfig | None = _nested(BreakerConfig, default=None)
    service_time_ms: ServiceTimeConfig | None = _nested(ServiceTimeConfig, default=None)
    why: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keep_fp16", tuple(self.keep_fp16))
        object.__setattr__(self, "why", dict(self.why))

    @property
    def recorded_name(self) -> str:
        """The name the stage's spans carry in the recording the plan was made from."""
        return self.recorded or self.name

    @property
    def runs_on(self) -> tuple[str, ...]:
        """The engines an attempt of this stage may run on: its own, then its fallback's."""
        return (self.engine, self.fallback.engine) if self.fallback else (self.engine,)


@dataclass(frozen=True, kw_only=True)
class RetryBudgetConfig:
    budget_ratio: float
    max_attempts: int


@dataclass(frozen=True, kw_only=True)
class ShedConfig:
    by: str


@dataclass(frozen=True, kw_only=True)
class CanaryConfig:
    config: str
    weight: float


DEFAULT_WINDOW_S = 10.0


@dataclass(frozen=True, kw_only=True)
class RoutingConfig:
    retry: RetryBudgetConfig | None = _nested(RetryBudgetConfig, default=None)
    shed: ShedConfig | None = _nested(ShedConfig, default=None)
    window_s: float | None = None
    canary: CanaryConfig | None = _nested(CanaryConfig, default=None)


@dataclass(frozen=True, kw_only=True)
class StageCalibration:
    service_time_scale: float
    observed_p50_ms: float | None = None
    observed_p95_ms: float | None = None
    executions: int | None = None


@dataclass(frozen=True, kw_only=True)
class CalibrationConfig:
    """What ``loadprobe verify --calibrate`` measured from the plan running (docs/verify.md)."""

    source: str
    handoff_ms: float = 0.0
    tolerance: float | None = None
    stages: Mapping[str, StageCalibration] = _nested(StageCalibration, many="map", default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", dict(self.stages))

    def scale(self, stage: str) -> float:
        """The stage's service-time scale (1 where none was measured)."""
        found = self.stages.get(stage)
        return found.service_time_scale if found is not None else 1.0


@dataclass(frozen=True, kw_only=True)
class HostConfig:
    """The service's own work per request outside every stage, on a CPU engine (``host:``): the simulator runs it
    first, on that engine; the runtime leaves it to the service."""

    engine: str
    work_ms: ServiceTimeConfig = _nested(ServiceTimeConfig)
    recorded: str | None = None  # the request span it was measured in
    why: str | None = None


@dataclass(frozen=True, kw_only=True)
class InterpreterConfig:
    """A Python service's interpreter lock (``interpreter:``): ``processes`` x 1000 / ``ms_per_request`` requests
    per second at most, whatever the cores. The planner's queue; the simulator says when a schedule passes it."""

    processes: int
    ms_per_request: float
    why: str | None = None

    @property
    def max_rps(self) -> float:
        return self.processes * 1000.0 / self.ms_per_request


@dataclass(frozen=True, kw_only=True)
class LlmModelConfig:
    """The model an LLM plan serves (``simulator.llm.roofline.ModelShape`` as plain figures)."""

    name: str
    params: float
    active_params: float
    layers: int
    attention_width: int
    kv_width: int
    hidden: int | None = None  # the residual stream's width (a tensor-parallel all-reduce per token); None: attention's
    source: str | None = None


@dataclass(frozen=True, kw_only=True)
class LlmPoolConfig:
    """One engine of an LLM plan as replicas of an LLM engine: its role, its scheduler's settings, its step times."""

    role: str  # colocated, prefill or decode
    replicas: int
    tensor_parallel: int = 1
    precision: str | None = None
    max_running: int
    token_budget: int | None = None
    kv_tokens: int | None = None
    chunked_prefill: bool | None = None
    front_end_ms: float | None = None  # work before the first token outside the iterations, as recorded
    step_model: Mapping[str, Any] = field(default_factory=dict)
    why: str | None = None


@dataclass(frozen=True, kw_only=True)
class LlmConfig:
    """An LLM serving plan (``llm:``): the model and, per engine, the pool of engine replicas it is."""

    model: LlmModelConfig | None = _nested(LlmModelConfig, default=None)  # None: the recorded engine's own
    kv_link_gbps: float | None = None
    pools: Mapping[str, LlmPoolConfig] = _nested(LlmPoolConfig, many="map")


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """A whole plan. Build one from keywords, or read one with :func:`load`; lists become tuples.

    The mappings (``engines``, ``why``) are plain dicts: treat them as read-only.
    """

    version: int = PIPELINE.value
    service: str
    slo: SLOConfig | None = _nested(SLOConfig, default=None)
    engines: Mapping[str, EngineConfig] = _nested(EngineConfig, many="map")
    stages: tuple[StageConfig, ...] = _nested(StageConfig, many="list")
    routing: RoutingConfig | None = _nested(RoutingConfig, default=None)
    host: HostConfig | None = _nested(HostConfig, default=None)
    interpreter: InterpreterConfig | None = _nested(InterpreterConfig, default=None)
    calibration: CalibrationConfig | None = _nested(CalibrationConfig, default=None)
    llm: LlmConfig | None = _nested(LlmConfig, default=None)
    why: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "engines", dict(self.engines))
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "why", dict(self.why))

    @property
    def window_s(self) -> float:
        """The routing window (``routing.window_s``), 10 s when the file gives none."""
        given = self.routing.window_s if self.routing is not None else None
        return DEFAULT_WINDOW_S if given is None else given


def from_plain(cls: type, data: Mapping[str, Any]) -> Any:
    """The config object for schema-valid ``data`` (a dict read from YAML)."""
    kwargs = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value, nested, many = data[f.name], f.metadata.get("nested"), f.metadata.get("many")
        if nested and value is not None:
            if many == "list":
                value = [from_plain(nested, item) for item in value]
            elif many == "map":
                value = {key: from_plain(nested, item) for key, item in value.items()}
            else:
                value = from_plain(nested, value)
        kwargs[f.name] = value
    return cls(**kwargs)

