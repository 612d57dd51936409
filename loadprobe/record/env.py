"""Environment variables loadprobe reads, one constant each, so the names live in one place."""

LOADPROBE_DIR = "LOADPROBE_DIR"
"""Output directory. When set, the first probe used in a process starts a recorder there,
so a service records with no code change: ``LOADPROBE_DIR=data/ python serve.py``."""

LOADPROBE_SERVICE = "LOADPROBE_SERVICE"
"""Service name for a recorder started from the environment (default: the program's name)."""

LOADPROBE_SAMPLE_DEVICES = "LOADPROBE_SAMPLE_DEVICES"
"""``0`` stops a recorder started from the environment from sampling devices. ``loadprobe record``
sets it for the command it runs, because the supervisor samples devices for the whole run."""

LOADPROBE_CPU_SAMPLE = "LOADPROBE_CPU_SAMPLE"
"""The share of requests (and of spans outside any request) whose spans also time the CPU their thread
used (``cpu_ns``): ``0`` none, ``1`` all; default ``CPU_SAMPLE_SHARE``. Reading a thread's CPU clock is a
system call (about 0.3 us), so by default one request in 16 pays it, for every span in it."""

CPU_SAMPLE_SHARE = 1 / 16


def cpu_sample_share(text: str | None) -> float:
    """``LOADPROBE_CPU_SAMPLE``'s value as a share in [0, 1]; ``CPU_SAMPLE_SHARE`` when unset or not a number."""
    try:
        share = float(text) if text not in (None, "") else CPU_SAMPLE_SHARE
    except ValueError:
        return CPU_SAMPLE_SHARE
    return min(1.0, max(0.0, share)) if share == share else CPU_SAMPLE_SHARE


LOADPROBE_TAGS = "LOADPROBE_TAGS"
"""Comma-separated ``key=value`` tags stored in run.json, e.g. ``LOADPROBE_TAGS=zone=a,build=142``."""


def parse_tags(text: str | None) -> dict[str, str]:
    """``"a=1,b=2"`` -> ``{"a": "1", "b": "2"}``; items without ``=`` become ``{item: ""}``."""
    tags: dict[str, str] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if item:
            key, _, value = item.partition("=")
            tags[key.strip()] = value.strip()
    return tags
