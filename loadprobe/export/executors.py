"""Which of the user's callables runs each stage on each engine, named by import path.

pipeline.yaml names engines, not code: the Router is handed callables, an exported service is
handed their import paths, written ``STAGE=MODULE:NAME`` (every engine of the stage) or
``STAGE@ENGINE=MODULE:NAME`` (that engine only, e.g. the fallback's own model)::

    paths = executor_paths(config, ["decode=vision.steps:decode", "backbone@gpu0=vision.steps:backbone_fp32"])
    paths[("decode", "cpu")]        # "vision.steps:decode"; a (stage, engine) left out has no entry

The callables follow the Router's contract (docs/route.md): a batched stage gets a list and
returns a list of as many results; ``async def`` ones are awaited.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from .._errors import LoadprobeError, listed
from ..pipeline.config import PipelineConfig

__all__ = ["check_importable", "executor_paths", "parse_spec"]

_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")
HOW = "give it as STAGE=MODULE:NAME or STAGE@ENGINE=MODULE:NAME, e.g. decode=myservice.steps:decode"


def parse_spec(spec: str) -> tuple[str, str | None, str]:
    """``"backbone@gpu0=pkg.mod:run"`` -> ``("backbone", "gpu0", "pkg.mod:run")``; the engine may be None."""
    target, equals, path = spec.partition("=")
    stage, _, engine = target.strip().partition("@")
    path = path.strip()
    if not equals or not stage:
        raise LoadprobeError(f"executor {spec!r}: no STAGE= before the import path; {HOW}")
    if not _IMPORT_PATH.match(path):
        raise LoadprobeError(f"executor {spec!r}: {path!r} is not an import path MODULE:NAME; {HOW}")
    return stage, engine or None, path


def executor_paths(config: PipelineConfig,
                   specs: Iterable[str] | Mapping[str, str] | None) -> dict[tuple[str, str], str]:
    """``{(stage, engine): "module:name"}`` for each engine a stage runs on (``runs_on``) that has one.

    ``specs`` are ``STAGE[@ENGINE]=MODULE:NAME`` texts, or a mapping ``{"STAGE[@ENGINE]": "MODULE:NAME"}``.
    An ``@ENGINE`` entry wins over its stage's plain one. Unknown stages or engines, or a stage
    given twice, are a LoadprobeError naming what the plan has.
    """
    if specs is None:
        return {}
    if isinstance(specs, Mapping):
        specs = [f"{key}={value}" for key, value in specs.items()]
    stages = {stage.name: stage for stage in config.stages}
    plain: dict[str, str] = {}
    pinned: dict[tuple[str, str], str] = {}
    for spec in specs:
        name, engine, path = parse_spec(spec)
        stage = stages.get(name)
        if stage is None:
            raise LoadprobeError(f"executor {spec!r}: the plan has no stage {name!r}; its stages are: "
                                 f"{listed(stages, 8)}")
        if engine is not None and engine not in stage.runs_on:
            raise LoadprobeError(f"executor {spec!r}: stage {name!r} runs on {' and '.join(stage.runs_on)}, "
                                 f"not {engine!r}")
        key = (name, engine) if engine else name
        table = pinned if engine else plain
        if key in table:
            raise LoadprobeError(f"executor {spec!r}: {name}{'@' + engine if engine else ''} is given twice")
        table[key] = path  # type: ignore[index]
    found = {}
    for stage in config.stages:
        for engine in stage.runs_on:
            path = pinned.get((stage.name, engine), plain.get(stage.name))
            if path is not None:
                found[(stage.name, engine)] = path
    return found


def check_importable(paths: Iterable[str]) -> None:
    """Import each ``module:name`` and look the name up: a LoadprobeError names the first that fails.

    The exported server imports them the same way when it starts; finding a typo here costs a
    second, finding it there a failed deployment. Module code runs, as it will in the server. The
    current folder is searched too (the ``loadprobe`` command, unlike ``python``, does not add it):
    export is run from the service's own folder.
    """
    import os
    import sys

    added = os.getcwd() not in sys.path
    if added:
        sys.path.append(os.getcwd())  # last: it never shadows an installed module
    try:
        for path in sorted(set(paths)):
            _check_one(path)
    finally:
        if added:  # the caller's sys.path as it was (export() is public API too)
            sys.path.remove(os.getcwd())


def _check_one(path: str) -> None:
    import importlib

    module_name, _, attribute = path.partition(":")
    try:
        found = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's import is reported, not raised
        why = f"{type(exc).__name__}: {exc}" if not isinstance(exc, AttributeError) else \
            f"{module_name} has no {attribute}"
        raise LoadprobeError(f"executor {path}: cannot import it ({why}); run export from the service's folder "
                             "or with its code on PYTHONPATH, or pass --no-import-check to write it unchecked") \
            from None
    if not callable(found):
        raise LoadprobeError(f"executor {path}: {type(found).__name__} is not callable; name the function or "
                             "class that runs the stage")
