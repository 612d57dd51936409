"""pipeline.yaml v1: the stage-to-engine plan that loadprobe's runtime executes and its simulator replays.

    from loadprobe import pipeline

    config = pipeline.load("pipeline.yaml")        # PipelineConfig; PipelineError lists every problem
    config.stages[0].engine, config.engines["npu0"].max_queue
    problems = pipeline.validate_text(text, "pipeline.yaml")   # [Problem(line, column, path, message)]
    pipeline.save(config, "pipeline.yaml", overwrite=True)     # YAML in schema order, via temp file + rename
    pipeline.schema()                                          # the JSON Schema (pipeline.schema.json)

Every field is described in docs/pipeline.md. The file is untrusted input: it is read with a safe
loader that also refuses anchors and aliases (so "billion laughs" documents are rejected before
anything is expanded), tags other than the plain YAML ones, more than one document, nesting
deeper than ``MAX_DEPTH`` and files over ``MAX_BYTES``.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import os
import re
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml

from .._errors import LoadprobeError
from .._files import write_file

__all__ = [
    "BatchConfig", "BreakerConfig", "CanaryConfig", "EngineConfig", "FallbackConfig", "FallbackWhen",
    "InputConfig", "MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "PipelineConfig", "PipelineError", "Problem", "RetryBudgetConfig",
    "RetryConfig", "RoutingConfig", "SLOConfig", "ServiceTimeConfig", "ShedConfig", "StageConfig", "dump",
    "load", "loads", "save", "schema", "validate_text",
]

MAX_BYTES = 1 << 20  # a real plan is a few KiB; the cap bounds parsing time and memory
MAX_DEPTH = 32  # the format nests 5 levels; PyYAML's composer recurses, so deep input must stop early
# PyYAML parses ~50,000 values a second; a real plan has a few thousand. Stops 1 MiB of "1," early.
MAX_NODES = 50_000
MAX_SHOWN = 100  # problems listed in a PipelineError message
HEADER = "# loadprobe pipeline.yaml v1; every field is described in docs/pipeline.md\n"


# --- The configuration. Field order is the schema's order, which dump() follows. -----------------------------

def _nested(cls: type, **kwargs: Any) -> Any:
    """A field holding another config class (or, with ``many="list"``/``"map"``, a list or map of them)."""
    return field(metadata={"nested": cls, "many": kwargs.pop("many", None)}, **kwargs)


@dataclass(frozen=True, kw_only=True)
class SLOConfig:
    p95_ms: float | None = None
    p99_ms: float | None = None
    min_rps: float | None = None


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    kind: str
    device: str | None = None
    count: int = 1
    max_concurrency: int
    max_queue: int
    power_w: float | None = None
    why: str | None = None


@dataclass(frozen=True, kw_only=True)
class InputConfig:
    shape: tuple[int | None, ...] | None = None
    dynamic: bool = False

    def __post_init__(self) -> None:
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(self.shape))


@dataclass(frozen=True, kw_only=True)
class BatchConfig:
    size: int
    max_wait_ms: float = 0


@dataclass(frozen=True, kw_only=True)
class RetryConfig:
    max_attempts: int


@dataclass(frozen=True, kw_only=True)
class FallbackWhen:
    queue_len_over: int


@dataclass(frozen=True, kw_only=True)
class FallbackConfig:
    engine: str
    when: FallbackWhen | None = _nested(FallbackWhen, default=None)
    max_ratio: float = 1.0
    otherwise: str = "reject"


@dataclass(frozen=True, kw_only=True)
class BreakerConfig:
    error_rate_over: float
    window_s: float = 10
    min_requests: int = 20
    open_s: float = 5


@dataclass(frozen=True, kw_only=True)
class ServiceTimeConfig:
    p50: float | None = None
    p95: float | None = None
    source: str


@dataclass(frozen=True, kw_only=True)
class StageConfig:
    name: str
    engine: str
    precision: str | None = None
    keep_fp16: tuple[str, ...] = ()
    input: InputConfig | None = _nested(InputConfig, default=None)
    batch: BatchConfig | None = _nested(BatchConfig, default=None)
    timeout_ms: float
    max_concurrency: int | None = None
    retry: RetryConfig | None = _nested(RetryConfig, default=None)
    fallback: FallbackConfig | None = _nested(FallbackConfig, default=None)
    breaker: BreakerConfig | None = _nested(BreakerConfig, default=None)
    service_time_ms: ServiceTimeConfig | None = _nested(ServiceTimeConfig, default=None)
    why: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keep_fp16", tuple(self.keep_fp16))
        object.__setattr__(self, "why", dict(self.why))

    @property
    def runs_on(self) -> tuple[str, ...]:
        """The engines an attempt of this stage may run on: its own, then its fallback's."""
        return (self.engine, self.fallback.engine) if self.fallback else (self.engine,)


