"""pipeline.yaml files: read (``load``, ``loads``), written as text (``dump``) and saved (``save``).

    from loadprobe import pipeline

    config = pipeline.load("pipeline.yaml")        # PipelineConfig; PipelineError lists every problem
    problems = pipeline.validate_text(text, "pipeline.yaml")   # [Problem(line, column, path, message)]
    pipeline.save(config, "pipeline.yaml", overwrite=True)     # YAML in schema order, via temp file + rename
    pipeline.schema()                                          # the JSON Schema (pipeline.schema.json)

Every field is described in docs/pipeline.md. The file is untrusted input: it is read with a safe
loader that also refuses anchors and aliases (so "billion laughs" documents are rejected before
anything is expanded), tags other than the plain YAML ones, more than one document, nesting
deeper than ``MAX_DEPTH`` and files over ``MAX_BYTES`` (``safe_yaml``, ``validation``).
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from .._errors import LoadprobeError
from .._files import write_file
from ..formats import PIPELINE
from .config import PipelineConfig, from_plain
from .problems import PipelineError, Problem
from .safe_yaml import TAG
from .validation import MAX_BYTES, TOO_BIG, check, validate_text

__all__ = ["HEADER", "dump", "load", "loads", "save"]

HEADER = f"# loadprobe pipeline.yaml v{PIPELINE.major}; every field is described in docs/pipeline.md\n"


class _Flow(list):
    """A short list written inline, ``[4, 3, 640, 640]``."""


def _to_plain(obj: Any) -> dict[str, Any]:
    """Dicts and lists in field order. None and empty lists/maps are left out: loading gives them back."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value is None or (not f.metadata.get("nested") and isinstance(value, (tuple, dict)) and not value):
            continue
        if f.metadata.get("many") == "list":
            value = [_to_plain(item) for item in value]
        elif f.metadata.get("many") == "map":
            value = {key: _to_plain(item) for key, item in value.items()}
        elif f.metadata.get("nested"):
            value = _to_plain(value)
        elif isinstance(value, (tuple, list)):
            value = _Flow(value)
        elif isinstance(value, dict):
            value = dict(value)
        out[f.name] = value
    return out


def loads(text: str, source: str = "<string>", *, catalog: Any = None) -> PipelineConfig:
    """The plan in ``text``; PipelineError (a LoadprobeError) lists every problem with its line and column."""
    problems, data = check(text, source, catalog)
    if problems:
        raise PipelineError(source, problems)
    return from_plain(PipelineConfig, data)


def load(path_or_text: str | os.PathLike, *, catalog: Any = None) -> PipelineConfig:
    """The plan in a file. A ``str`` holding a newline is taken as the YAML text itself."""
    if isinstance(path_or_text, str) and "\n" in path_or_text:
        return loads(path_or_text, catalog=catalog)
    source = str(path_or_text)
    try:
        with open(path_or_text, "rb") as file:
            raw = file.read(MAX_BYTES + 1)  # never more: the size cap holds for huge files too
    except OSError as exc:
        raise LoadprobeError(f"{source}: cannot read the pipeline file ({exc.strerror or exc})") from None
    if len(raw) > MAX_BYTES:
        raise PipelineError(source, [Problem(1, 1, "", TOO_BIG, source)])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = raw[:exc.start]
        problem = Problem(before.count(b"\n") + 1, len(before) - before.rfind(b"\n"), "",
                          "not UTF-8 text; save the file as UTF-8", source)
        raise PipelineError(source, [problem]) from None
    return loads(text, source, catalog=catalog)


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # never write anchors: load() refuses them

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
        return super().increase_indent(flow, False)  # indent list items under their key


_Dumper.add_representer(_Flow, lambda d, v: d.represent_sequence(TAG + "seq", v, flow_style=True))
_Dumper.add_representer(str, lambda d, v: d.represent_scalar(TAG + "str", v, style="|" if "\n" in v else None))


def dump(config: PipelineConfig) -> str:
    """The plan as pipeline.yaml text: block style, keys in the schema's order, None fields left out.

    ``loads(dump(c)) == c``; the text does not depend on how ``c`` was made.
    """
    body = yaml.dump(_to_plain(config), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=100)
    return HEADER + body


def save(config: PipelineConfig, path: str | os.PathLike, *, overwrite: bool = False, catalog: Any = None) -> Path:
    """Write the plan to ``path`` after checking it (its devices against ``catalog``, default the packaged one); an
    existing file is only replaced with ``overwrite``.

    The text goes to a temporary file next to ``path`` that is then renamed over it, so a reader never
    sees half a plan. Returns ``path``.
    """
    path = Path(path)
    text = dump(config)
    problems = validate_text(text, str(path), catalog=catalog)
    if problems:  # a plan built in code can break rules the dataclasses do not check
        raise PipelineError(str(path), problems)
    if path.exists() and not overwrite:
        raise LoadprobeError(f"{path} already exists; use --force (overwrite=True) to replace it")
    try:
        write_file(path, text, durable=True, overwrite=overwrite)
    except OSError as exc:
        raise LoadprobeError(f"{path}: cannot write the pipeline file ({exc.strerror or exc})") from None
    return path
