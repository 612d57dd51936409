"""Reading pipeline.yaml's YAML safely, remembering the line and column of every key and value.

The file is untrusted input: ``compose`` refuses anchors and aliases (so "billion laughs"
documents are rejected before anything is expanded), tags other than the plain YAML ones,
more than one document, nesting deeper than ``MAX_DEPTH`` and more than ``MAX_NODES`` values;
``Walk`` turns the node tree into plain data, keeping keys as written ("on:" stays a name).

Usage::

    try:
        node = compose(text)                   # None for an empty file
        walk = Walk()
        data = walk(node)                      # dicts, lists, scalars
        walk.values[("stages", 0, "name")]     # (line, column), 1-based; walk.problems: duplicate keys, NaN
    except Unreadable as exc:
        exc.line, exc.column, exc.message
"""

from __future__ import annotations

import math
from typing import Any

import yaml

__all__ = ["MAX_DEPTH", "MAX_NODES", "TAG", "StrictLoader", "Unreadable", "Walk", "compose"]

MAX_DEPTH = 32  # the format nests 5 levels; PyYAML's composer recurses, so deep input must stop early
# PyYAML parses ~50,000 values a second; a real plan has a few thousand. Stops 1 MiB of "1," early.
MAX_NODES = 50_000
TAG = "tag:yaml.org,2002:"
# The tags a plain YAML document uses; anything else (!!python/object, !!binary, !custom) is refused.
_PLAIN_TAGS = {"!"} | {TAG + t for t in ("str", "int", "float", "bool", "null", "seq", "map")}


class Unreadable(Exception):
    """Stops reading: the text cannot be turned into data at all."""

    def __init__(self, message: str, mark: Any = None, *, line: int = 1, column: int = 1):
        super().__init__(message)
        self.message = message
        self.line, self.column = (mark.line + 1, mark.column + 1) if mark is not None else (line, column)


class StrictLoader(yaml.SafeLoader):
    """A SafeLoader that only composes nodes, and refuses anchors, aliases, odd tags and deep nesting.

    Refusing every anchor stops alias bombs at the first ``&``: no node is ever shared, so nothing
    can be expanded. Turning nodes into Python values is :class:`Walk`'s job, not PyYAML's.
    """

    def __init__(self, text: str):
        super().__init__(text)
        self._depth = self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise Unreadable("YAML anchors and aliases (&name, *name) are not allowed in pipeline.yaml; "
                         "write each value out in full", event.start_mark)
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in _PLAIN_TAGS:
            shown = "!!" + tag[len(TAG):] if tag.startswith(TAG) else tag
            raise Unreadable(f"the YAML tag {shown} is not allowed; pipeline.yaml holds plain values only "
                         f"(text, numbers, true/false, null, lists and mappings)", event.start_mark)
        self._depth += 1
        self._nodes += 1
        try:
            if self._depth > MAX_DEPTH:
                raise Unreadable(f"nested deeper than {MAX_DEPTH} levels; pipeline.yaml nests 5 at most",
                             event.start_mark)
            if self._nodes > MAX_NODES:
                raise Unreadable(f"more than {MAX_NODES:,} values; a pipeline.yaml has a few thousand",
                             event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def compose(text: str) -> yaml.Node | None:
    """The single document's node tree, or None for an empty file; raises Unreadable."""
    loader = None
    try:
        loader = StrictLoader(text)  # the reader checks for control characters here
        loader.get_event()  # StreamStartEvent
        if loader.check_event(yaml.StreamEndEvent):
            return None
        node = loader.compose_document()
        if not loader.check_event(yaml.StreamEndEvent):
            raise Unreadable("a second YAML document starts here; pipeline.yaml holds exactly one",
                         loader.peek_event().start_mark)
        return node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        context = f" ({exc.context})" if exc.context else ""
        raise Unreadable(f"not valid YAML: {exc.problem}{context}", mark) from None
    except yaml.reader.ReaderError as exc:  # a control character or bad encoding: no mark, a position
        before = text[:exc.position]
        character = chr(exc.character) if isinstance(exc.character, int) else exc.character
        raise Unreadable(f"not valid YAML: the control character {character!r} is not allowed; remove it",
                     line=before.count("\n") + 1, column=len(before) - before.rfind("\n")) from None
    finally:
        if loader is not None:
            loader.dispose()


class Walk:
    """Plain Python data from a node tree, with the 1-based (line, column) of every value and key."""

    def __init__(self) -> None:
        self.values: dict[tuple, tuple[int, int]] = {}
        self.keys: dict[tuple, tuple[int, int]] = {}
        self.problems: list[tuple[tuple, str, bool]] = []  # (path, message, at the key)
        self._scalars = StrictLoader("")  # for PyYAML's scalar conversions (ints with _, 0x, .inf ...)

    def __call__(self, node: yaml.Node, path: tuple = ()) -> Any:
        self.values[path] = _at(node.start_mark)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise Unreadable("a key must be plain text, not a list or mapping", key_node.start_mark)
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
        kind = node.tag[len(TAG):] if node.tag.startswith(TAG) else "str"
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
            raise Unreadable(f"{shown!r} cannot be read as !!{kind}", node.start_mark) from None
        # str, and the implicit timestamp/value tags: keep the text as written ("2024-01-01" names a service)
        return node.value


def _at(mark: Any) -> tuple[int, int]:
    return mark.line + 1, mark.column + 1


# --- Checking ----------------------------------------------------------------------------------------------------