@dataclass(frozen=True, kw_only=True)
class RetryBudgetConfig:
    budget_ratio: float
    max_attempts: int


@dataclass(frozen=True, kw_only=True)
class ShedConfig:
    by: str


@dataclass(frozen=True, kw_only=True)
class CanaryConfig:
    config: str
    weight: float


DEFAULT_WINDOW_S = 10.0


@dataclass(frozen=True, kw_only=True)
class RoutingConfig:
    retry: RetryBudgetConfig | None = _nested(RetryBudgetConfig, default=None)
    shed: ShedConfig | None = _nested(ShedConfig, default=None)
    window_s: float | None = None
    canary: CanaryConfig | None = _nested(CanaryConfig, default=None)


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """A whole plan. Build one from keywords, or read one with :func:`load`; lists become tuples.

    The mappings (``engines``, ``why``) are plain dicts: treat them as read-only.
    """

    version: int = 1
    service: str
    slo: SLOConfig | None = _nested(SLOConfig, default=None)
    engines: Mapping[str, EngineConfig] = _nested(EngineConfig, many="map")
    stages: tuple[StageConfig, ...] = _nested(StageConfig, many="list")
    routing: RoutingConfig | None = _nested(RoutingConfig, default=None)
    why: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "engines", dict(self.engines))
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "why", dict(self.why))

    @property
    def window_s(self) -> float:
        """The routing window (``routing.window_s``), 10 s when the file gives none."""
        given = self.routing.window_s if self.routing is not None else None
        return DEFAULT_WINDOW_S if given is None else given


def _from_plain(cls: type, data: Mapping[str, Any]) -> Any:
    """The config object for schema-valid ``data`` (a dict read from YAML)."""
    kwargs = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value, nested, many = data[f.name], f.metadata.get("nested"), f.metadata.get("many")
        if nested and value is not None:
            if many == "list":
                value = [_from_plain(nested, item) for item in value]
            elif many == "map":
                value = {key: _from_plain(nested, item) for key, item in value.items()}
            else:
                value = _from_plain(nested, value)
        kwargs[f.name] = value
    return cls(**kwargs)


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


# --- Problems ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    """One thing wrong with a file: where (1-based line and column, and the field path) and what."""

    line: int
    column: int
    path: str  # "stages[1].batch.size"; "" for the file as a whole
    message: str
    source: str = "<string>"

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.source}:{self.line}:{self.column}: {where}{self.message}"


