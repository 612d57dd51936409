"""What the team has and needs: engines, latency SLO, throughput, power budget, precision policy.

Usage::

    c = Constraints.parse(engines="cpu,gpu:nvidia-l4x2,npu:ascend-310p", slo_p95_ms=200,
                          precision=["int8-ok", "head=fp16-only"])
    c.lineup.engines[1]   # EngineSpec(kind="gpu", device="nvidia-l4", count=1, name="gpu0", max_count=2)
    c.asked.slo_p95_ms    # 200; the parts: lineup, asked (targets), pricing, evidence
    c.precision_for("backbone")   # "int8-ok"
    Constraints.parse(align=["align.json"])     # a stage's precision from loadprobe align's verdict

Every figure is optional: a plan made without an SLO keeps the recorded p95, without
``min_rps`` sizes for the recorded peak rate, without a power budget ignores power.

An accelerator's count is what the team may buy, not what it has: ``gpu:nvidia-l4x4`` lets the
planner use one to four L4s, ``gpu:nvidia-l4`` up to ``MAX_SIZED_UNITS``; the plan says how many
(``plan/lineup.py``). A CPU's count is the number of hosts, used as given.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .._errors import LoadprobeError

DEFAULT_ENGINES = "cpu,gpu:nvidia-l4,npu:ascend-310p"
"""The seeds' line-up, used when the team names none: a host CPU, a small GPU and an NPU."""

POLICIES = ("fp16-only", "int8-ok")
MAX_UNITS = 4096  # pipeline.yaml's limit on an engine's count
MAX_SIZED_UNITS = 64  # an accelerator named without a count: the planner buys up to this many
_KIND = re.compile(r"(cpu|gpu|npu)(?:x(\d+))?")  # "gpu", "gpux2"
_COUNTED = re.compile(r"(.+?)x(\d+)")  # "nvidia-l4x2"


@dataclass(frozen=True)
class EngineSpec:
    """An engine the team has or may buy: a kind, optionally a catalog device, how many.

    ``count`` is the units a plan uses (the planner sets it); ``max_count`` the most it may use:
    the count the team gave, else ``MAX_SIZED_UNITS`` for an accelerator. A CPU's count is fixed.
    """

    kind: str
    device: str | None = None
    count: int = 1
    name: str = ""
    max_count: int | None = None  # None: ``count``, fixed

    @property
    def limit(self) -> int:
        """The most units a plan may use."""
        return self.max_count if self.max_count is not None else self.count

    @property
    def catalog_id(self) -> str | None:
        """The catalog device it runs on: the one it names, else its kind's default (``gpu`` -> nvidia-l4,
        ``npu`` -> ascend-310p: ``DEFAULT_DEVICE``); None for a host CPU that names none."""
        from ..estimate.servicetime import DEFAULT_DEVICE

        return self.device or DEFAULT_DEVICE.get(self.kind)

    @property
    def assumed(self) -> str:
        """Words for a device taken by default, to say wherever it is priced or sized; "" when it was named."""
        if self.device or self.catalog_id is None:
            return ""
        return (f"{self.catalog_id} assumed: --engines named no {self.kind} device ({self.kind}:DEVICE names one, "
                "e.g. loadprobe catalog)")


@dataclass(frozen=True, kw_only=True)
class LineUp:
    """The engines a plan may use, and what may run where."""

    engines: tuple[EngineSpec, ...]
    precision: str = "fp16-only"  # the policy of every stage not named in precision_by_stage
    precision_by_stage: dict = field(default_factory=dict)
    changes_often: frozenset = frozenset()  # stages whose model is replaced often (kept off NPUs)
    cpu_power_w: float | None = None  # the host CPU's maximum power, when the user knows it (--cpu-power-w)


@dataclass(frozen=True, kw_only=True)
class Asked:
    """The targets as the user asked for them (each optional); ``targets.resolve`` makes the plan's ``Targets``."""

    slo_p95_ms: float | None = None
    slo_p99_ms: float | None = None
    slo_p50_ms: float | None = None
    slo_ttft_ms: float | None = None  # an LLM load's p95 time to first token
    slo_tpot_ms: float | None = None  # an LLM load's p95 time per output token after the first
    min_rps: float | None = None
    power_budget_w: float | None = None


