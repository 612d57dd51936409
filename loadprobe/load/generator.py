"""The names ``loadprobe.load.generator`` held before the schedules and the HTTP client were split.

Kept so that ``from loadprobe.load import generator`` goes on working; new code imports from
``loadprobe.load`` (``load.poisson``, ``load.run``) or from the module that owns the name:
``schedules`` (arrivals, no network), ``client`` (``run``), ``report`` (``LoadReport``).
"""

from .client import run
from .report import LoadReport
from .schedules import DEFAULT_DURATION_S, MAX_ARRIVALS, arrivals, bursty, constant, diurnal, poisson, replay
from .timers import event_loop as _event_loop, timer_slack as _timer_slack  # benchmarks/fidelity_simulate.py

__all__ = ["DEFAULT_DURATION_S", "LoadReport", "MAX_ARRIVALS", "arrivals", "bursty", "constant", "diurnal", "poisson",
           "replay", "run"]