class PipelineError(LoadprobeError):
    """A pipeline file with problems; the message lists each one on its own line after a summary."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = list(problems)
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        summary = f"{source}: {count}; not a valid pipeline.yaml v1 (fields: docs/pipeline.md)"
        lines = [summary, *map(str, problems[:MAX_SHOWN])]
        if len(problems) > MAX_SHOWN:
            lines.append(f"{source}: ... and {len(problems) - MAX_SHOWN:,} more")
        super().__init__("\n".join(lines))


class _Fatal(Exception):
    """Stops reading: the text cannot be turned into data at all."""

    def __init__(self, message: str, mark: Any = None, *, line: int = 1, column: int = 1):
        super().__init__(message)
        self.message = message
        self.line, self.column = (mark.line + 1, mark.column + 1) if mark is not None else (line, column)


# --- Reading YAML safely, remembering where each value was -------------------------------------------------------

_YAML = "tag:yaml.org,2002:"
# The tags a plain YAML document uses; anything else (!!python/object, !!binary, !custom) is refused.
_PLAIN_TAGS = {"!"} | {_YAML + t for t in ("str", "int", "float", "bool", "null", "seq", "map")}


class _Loader(yaml.SafeLoader):
    """A SafeLoader that only composes nodes, and refuses anchors, aliases, odd tags and deep nesting.

    Refusing every anchor stops alias bombs at the first ``&``: no node is ever shared, so nothing
    can be expanded. Turning nodes into Python values is :class:`_Walk`'s job, not PyYAML's.
    """

    def __init__(self, text: str):
        super().__init__(text)
        self._depth = self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Fatal("YAML anchors and aliases (&name, *name) are not allowed in pipeline.yaml; "
                         "write each value out in full", event.start_mark)
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in _PLAIN_TAGS:
            shown = "!!" + tag[len(_YAML):] if tag.startswith(_YAML) else tag
            raise _Fatal(f"the YAML tag {shown} is not allowed; pipeline.yaml holds plain values only "
                         f"(text, numbers, true/false, null, lists and mappings)", event.start_mark)
        self._depth += 1
        self._nodes += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Fatal(f"nested deeper than {MAX_DEPTH} levels; pipeline.yaml nests 5 at most",
                             event.start_mark)
            if self._nodes > MAX_NODES:
                raise _Fatal(f"more than {MAX_NODES:,} values; a pipeline.yaml has a few thousand",
                             event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _compose(text: str) -> yaml.Node | None:
    """The single document's node tree, or None for an empty file; raises _Fatal."""
    loader = None
    try:
        loader = _Loader(text)  # the reader checks for control characters here
        loader.get_event()  # StreamStartEvent
        if loader.check_event(yaml.StreamEndEvent):
            return None
        node = loader.compose_document()
        if not loader.check_event(yaml.StreamEndEvent):
            raise _Fatal("a second YAML document starts here; pipeline.yaml holds exactly one",
                         loader.peek_event().start_mark)
        return node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        context = f" ({exc.context})" if exc.context else ""
        raise _Fatal(f"not valid YAML: {exc.problem}{context}", mark) from None
    except yaml.reader.ReaderError as exc:  # a control character or bad encoding: no mark, a position
        before = text[:exc.position]
        character = chr(exc.character) if isinstance(exc.character, int) else exc.character
        raise _Fatal(f"not valid YAML: the control character {character!r} is not allowed; remove it",
                     line=before.count("\n") + 1, column=len(before) - before.rfind("\n")) from None
    finally:
        if loader is not None:
            loader.dispose()


class _Walk:
    """Plain Python data from a node tree, with the 1-based (line, column) of every value and key."""

    def __init__(self) -> None:
        self.values: dict[tuple, tuple[int, int]] = {}
        self.keys: dict[tuple, tuple[int, int]] = {}
        self.problems: list[tuple[tuple, str, bool]] = []  # (path, message, at the key)
        self._scalars = _Loader("")  # for PyYAML's scalar conversions (ints with _, 0x, .inf ...)

    def __call__(self, node: yaml.Node, path: tuple = ()) -> Any:
        self.values[path] = _at(node.start_mark)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise _Fatal("a key must be plain text, not a list or mapping", key_node.start_mark)
                # The key's text as written: "on:" or "yes:" stays a name instead of turning into true.
                key = key_node.value
                if key in out:
                    first = self.keys[(*path, key)][0]
                    self.problems.append(((*path, key), f"duplicate key {key!r} (first on line {first}); "
                                                        f"YAML would keep only the last, so remove one", True))
                self.keys[(*path, key)] = _at(key_node.start_mark)
                out[key] = self(value_node, (*path, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self(item, (*path, i)) for i, item in enumerate(node.value)]
        return self._scalar(node, path)

    def _scalar(self, node: yaml.ScalarNode, path: tuple) -> Any:
        kind = node.tag[len(_YAML):] if node.tag.startswith(_YAML) else "str"
        try:
            if kind == "int":
                return self._scalars.construct_yaml_int(node)
            if kind == "float":
                value = self._scalars.construct_yaml_float(node)
                if math.isnan(value):  # NaN passes every comparison in a JSON Schema, so catch it here
                    self.problems.append((path, f"{node.value} is not a number", False))
                return value
            if kind == "bool":
                return self._scalars.construct_yaml_bool(node)
            if kind == "null":
                return None
        except (ValueError, KeyError, IndexError):  # 5,000 digits; or !!int "", !!bool maybe
            shown = node.value if len(node.value) <= 20 else node.value[:20] + "..."
            raise _Fatal(f"{shown!r} cannot be read as !!{kind}", node.start_mark) from None
        # str, and the implicit timestamp/value tags: keep the text as written ("2024-01-01" names a service)
        return node.value


def _at(mark: Any) -> tuple[int, int]:
    return mark.line + 1, mark.column + 1


# --- Checking ----------------------------------------------------------------------------------------------------

_TOO_BIG = f"larger than {MAX_BYTES >> 20} MiB; a pipeline.yaml is a few KiB, is this the right file?"


def validate_text(text: str, source: str = "<string>", *, catalog: Any = None) -> list[Problem]:
    """Every problem in ``text`` (pipeline.yaml content), sorted by position; [] when it is valid.

    ``catalog`` (a loadprobe.catalog.Catalog) checks engine devices; default: the packaged catalog.
    """
    return _check(text, source, catalog)[0]


def _check(text: str, source: str, catalog: Any) -> tuple[list[Problem], Any]:
    def fatal(exc: _Fatal) -> tuple[list[Problem], None]:
        return [Problem(exc.line, exc.column, "", exc.message, source)], None

    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        return fatal(_Fatal(_TOO_BIG))
    walk = _Walk()
    try:
        node = _compose(text)
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == _YAML + "null"):
            return fatal(_Fatal("the file is empty; a pipeline.yaml starts with 'version: 1' "
                                "(example: docs/pipeline.md)"))
        if not isinstance(node, yaml.MappingNode):
            got = "a list" if isinstance(node, yaml.SequenceNode) else f"the value {node.value[:40]!r}"
            raise _Fatal(f"expected a mapping of 'key: value' lines at the top level, got {got}", node.start_mark)
        data = walk(node)
    except _Fatal as exc:
        return fatal(exc)

    found: dict[tuple, tuple[str, bool]] = {}  # path -> (message, located at the key); one problem per place
    for path, message, at_key in walk.problems + _schema_problems(data):
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


