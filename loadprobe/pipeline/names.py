"""The one rule for the names of a plan: stage, engine and service names.

A plan's names become folder names (a Triton model repository), Ray Serve deployment and
application names, Prometheus labels and text inside generated Python. So each is a letter, then
up to 63 letters, digits, ``_``, ``.`` or ``-``: no ``/``, no quote, nothing a shell, a file
system or a parser reads specially. pipeline.schema.json carries the same pattern (a test holds
them together); ``loadprobe validate`` refuses any other name with the field and this rule.

Recorded names are free text (``"POST /inspect"``, ``"model:v2"``); the planner maps them to plan
names with :func:`plan_names` and keeps the recorded name beside each (``recorded:`` in
pipeline.yaml), so nothing recorded is lost and the simulator still finds its spans::

    is_name("backbone")                          # True
    is_name("../../tmp/x")                       # False
    to_name("POST /inspect")                     # 'POST_inspect'
    plan_names(["POST /inspect", "POST_inspect", "decode"])
    # {'POST /inspect': 'POST_inspect', 'POST_inspect': 'POST_inspect-2', 'decode': 'decode'}
"""

from __future__ import annotations

import re
from typing import Iterable

__all__ = ["NAME_RULE", "PATTERN", "is_name", "plan_names", "to_name"]

# ECMA-262 and Python read it alike: the look-ahead refuses a newline, which "$" alone lets end the text.
PATTERN = r"^(?!.*\n)[A-Za-z][A-Za-z0-9_.-]{0,63}$"
NAME_RULE = "a name starts with a letter, then up to 63 letters, digits, '_', '.' or '-'"
MAX_LENGTH = 64

_NAME = re.compile(PATTERN)
_OTHERS = re.compile(r"[^A-Za-z0-9_.-]+")


def is_name(text: object) -> bool:
    """Whether ``text`` is a valid plan name as it stands."""
    return isinstance(text, str) and _NAME.search(text) is not None


def to_name(text: str, fallback: str = "stage") -> str:
    """``text`` made a valid name: other characters become ``_``, a leading non-letter gets
    ``fallback`` + ``_`` before it, and the result is cut to 64 characters. A valid name is returned as it is."""
    if is_name(text):
        return text
    cleaned = _OTHERS.sub("_", str(text)).strip("_.-")
    if not cleaned[:1].isascii() or not cleaned[:1].isalpha():
        cleaned = f"{fallback}_{cleaned}" if cleaned else fallback
    return cleaned[:MAX_LENGTH].rstrip("_.-") or fallback


def plan_names(recorded: Iterable[str], fallback: str = "stage") -> dict[str, str]:
    """One distinct valid name per recorded name, in order: names already valid are kept, and a
    made name that collides with an earlier one gets ``-2``, ``-3``, ... (cut to stay within 64)."""
    recorded = list(dict.fromkeys(recorded))
    taken = {name for name in recorded if is_name(name)}
    out: dict[str, str] = {}
    for name in recorded:
        if is_name(name):
            out[name] = name
            continue
        base, number = to_name(name, fallback), 1
        made = base
        while made in taken:
            number += 1
            suffix = f"-{number}"
            made = base[:MAX_LENGTH - len(suffix)] + suffix
        taken.add(made)
        out[name] = made
    return out
