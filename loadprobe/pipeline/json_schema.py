"""pipeline.yaml's JSON Schema (loadprobe/pipeline.schema.json): the schema, its limits, its errors in words.

Usage::

    schema()                                   # the JSON Schema, a fresh copy
    maximum("engine", "max_queue")             # 10000000: a limit the planner keeps within
    schema_problems(data)                      # [(path, message, at the key)] for plain data read from YAML
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any, Mapping

from .names import NAME_RULE as _NAME_RULE

__all__ = ["maximum", "schema", "schema_problems"]


@functools.cache
def _schema_text() -> str:
    return resources.files("loadprobe").joinpath("pipeline.schema.json").read_text(encoding="utf-8")


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of pipeline.yaml v1: a fresh copy of loadprobe/pipeline.schema.json."""
    return json.loads(_schema_text())


@functools.cache
def maximum(definition: str, *fields: str) -> float:
    """The schema's ``maximum`` of a field: ``maximum("stage", "batch", "max_wait_ms")`` is 60000.

    ``definition`` names an entry of ``$defs`` (stage, engine, slo, routing); each of ``fields``
    one property deeper; a ``$ref`` on the way is followed. Whatever writes a pipeline.yaml
    (the planner) keeps within these rather than copies of them.
    """
    defs = json.loads(_schema_text())["$defs"]
    node = defs[definition]
    for name in fields:
        node = node["properties"][name]
        while "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node["maximum"]


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


def schema_problems(data: Any) -> list[tuple[tuple, str, bool]]:
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