@dataclass(frozen=True, kw_only=True)
class Pricing:
    """How the plans are priced: years of ownership, electricity, the devices' prices, buying or renting."""

    years: float = 3.0
    price_per_kwh: float = 0.15
    prices: dict = field(default_factory=dict)  # catalog id -> purchase price per unit
    # True: price accelerators by their hourly rates (--rent); False: by their purchase (--buy); None: decided
    # by ``decided`` from what is known of the line-up's devices.
    rent: bool | None = None
    hourly_rates: dict = field(default_factory=dict)  # catalog id -> on-demand rate per unit and hour (--hourly-rate)
    basis_why: str = ""  # why the plans are priced bought or rented (``decided``)

    def decided(self, lineup: LineUp, catalog) -> Pricing:
        """This pricing with buy or rent settled and said why. Asked for (--rent, --buy): as asked. Else bought
        when every priced device of the line-up (its accelerators, a host named by catalog id) has a purchase
        price; rented when some lack one but every one has an hourly rate, so plans still compare on money;
        bought otherwise, the unknowns named by each plan's cost."""
        import dataclasses

        from ..estimate.tco import unit_figure

        devices = sorted({s.catalog_id for s in lineup.engines if s.catalog_id})
        no_price, no_rate = ([d for d in devices if unit_figure(d, catalog=catalog, rent=rent, prices=self.prices,
                                                                hourly_rates=self.hourly_rates)[0] is None]
                             for rent in (False, True))
        years = f"{self.years:g} years"
        if self.rent is not None:
            missing = no_rate if self.rent else no_price
            rent, why = self.rent, (f"{'rented (--rent)' if self.rent else 'bought (--buy)'}, as asked"
                                    + (f"; no {'hourly rate' if self.rent else 'purchase price'} for "
                                       f"{', '.join(missing)}" if missing else ""))
        elif not devices:
            rent, why = False, "bought: the line-up has no device to buy or rent beyond the host every plan shares"
        elif not no_price:
            rent, why = False, f"bought: every device of the line-up has a purchase price ({years}, with electricity)"
        elif not no_rate:
            rent, why = True, (f"rented: no purchase price for {', '.join(no_price)}, but every device of the line-up "
                               f"has an on-demand hourly rate, so the plans are ranked on {years} of rent (--buy "
                               "with --price DEVICE=AMOUNT ranks them on purchase)")
        else:
            rent, why = False, (f"bought, on known figures: no purchase price for {', '.join(no_price)} and no hourly "
                                f"rate for {', '.join(no_rate)}; give --price DEVICE=AMOUNT or --hourly-rate "
                                "DEVICE=RATE to compare the plans on money")
        return dataclasses.replace(self, rent=rent, basis_why=why)


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """What other loadprobe commands measured that the plan must follow."""

    align: dict = field(default_factory=dict)  # stage -> align.AlignEvidence: the verdict of loadprobe align
    calibration: object = None  # Calibrated: what loadprobe verify --calibrate measured of a plan (--calibration)


@dataclass(frozen=True, kw_only=True)
class Constraints:
    """Everything a plan is made under, in four parts built by keyword (``parse`` builds them from CLI strings)."""

    lineup: LineUp
    asked: Asked = Asked()
    pricing: Pricing = Pricing()
    evidence: Evidence = Evidence()

    def precision_for(self, stage: str) -> str:
        evidence = self.evidence.align.get(stage)
        if evidence is not None:
            return evidence.policy
        return self.lineup.precision_by_stage.get(stage, self.lineup.precision)

    def keep_fp16_for(self, stage: str) -> tuple:
        """The layers loadprobe align says to keep in FP16 when ``stage`` runs INT8."""
        evidence = self.evidence.align.get(stage)
        return tuple(evidence.keep_fp16) if evidence is not None else ()

    def to_dict(self) -> dict:
        """plans.json's ``constraints``: every part's fields in one object, as it has always been written."""
        import dataclasses

        return {f.name: getattr(part, f.name) for part in (self.lineup, self.asked, self.pricing, self.evidence)
                for f in dataclasses.fields(part)}

    @classmethod
    def parse(cls, *, engines: str | None = None, slo_p95_ms=None, slo_p99_ms=None, slo_p50_ms=None,
              slo_ttft_ms=None, slo_tpot_ms=None, min_rps=None,
              power_budget_w=None, precision=(), years: float = 3.0, price_per_kwh: float = 0.15,
              prices=(), changes_often=(), align=(), catalog=None, cpu_power_w=None,
              calibration=None, rent: bool | None = None, hourly_rates=()) -> Constraints:
        """Build from CLI-style strings; a LoadprobeError names the bad part and what is allowed.

        ``align``: align.json files (or ``align.AlignEvidence``), one per stage. ``calibration``: a
        pipeline.yaml with a ``calibration:`` section (``loadprobe verify --calibrate``).
        """
        specs = parse_engines(DEFAULT_ENGINES if engines is None else engines, catalog)
        default, by_stage = parse_precision(precision)
        evidence = parse_align(align, by_stage)
        for option, value in (("--slo-p95-ms", slo_p95_ms), ("--slo-p99-ms", slo_p99_ms), ("--slo-p50-ms", slo_p50_ms),
                              ("--slo-ttft-ms", slo_ttft_ms), ("--slo-tpot-ms", slo_tpot_ms), ("--min-rps", min_rps),
                              ("--power-budget-w", power_budget_w), ("--years", years),
                              ("--cpu-power-w", cpu_power_w)):
            if value is not None and not value > 0:
                raise LoadprobeError(f"{option} {value:g} must be a positive number")
            check_within_plan(option, value)
        if price_per_kwh is not None and not (math.isfinite(price_per_kwh) and price_per_kwh >= 0):
            raise LoadprobeError(f"--price-per-kwh {price_per_kwh:g} must be 0 or more (0: power costs nothing)")
        changing = frozenset(n.strip() for v in changes_often for n in str(v).split(",") if n.strip())
        return cls(
            lineup=LineUp(engines=specs, precision=default, precision_by_stage=by_stage, changes_often=changing,
                          cpu_power_w=float(cpu_power_w) if cpu_power_w is not None else None),
            asked=Asked(slo_p95_ms=slo_p95_ms, slo_p99_ms=slo_p99_ms, slo_p50_ms=slo_p50_ms, slo_ttft_ms=slo_ttft_ms,
                        slo_tpot_ms=slo_tpot_ms, min_rps=min_rps, power_budget_w=power_budget_w),
            pricing=Pricing(years=float(years), price_per_kwh=float(price_per_kwh),
                            prices=parse_prices(prices, catalog), rent=None if rent is None else bool(rent),
                            hourly_rates=parse_prices(hourly_rates, catalog, option="--hourly-rate",
                                                      example="nvidia-l4=0.85")),
            evidence=Evidence(align=evidence,
                              calibration=parse_calibration(calibration) if calibration is not None else None))


