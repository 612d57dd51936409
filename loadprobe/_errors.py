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
        return json.loads(Path(path).read_text(encoding="utf-8"), parse_int=_int64)
    except OSError as exc:
        raise LoadprobeError(f"{label}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise LoadprobeError(f"{label}: not valid JSON ({exc}); {hint}") from None
    except RecursionError:
        raise LoadprobeError(f"{label}: nested too deeply to be the file expected; {hint}") from None


def shape_problem(document, schema: dict) -> str | None:
    """Where and how ``document`` breaks the JSON Schema ``schema`` (``field a.b[0]: 'x' is not of
    type 'integer'``), or None: what a message about a JSON file the user gave says."""
    from jsonschema import Draft202012Validator  # here: only the commands reading such files load it
    from jsonschema.exceptions import best_match

    error = best_match(Draft202012Validator(schema).iter_errors(document))
    if error is None:
        return None
    where = "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in error.absolute_path).lstrip(".")
    message = error.message if len(error.message) <= 120 else error.message[:100] + "..." + error.message[-20:]
    return f"field {where}: {message}" if where else message


def listed(items, shown: int = 3) -> str:
    """The first ``shown`` items, comma-separated, then how many more: messages name what they
    concern without growing with it (``listed(["a", "b", "c", "d"])`` -> ``"a, b, c and 1 more"``)."""
    items = [str(item) for item in items]
    head = ", ".join(items[:shown])
    return f"{head} and {len(items) - shown:,} more" if len(items) > shown else head


def _int64(text: str) -> int:
    """A JSON integer, if int64 (or uint64) holds it: none of loadprobe's files has larger ones, and
    a larger one would overflow where it is used as a float."""
    value = int(text) if len(text) <= 21 else None
    if value is None or not -2**63 <= value < 2**64:
        raise ValueError(f"the integer {text[:24]}{'...' if len(text) > 24 else ''} is out of range")
    return value
