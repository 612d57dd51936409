"""The errors the router raises to a caller, each with a message that says where and why.

``Rejected``: a request the router turned away at once instead of letting it wait.
``timed_out``: the TimeoutError of an attempt that passed its stage's ``timeout_ms``.
``explain``: gives an executor's exception that has no message one naming its stage and engine.
"""

from __future__ import annotations

__all__ = ["Rejected", "explain", "timed_out"]

#: Why a request was rejected (``Rejected.reason``).
REASONS = ("queue_full", "shed", "breaker_open", "failover_cap", "unsupported", "closed")


class Rejected(Exception):
    """The router refused the request fast; try again after ``retry_after_ms`` (a hint, or None).

    ``reason`` is one of ``queue_full`` (the engine's queue is at ``max_queue``), ``shed`` (a
    higher-priority request took its place in a full queue), ``breaker_open`` (the stage's
    breaker is open and there is no fallback), ``failover_cap`` (the fallback's ``max_ratio`` is
    used up and ``otherwise: reject``), ``unsupported`` (the request's shape or precision does
    not fit the stage's engine and it has no fallback that takes it), ``closed`` (the router is
    not running). ``stage`` and ``engine`` say where; ``detail``, when given, ends the message.
    """

    def __init__(self, reason: str, *, stage: str | None = None, engine: str | None = None,
                 retry_after_ms: float | None = None, detail: str | None = None) -> None:
        self.reason = reason
        self.stage = stage
        self.engine = engine
        self.retry_after_ms = retry_after_ms
        self.detail = detail
        where = f" at stage {stage!r} on engine {engine!r}" if stage and engine else ""
        hint = f"; retry after {retry_after_ms:.0f} ms" if retry_after_ms is not None else ""
        more = f": {detail}" if detail else ""
        super().__init__(f"rejected ({reason}){where}{hint}{more}")

    def __reduce__(self):  # picklable with its keywords, for process pools and tests
        return (_rebuild, (self.reason, self.stage, self.engine, self.retry_after_ms, self.detail))


def _rebuild(reason, stage, engine, retry_after_ms, detail=None) -> Rejected:
    return Rejected(reason, stage=stage, engine=engine, retry_after_ms=retry_after_ms, detail=detail)


def timed_out(stage: str, engine: str, timeout_ms: float, state: str) -> TimeoutError:
    """The router's own timeout; ``state`` says what the attempt was doing when time ran out."""
    return TimeoutError(f"stage {stage!r} on engine {engine!r} did not finish within its {timeout_ms:g} ms "
                        f"timeout ({state})")


def explain(exc: BaseException, stage: str, engine: str) -> BaseException:
    """``exc``, given a message naming its type, stage and engine if its own ``str()`` is empty.

    Only an ``Exception``: a CancelledError or KeyboardInterrupt is control flow, not a failure
    to describe. An exception like ``RuntimeError()`` would otherwise reach the caller, and its logs, as a
    blank line. The exception keeps its type, identity and traceback; only ``args`` change.
    """
    if isinstance(exc, Exception) and not str(exc):
        exc.args = (f"{type(exc).__name__} with no message from the executor of stage {stage!r} on engine "
                    f"{engine!r}",)
    return exc
