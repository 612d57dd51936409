"""Every problem of a pipeline.yaml text, each at its line and column: YAML, schema, then references.

Usage::

    problems = validate_text(text, "pipeline.yaml")   # [Problem(line, column, path, message)], sorted
    problems, data = check(text, "pipeline.yaml", catalog=None)   # data: plain dicts when there is no problem
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from typing import Any, Mapping

import yaml

from .json_schema import schema_problems
from .problems import Problem
from .safe_yaml import TAG, Unreadable, Walk, compose

__all__ = ["MAX_BYTES", "TOO_BIG", "check", "validate_text"]

MAX_BYTES = 1 << 20  # a real plan is a few KiB; the cap bounds parsing time and memory
TOO_BIG = f"larger than {MAX_BYTES >> 20} MiB; a pipeline.yaml is a few KiB, is this the right file?"


# Files loadprobe writes that a user may hand over instead, told apart by keys only they have.
_OTHER_FILES = (("recommended", "a plans.json (loadprobe recommend's options side by side)"),
                ("data_quality", "a portrait.json (loadprobe analyze's output)"),
                ("arrivals", "a simulation.json (loadprobe simulate's output)"),
                ("before", "a verify.json (loadprobe verify's output)"))


def _another_kind(data: Any) -> str | None:
    if not isinstance(data, dict) or isinstance(data.get("engines"), dict):
        return None
    return next((what for key, what in _OTHER_FILES if key in data), None)


def validate_text(text: str, source: str = "<string>", *, catalog: Any = None) -> list[Problem]:
    """Every problem in ``text`` (pipeline.yaml content), sorted by position; [] when it is valid.

    ``catalog`` (a loadprobe.catalog.Catalog) checks engine devices; default: the packaged catalog.
    """
    return check(text, source, catalog)[0]


def check(text: str, source: str, catalog: Any) -> tuple[list[Problem], Any]:
    """``(problems, data)``: every problem sorted by position, and the plain data when there is none (else None)."""
    def fatal(exc: Unreadable) -> tuple[list[Problem], None]:
        return [Problem(exc.line, exc.column, "", exc.message, source)], None

    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        return fatal(Unreadable(TOO_BIG))
    walk = Walk()
    try:
        node = compose(text)
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == TAG + "null"):
            return fatal(Unreadable("the file is empty; a pipeline.yaml starts with 'version: 1' "
                                "(example: docs/pipeline.md)"))
        if not isinstance(node, yaml.MappingNode):
            got = "a list" if isinstance(node, yaml.SequenceNode) else f"the value {node.value[:40]!r}"
            raise Unreadable(f"expected a mapping of 'key: value' lines at the top level, got {got}", node.start_mark)
        data = walk(node)
    except Unreadable as exc:
        return fatal(exc)
    other = _another_kind(data)
    if other:  # one line, not a problem per field of a file that was never meant to be a plan
        return fatal(Unreadable(f"this is {other}, not a pipeline.yaml; give the pipeline.yaml "
                                "(loadprobe recommend writes it beside plans.json)"))

    found: dict[tuple, tuple[str, bool]] = {}  # path -> (message, located at the key); one problem per place
    for path, message, at_key in walk.problems + schema_problems(data):
        found.setdefault(path, (message, at_key))
    for path, message, at_key in _semantic_problems(data, walk, catalog):
        if not any(path[:len(p)] == p for p in found):  # a schema problem there already says enough
            found[path] = (message, at_key)

    def where(path: tuple, at_key: bool) -> tuple[int, int]:
        # an unknown or misnamed key is shown at the key; a value at its start; a missing field at its parent
        if at_key and path in walk.keys:
            return walk.keys[path]
        while path not in walk.values:
            path = path[:-1]
        return walk.values[path]

    problems = [Problem(*where(path, at_key), _path_text(path), message, source)
                for path, (message, at_key) in found.items()]
    problems.sort(key=lambda p: (p.line, p.column, p.path))
    return problems, (None if problems else data)


def _path_text(path: tuple) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


# The rules a JSON Schema cannot express: references between entries, and the hardware catalog.

def _semantic_problems(data: Mapping[str, Any], walk: Walk, catalog: Any) -> list[tuple[tuple, str, bool]]:
    out: list[tuple[tuple, str]] = []
    engines = data.get("engines") if isinstance(data.get("engines"), dict) else {}
    stages = data.get("stages") if isinstance(data.get("stages"), list) else []
    known = ", ".join(engines) or "none"
    first_at: dict[str, int] = {}
    for i, stage in enumerate(stages):
        if not isinstance(stage, dict):
            continue
        name, engine = stage.get("name"), stage.get("engine")
        if isinstance(name, str):
            if name in first_at:
                j = first_at[name]
                out.append((("stages", i, "name"), f"duplicate stage name {name!r}; stages[{j}] (line "
                                                   f"{walk.values[('stages', j, 'name')][0]}) has it too"))
            else:
                first_at[name] = i
        if isinstance(engine, str) and engine not in engines:
            out.append((("stages", i, "engine"), f"unknown engine {engine!r}; the engines are: {known}"))
        fallback = stage.get("fallback")
        target = fallback.get("engine") if isinstance(fallback, dict) else None
        if isinstance(target, str):
            where = ("stages", i, "fallback", "engine")
            if target not in engines:
                out.append((where, f"unknown engine {target!r}; the engines are: {known}"))
            elif target == engine:
                # Fallback is one hop, so this is the only way a fallback chain can come back to where it
                # started (docs/pipeline.md, "Fallback").
                out.append((where, f"falls back to its own engine {target!r}, a fallback cycle; name another "
                                   f"engine, or remove fallback"))
        if stage.get("keep_fp16") and stage.get("precision") != "int8":
            has = f"precision: {stage['precision']}" if stage.get("precision") else "no precision"
            out.append((("stages", i, "keep_fp16"), f"only applies with precision: int8, and the stage has {has}"))
    host = data.get("host") if isinstance(data.get("host"), dict) else {}
    if isinstance(host.get("engine"), str):
        engine = engines.get(host["engine"])
        if engine is None:
            out.append((("host", "engine"), f"unknown engine {host['engine']!r}; the engines are: {known}"))
        elif isinstance(engine, dict) and engine.get("kind") != "cpu":
            out.append((("host", "engine"), f"the service's own work runs on a CPU engine, and {host['engine']!r} "
                                            f"is a {engine.get('kind')}; name the plan's CPU engine"))
    calibration = data.get("calibration") if isinstance(data.get("calibration"), dict) else {}
    calibrated = calibration.get("stages") if isinstance(calibration.get("stages"), dict) else {}
    for name in calibrated:
        if name not in first_at:
            out.append((("calibration", "stages", name), f"no stage {name!r} in this plan; its stages are: "
                                                         f"{', '.join(first_at) or 'none'}"))
    llm = data.get("llm") if isinstance(data.get("llm"), dict) else {}
    pools = llm.get("pools") if isinstance(llm.get("pools"), dict) else {}
    for name, pool in pools.items():
        engine = engines.get(name)
        if engine is None:
            out.append((("llm", "pools", name), f"no engine {name!r} in this plan; the engines are: {known}"))
        elif isinstance(pool, dict) and isinstance(engine, dict) and isinstance(pool.get("replicas"), int):
            devices = pool["replicas"] * pool.get("tensor_parallel", 1)
            if engine.get("count", 1) != devices:
                out.append((("llm", "pools", name, "replicas"), f"{pool['replicas']} replicas x tensor_parallel "
                                                                f"{pool.get('tensor_parallel', 1)} = {devices} devices, "
                                                                f"and engine {name!r} has count {engine.get('count', 1)}"))
    for name, engine in engines.items():
        if isinstance(engine, dict) and "cores" in engine and engine.get("kind") in ("gpu", "npu"):
            out.append((("engines", name, "cores"), f"only a cpu engine has cores, and this one is a "
                                                    f"{engine['kind']}; remove cores (count is its devices)"))
        if isinstance(engine, dict) and isinstance(engine.get("device"), str):
            message = _device_problem(engine["device"], engine.get("kind"), catalog)
            if message:
                out.append((("engines", name, "device"), message))
    return [(path, message, False) for path, message in out]


@functools.cache
def _packaged_catalog() -> Any:
    from ..catalog import load_catalog

    return load_catalog()


def _device_problem(device_id: str, kind: Any, catalog: Any) -> str | None:
    catalog = catalog if catalog is not None else _packaged_catalog()
    same_kind = [d.id for d in catalog if d.kind == kind]
    choices = f"{kind} devices in the catalog: {', '.join(same_kind)}" if 0 < len(same_kind) <= 12 else \
        "see docs/catalog.md for the ids"
    if device_id not in catalog:
        close = difflib.get_close_matches(device_id, catalog.ids(), n=2, cutoff=0.6)
        guess = f"did you mean {' or '.join(close)}? " if close else ""
        return f"unknown device {device_id!r} in the hardware catalog; {guess}{choices}"
    device = catalog.get(device_id)
    if kind in ("cpu", "gpu", "npu") and device.kind != kind:
        return f"{device_id!r} is a {device.kind}, but the engine's kind is {kind}; {choices}"
    return None
