"""``Rejected``: a request the router turned away at once instead of letting it wait."""

from __future__ import annotations

__all__ = ["Rejected"]

#: Why a request was rejected (``Rejected.reason``).
REASONS = ("queue_full", "shed", "breaker_open", "failover_cap", "unsupported", "closed")


class Rejected(Exception):
    """The router refused the request fast; try again after ``retry_after_ms`` (a hint, or None).

    ``reason`` is one of ``queue_full`` (the engine's queue is at ``max_queue``), ``shed`` (a
    higher-priority request took its place in a full queue), ``breaker_open`` (the stage's
    breaker is open and there is no fallback), ``failover_cap`` (the fallback's ``max_ratio`` is
    used up and ``otherwise: reject``), ``unsupported`` (the request's shape or precision does
    not fit the stage's engine and it has no fallback that takes it), ``closed`` (the router is
    not running). ``stage`` and
    ``engine`` say where.
    """

    def __init__(self, reason: str, *, stage: str | None = None, engine: str | None = None,
                 retry_after_ms: float | None = None) -> None:
        self.reason = reason
        self.stage = stage
        self.engine = engine
        self.retry_after_ms = retry_after_ms
        where = f" at stage {stage!r} on engine {engine!r}" if stage and engine else ""
        hint = f"; retry after {retry_after_ms:.0f} ms" if retry_after_ms is not None else ""
        super().__init__(f"rejected ({reason}){where}{hint}")

    def __reduce__(self):  # picklable with its keywords, for process pools and tests
        return (_rebuild, (self.reason, self.stage, self.engine, self.retry_after_ms))


def _rebuild(reason, stage, engine, retry_after_ms) -> Rejected:
    return Rejected(reason, stage=stage, engine=engine, retry_after_ms=retry_after_ms)