PLAN_TARGETS = {"--slo-p95-ms": "p95_ms", "--slo-p99-ms": "p99_ms", "--slo-p50-ms": "p50_ms",
                "--slo-ttft-ms": "ttft_p95_ms", "--slo-tpot-ms": "tpot_p95_ms", "--min-rps": "min_rps"}
"""The options whose value a plan keeps in pipeline.yaml's ``slo`` section, and the field each becomes."""


def check_within_plan(option: str, value) -> None:
    """Refuse a target pipeline.yaml could not hold (its schema's maximum: ``--min-rps`` 10 million, a latency
    an hour), before any planning: the plan written would not be a valid pipeline.yaml."""
    field = PLAN_TARGETS.get(option)
    if field is None or value is None:
        return
    from ..pipeline.json_schema import maximum

    most = maximum("slo", field)
    if value > most:
        raise LoadprobeError(f"{option} {value:g}: above the most a plan holds ({most:g}); give {most:g} or less")


def parse_engines(text: str, catalog=None) -> tuple[EngineSpec, ...]:
    """``"cpu,gpu:nvidia-l4x2,npu:ascend-310p"`` -> engine specs named cpu, gpu0, npu0, ...

    A device must be in the hardware catalog and of the stated kind.
    """
    if catalog is None:
        from ..catalog import load_catalog

        catalog = load_catalog()
    known_ids = set(catalog.ids())
    specs: list[EngineSpec] = []
    per_kind: dict[str, int] = {}
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        head, colon, device = part.partition(":")
        m = _KIND.fullmatch(head)
        if m is None:
            raise LoadprobeError(f"--engines: cannot read {part!r}; write KIND[:DEVICE][xN] with KIND cpu, gpu or "
                                 "npu, e.g. cpu,gpu:nvidia-l4x2,npu:ascend-310p")
        kind, count = m.group(1), int(m.group(2) or 1)
        if colon and not device.strip():
            raise LoadprobeError(f"--engines: {part!r} names no device after the colon; write {kind}:ID (`loadprobe "
                                 f"catalog` lists them) or {kind} alone")
        given = m.group(2) is not None
        counted = _COUNTED.fullmatch(device)
        if device and device not in known_ids and counted:
            device, count, given = counted.group(1), int(counted.group(2)), True
        device = device or None
        if device is not None:
            if device not in known_ids:
                known = ", ".join(d.id for d in catalog if d.kind == kind)
                raise LoadprobeError(f"--engines: {device!r} is not in the hardware catalog; known {kind}s: {known} "
                                     "(add your own with --catalog, see docs/catalog.md)")
            entry = catalog.get(device)
            if entry.kind != kind:
                raise LoadprobeError(f"--engines: {device} is a {entry.kind}, not a {kind}; write {entry.kind}:{device}")
        if not 1 <= count <= MAX_UNITS:
            raise LoadprobeError(f"--engines: {part!r} has a count of {count}; write x1 to x{MAX_UNITS}")
        n = per_kind.get(kind, 0)
        per_kind[kind] = n + 1
        name = "cpu" if kind == "cpu" and n == 0 else f"{kind}{n}"
        if kind == "cpu":
            specs.append(EngineSpec(kind, device, count, name))
        else:  # what may be bought: from one unit up to the count given (or MAX_SIZED_UNITS)
            specs.append(EngineSpec(kind, device, 1, name, count if given else MAX_SIZED_UNITS))
    if not specs:
        raise LoadprobeError("--engines is empty; name at least one engine, e.g. --engines cpu")
    if not any(s.kind == "cpu" for s in specs):
        specs.insert(0, EngineSpec("cpu", None, 1, "cpu"))  # every accelerator has a host CPU
    return tuple(specs)


