"""What a plan is: each stage's ``Decision``, an ``Option`` (a whole line-up and its figures), the ``Plan``.

Usage::

    plan = loadprobe.recommend(portrait, constraints)       # a Plan
    plan.recommended.decisions[0].why["engine"]             # every setting with its reason
    [(o.name, o.meets_slo, o.estimate.p95_ms) for o in plan.alternatives]
    plan.to_pipeline(); plan.to_dict()                      # pipeline.yaml config, plans.json
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .constraints import Constraints
from .targets import Targets
from ..estimate.queueing import Estimate
from ..estimate.servicetime import ServiceTime

__all__ = ["Decision", "Option", "Plan"]


@dataclass
class Decision:
    """One stage's placement and settings; ``why`` has a reason for every field."""

    stage: str
    engine: str
    kind: str
    device: str | None
    precision: str
    batch: int
    window_ms: float
    timeout_ms: float
    max_concurrency: int
    fallback: dict | None
    service: ServiceTime
    shape: list | None
    dynamic_shape: bool
    why: dict = field(default_factory=dict)
    keep_fp16: tuple = ()  # layers kept in FP16 in an INT8 stage (loadprobe align)
    confidence: dict = field(default_factory=dict)  # decided or a tie within noise, and why (confidence.settle)


@dataclass
class Option:
    """A complete plan: the recommended hybrid or a single-engine alternative."""

    name: str
    decisions: list
    engines: dict  # name -> {"kind", "device", "count", "max_concurrency", "max_queue", "power_w", "why"}
    estimate: Estimate | None
    stress: Estimate | None  # at STRESS (1.5) x the sizing rate
    tco: dict | None
    meets_slo: bool | None
    notes: list = field(default_factory=list)
    feasible: bool = True
    judged: list = field(default_factory=list)  # the notes of the latest verdict (see judge)
    tuning: list = field(default_factory=list)  # the settings the simulator tried (the recommended option)
    # How far from its targets (options.judge): 0 meets them all; 1 fails only at STRESS x the rate;
    # 2 misses the SLO or fails requests at the rate; 3 over the power budget (or it cannot be
    # checked); 4 cannot carry the rate at all. Plans are ranked on it first (choice.py).
    tier: int = 0
    provisioned_w: float | None = None  # summed maximum power of the line-up; None when part is unknown
    power_unknown: list = field(default_factory=list)  # engines whose maximum power is unknown
    sizing: str = ""  # how many units of each accelerator, and why (lineup.py)
    intervals: dict = field(default_factory=dict)  # figure -> [lo, hi] over resampled recordings (confidence.py)
    host: tuple | None = None  # (the host CPU engine, context.HostWork): the service's own work per request
    interpreter: tuple | None = None  # (worker processes, interpreter ms per request) in this plan, when sampled


@dataclass
class Plan:
    """The recommendation for a portrait: the scenario, the recommended option, the alternatives, the verdict."""

    service: str
    scenario: str
    scenario_why: str
    constraints: Constraints
    targets: Targets  # resolved once by the planner: the sizing rate, the latency targets, the power budget
    recommended: Option
    alternatives: list
    verdict: str  # how the recommendation compares with the alternatives, in one paragraph
    # The cheapest mix of device types against each single-type line-up, solved exactly on the capacity
    # model (``mix.compare_single``); None when the line-up cannot be priced.
    mix: dict | None = None

    @property
    def rate_rps(self) -> float:
        return self.targets.rate_rps

    @property
    def rate_why(self) -> str:
        """Where the sizing rate comes from."""
        return self.targets.rate_why

    @property
    def slo_p95_ms(self) -> float | None:
        return self.targets.p95_ms

    def to_pipeline(self, option: Option | None = None):
        """An option (default: the recommended one) as a validated PipelineConfig."""
        from .files import plan_why, to_pipeline

        option = option or self.recommended
        return to_pipeline(option, service=self.service, targets=self.targets, why=plan_why(self, option))

    def to_dict(self) -> dict:
        from .files import plan_dict

        return plan_dict(self)