@functools.cache
def _schema_text() -> str:
    return resources.files("loadprobe").joinpath("pipeline.schema.json").read_text(encoding="utf-8")


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of pipeline.yaml v1: a fresh copy of loadprobe/pipeline.schema.json."""
    return json.loads(_schema_text())


@functools.cache
def _validator() -> Any:
    # Imported here: the recommender and the runtime can build configs without loading jsonschema.
    from jsonschema import Draft202012Validator, validators

    # JSON Schema counts 2.0 as an integer; in a config "count: 2.0" is more likely a mistake.
    checker = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool))
    return validators.extend(Draft202012Validator, type_checker=checker)(schema())


_TYPES = {"integer": "a whole number", "number": "a number", "string": "text", "object": "a mapping",
          "array": "a list", "boolean": "true or false", "null": "null"}
_NAME_RULE = "a name starts with a letter, then up to 63 letters, digits, '_', '.' or '-'"


def _schema_problems(data: Any) -> list[tuple[tuple, str, bool]]:
    out = []
    for error in _validator().iter_errors(data):
        path, value, rule, schema_ = tuple(error.absolute_path), error.instance, error.validator, error.schema
        if "propertyNames" in error.absolute_schema_path:  # a bad key: the problem is at the key itself
            path = (*path, value)
            allowed = f"one of {', '.join(schema_['enum'])}" if rule == "enum" else _NAME_RULE
            out.append((path, f"{_show(value)} is not allowed as a key here; {allowed}", True))
        elif rule == "additionalProperties":
            allowed = ", ".join(schema_.get("properties", {}))
            for key in value:
                if key not in schema_.get("properties", {}):
                    out.append(((*path, key), f"unknown key; expected one of: {allowed}", True))
        elif rule == "required":
            for key in error.validator_value:
                if key not in value:
                    out.append(((*path, key), "required, but missing", False))
        else:
            out.append((path, _message(rule, value, error.validator_value, schema_) or error.message, False))
    return out


def _message(rule: str, value: Any, limit: Any, schema_: Mapping[str, Any]) -> str | None:
    if rule == "type":
        wanted = " or ".join(_TYPES[t] for t in ([limit] if isinstance(limit, str) else limit))
        return f"expected {wanted}, got {_show(value)}{_number_hint(value, 'integer' in limit)}"
    if rule in ("minimum", "maximum", "exclusiveMinimum"):
        relation = {"minimum": "less than the minimum of", "maximum": "greater than the maximum of",
                    "exclusiveMinimum": "not greater than"}[rule]
        return f"{_show(value)} is {relation} {_number(limit)} ({_range(schema_)})"
    if rule == "enum":
        return f"{_show(value)} is not one of: {', '.join(map(str, limit))}"
    if rule == "const":
        return f"{_show(value)} is not supported; expected {_show(limit)}"
    if rule == "pattern":
        if "A-Za-z" in str(limit):
            return f"{_show(value)} is not a valid name; {_NAME_RULE}"
        return f"{_show(value)} holds control characters; a stage name is printable text"
    if rule == "minLength":
        return "must not be empty"
    if rule == "maxLength":
        return f"longer than {limit} characters"
    if rule in ("minItems", "minProperties"):
        return f"empty; at least {limit} needed"
    if rule in ("maxItems", "maxProperties"):
        return f"{len(value)} entries; at most {limit} allowed"
    if rule == "uniqueItems":
        repeated = next(v for i, v in enumerate(value) if v in value[:i])
        return f"{_show(repeated)} is listed twice"
    return None


def _range(schema_: Mapping[str, Any]) -> str:
    if "exclusiveMinimum" in schema_:
        low = f"more than {_number(schema_['exclusiveMinimum'])}"
    else:
        low = _number(schema_.get("minimum"))
    return f"allowed: {low} to {_number(schema_.get('maximum'))}"


def _number_hint(value: Any, integer: bool) -> str:
    """How to write a number that YAML read as text."""
    if not isinstance(value, str):
        return ""
    if integer and re.fullmatch(r"[-+]?[0-9.]+[eE][-+]?[0-9]+", value.strip()):
        number = float(value)
        return f"; write it in digits: {int(number)}" if number.is_integer() and abs(number) < 1e18 else ""
    # PyYAML (YAML 1.1) reads 1e9 as text: a float needs a dot and a signed exponent
    exponent = re.fullmatch(r"([-+]?[0-9]+)(?:\.([0-9]*))?[eE]([-+]?)([0-9]+)", value.strip())
    if exponent:
        whole, fraction, sign, power = exponent.groups()
        return f"; in YAML write {whole}.{fraction or 0}e{sign or '+'}{power}"
    try:
        float(value)
    except ValueError:
        return ""
    return "; write the number without quotes"


def _number(value: Any) -> str:
    return "?" if value is None else repr(value)


def _show(value: Any) -> str:
    """A value as YAML would spell it, short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:36] + "...'"