def parse_precision(values) -> tuple[str, dict]:
    """``["int8-ok", "head=fp16-only"]`` -> ("int8-ok", {"head": "fp16-only"})."""
    default, by_stage = "fp16-only", {}
    for value in values or ():
        stage, _, policy = str(value).rpartition("=")
        if policy not in POLICIES:
            raise LoadprobeError(f"--precision {value!r}: the policy must be one of {', '.join(POLICIES)} "
                                 "(per stage: --precision backbone=int8-ok)")
        if stage:
            by_stage[stage] = policy
        else:
            default = policy
    return default, by_stage


def parse_align(values, precision_by_stage: dict | None = None) -> dict:
    """align.json files (or evidence already read) -> {stage: AlignEvidence}, one file per stage."""
    if not values:
        return {}
    from ..align.document import AlignEvidence, load_evidence

    out: dict = {}
    for value in values or ():
        evidence = value if isinstance(value, AlignEvidence) else load_evidence(value)
        if evidence.stage in out:
            raise LoadprobeError(f"--align {evidence.source}: stage {evidence.stage!r} already has "
                                 f"{out[evidence.stage].source}; give one align.json per stage")
        if evidence.stage in (precision_by_stage or {}):
            raise LoadprobeError(f"--precision {evidence.stage}={precision_by_stage[evidence.stage]} and --align "
                                 f"{evidence.source} both set {evidence.stage!r}'s precision; give one of them")
        out[evidence.stage] = evidence
    return out


@dataclass(frozen=True)
class Calibrated:
    """A verified plan's correction: per stage, where it ran (kind, device) and its service-time scale; the
    runtime's hand-off delay per stage; the file it came from."""

    stages: dict  # stage -> (kind, device or None, scale)
    handoff_ms: float
    source: str

    def scale(self, stage: str, kind: str, device: str | None) -> float | None:
        """The scale measured for ``stage`` on this kind of engine and device, or None."""
        found = self.stages.get(stage)
        if found is None or found[0] != kind or (found[1] is not None and device is not None and found[1] != device):
            return None
        return found[2]


def parse_calibration(path) -> Calibrated:
    """A calibrated pipeline.yaml -> Calibrated; a file without a calibration section is an error naming it."""
    from ..pipeline import files as pipeline

    config = pipeline.load(path)
    if config.calibration is None:
        raise LoadprobeError(f"--calibration {path}: the file has no calibration: section; run loadprobe verify "
                             f"{path} DATA --calibrate first")
    stages = {}
    for stage in config.stages:
        measured = config.calibration.stages.get(stage.name)
        if measured is not None:
            engine = config.engines[stage.engine]
            stages[stage.recorded_name] = (engine.kind, engine.device, measured.service_time_scale)
    return Calibrated(stages, config.calibration.handoff_ms, str(path))


def parse_prices(values, catalog=None, *, option: str = "--price", example: str = "nvidia-l4=2500") -> dict:
    """``["nvidia-l4=2500"]`` -> {"nvidia-l4": 2500.0}: an amount per unit of a catalog device, any currency
    (``--price``: its purchase price; ``--hourly-rate``: its rent per hour).

    A device must be in the hardware catalog (default: the built-in one).
    """
    if values and catalog is None:
        from ..catalog import load_catalog

        catalog = load_catalog()
    prices = {}
    for value in values or ():
        device, _, amount = str(value).partition("=")
        if device.strip() not in set(catalog.ids()):
            raise LoadprobeError(f"{option} {value!r}: {device.strip()!r} is not in the hardware catalog; known "
                                 f"devices: {', '.join(catalog.ids())} (add your own with --catalog)")
        try:
            prices[device.strip()] = float(amount)
        except ValueError:
            raise LoadprobeError(f"{option} {value!r}: write DEVICE=AMOUNT, e.g. {option} {example}") from None
        if not prices[device.strip()] >= 0:
            raise LoadprobeError(f"{option} {value!r}: the amount must be zero or more")
    return prices
