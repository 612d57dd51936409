"""The one exception type that carries a message meant for the user, and reading a JSON file
the user named into it."""


class LoadprobeError(Exception):
    """Bad input or environment, explained in one line: what, where, expected what, what to do.

    The CLI prints it without a traceback and exits with status 2.
    """


def read_json(path, label: str, hint: str):
    """The JSON document in ``path``; a LoadprobeError starting with ``label`` when the file
    cannot be read or is not JSON, ending with ``hint`` (what to give instead)."""
    import json  # here: this module is imported everywhere, the reader only by two commands
    from pathlib import Path

    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise LoadprobeError(f"{label}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise LoadprobeError(f"{label}: not valid JSON ({exc}); {hint}") from None


def listed(items, shown: int = 3) -> str:
    """The first ``shown`` items, comma-separated, then how many more: messages name what they
    concern without growing with it (``listed(["a", "b", "c", "d"])`` -> ``"a, b, c and 1 more"``)."""
    items = [str(item) for item in items]
    head = ", ".join(items[:shown])
    return f"{head} and {len(items) - shown:,} more" if len(items) > shown else head
