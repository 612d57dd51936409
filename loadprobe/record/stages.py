"""Stage names as small ints: registered once, at decoration, so a span carries a number.

The flusher turns the numbers into a dictionary column without looking at a string per span.

Usage::

    from loadprobe.record.stages import stage_id, stage_names

    number = stage_id("backbone")          # the same number for the same name, from any thread
    assert stage_names()[number] == "backbone"
"""

from __future__ import annotations

import threading

_stage_ids: dict[str, int] = {}
_stage_names: list[str] = []
_stage_lock = threading.Lock()


def stage_id(name: str) -> int:
    """The registry number of a stage name (registering it on first use)."""
    number = _stage_ids.get(name)
    if number is None:
        with _stage_lock:
            number = _stage_ids.get(name)
            if number is None:
                _stage_names.append(name)
                number = _stage_ids[name] = len(_stage_names) - 1
    return number


def stage_names() -> list[str]:
    """Every registered stage name, indexed by ``stage_id`` (append-only)."""
    return list(_stage_names)


def reset_after_fork() -> None:
    """In a forked child: another thread may have held the lock at the fork. The names stay."""
    global _stage_lock
    _stage_lock = threading.Lock()
