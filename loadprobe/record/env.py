"""Environment variables loadprobe reads, one constant each, so the names live in one place."""

LOADPROBE_DIR = "LOADPROBE_DIR"
"""Output directory. When set, the first probe used in a process starts a recorder there,
so a service records with no code change: ``LOADPROBE_DIR=data/ python serve.py``."""

LOADPROBE_SERVICE = "LOADPROBE_SERVICE"
"""Service name for a recorder started from the environment (default: the program's name)."""

LOADPROBE_SAMPLE_DEVICES = "LOADPROBE_SAMPLE_DEVICES"
"""``0`` stops a recorder started from the environment from sampling devices. ``loadprobe record``
sets it for the command it runs, because the supervisor samples devices for the whole run."""

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
