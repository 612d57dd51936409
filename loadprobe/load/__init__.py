"""Load generation: arrival schedules and the open-loop HTTP client that keeps to them.

``loadprobe.load.poisson(200, duration=60)`` and the other schedules are arrival offsets in
seconds (``schedules``: pure, no network); ``loadprobe.load.run(url, offsets)`` sends them
(``client``, over ``connections`` on the precise loop of ``timers``) and returns a
``LoadReport`` (``report``). docs/load.md.
"""

from .._imports import forward

# Each public name and the module that owns it: asking for a schedule never loads the HTTP client.
_OWNERS = {
    **dict.fromkeys(("DEFAULT_DURATION_S", "MAX_ARRIVALS", "arrivals", "bursty", "constant", "diurnal", "poisson",
                     "replay"), "schedules"),
    "run": "client",
    "LoadReport": "report",
}


__getattr__ = forward(__name__, _OWNERS)
