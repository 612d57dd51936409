"""``CanarySplit``: which requests go to the canary plan, so that exactly ``weight`` of them do.

Usage::

    split = CanarySplit(0.05)
    to_canary = split.take()     # True for the 20th, 40th, 60th ... request: 5%, evenly spread

Deterministic rather than random: after n requests the canary has had floor(n x weight)
of them, so a small test run and a dashboard see the configured share, not a sample of it.
"""

from __future__ import annotations

import math
import threading

__all__ = ["CanarySplit"]


class CanarySplit:
    """Thread-safe counter that sends ``weight`` (0-1) of requests to the canary."""

    def __init__(self, weight: float) -> None:
        if not 0 <= weight <= 1:
            raise ValueError(f"weight must be between 0 and 1, not {weight!r}")
        self.weight = weight
        self.seen = 0
        self.sent = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Whether this request goes to the canary."""
        with self._lock:
            self.seen += 1
            if self.sent < math.floor(self.seen * self.weight):
                self.sent += 1
                return True
            return False