# The rules a JSON Schema cannot express: references between entries, and the hardware catalog.

def _semantic_problems(data: Mapping[str, Any], walk: _Walk, catalog: Any) -> list[tuple[tuple, str, bool]]:
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
    for name, engine in engines.items():
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


# --- Reading and writing files -----------------------------------------------------------------------------------

def loads(text: str, source: str = "<string>", *, catalog: Any = None) -> PipelineConfig:
    """The plan in ``text``; PipelineError (a LoadprobeError) lists every problem with its line and column."""
    problems, data = _check(text, source, catalog)
    if problems:
        raise PipelineError(source, problems)
    return _from_plain(PipelineConfig, data)


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
        raise PipelineError(source, [Problem(1, 1, "", _TOO_BIG, source)])
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


_Dumper.add_representer(_Flow, lambda d, v: d.represent_sequence(_YAML + "seq", v, flow_style=True))
_Dumper.add_representer(str, lambda d, v: d.represent_scalar(_YAML + "str", v, style="|" if "\n" in v else None))


def dump(config: PipelineConfig) -> str:
    """The plan as pipeline.yaml text: block style, keys in the schema's order, None fields left out.

    ``loads(dump(c)) == c``; the text does not depend on how ``c`` was made.
    """
    body = yaml.dump(_to_plain(config), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=100)
    return HEADER + body


def save(config: PipelineConfig, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write the plan to ``path`` after checking it; an existing file is only replaced with ``overwrite``.

    The text goes to a temporary file next to ``path`` that is then renamed over it, so a reader never
    sees half a plan. Returns ``path``.
    """
    path = Path(path)
    text = dump(config)
    problems = validate_text(text, str(path))
    if problems:  # a plan built in code can break rules the dataclasses do not check
        raise PipelineError(str(path), problems)
    if path.exists() and not overwrite:
        raise LoadprobeError(f"{path} already exists; use --force (overwrite=True) to replace it")
    try:
        write_file(path, text, durable=True, overwrite=overwrite)
    except OSError as exc:
        raise LoadprobeError(f"{path}: cannot write the pipeline file ({exc.strerror or exc})") from None
    return path
