"""Every file format loadprobe writes, the version it writes now, and the one check its readers make.

A version is ``major.minor``: a newer minor only adds fields, which older readers ignore; a newer
major changes what fields mean, so a reader refuses it, in one line that names the file, what it
reads and what to do. Each format keeps the spelling its files have always had on disk -- a tag
(``"run/1.0"``, ``"spans/1.0"``), text (``"1.6"``) or a number (``1``) -- so older files read
as before. Standard library only: the recorder writes run.json with it inside the service.

Usage::

    from loadprobe.formats import RUN, FormatVersionError, UnreadableVersionError

    info = {"schema": RUN.value, ...}                       # written: "run/1.0"
    try:
        RUN.check(info.get("schema"), "data/h/s/r/run.json")  # (1, 0)
    except UnreadableVersionError:                       # not a version at all: damaged
        ...
    except FormatVersionError as exc:                    # run/2.x: newer than this loadprobe
        print(exc)  # data/h/s/r/run.json: written with run.json format 2.0, newer than this ...

A FormatVersionError is a LoadprobeError: the CLI prints its line and exits 2.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ._errors import LoadprobeError

__all__ = [
    "ALIGN", "CAPTURE", "CATALOG", "DATA", "FORMATS", "Format", "FormatVersionError", "NewerVersionError", "PIPELINE",
    "PLANS", "PORTRAIT", "RUN", "SIMULATION", "UnreadableVersionError", "VERIFY",
]

UPGRADE = "upgrade loadprobe (pip install -U loadprobe)"
_VERSION = re.compile(r"(\d+)(?:\.(\d+))*\Z")


class FormatVersionError(LoadprobeError, ValueError):
    """A file this loadprobe cannot read for its version: newer (NewerVersionError) or not a version.

    A LoadprobeError: its one-line message (the file, what it holds, what this loadprobe reads,
    what to do) is what the CLI prints.
    """


class NewerVersionError(FormatVersionError):
    """Written by a newer loadprobe: the file's major version is above the one this loadprobe reads."""


class UnreadableVersionError(FormatVersionError):
    """The file's version field is not a version at all (damaged, or not our file)."""


@dataclass(frozen=True)
class Format:
    """One format: what messages call it, its current version and how files spell it.

    ``spelling`` is ``"tag"`` (``kind/major.minor``; ``kind`` fixed, or any for the data files,
    whose kind is ``spans`` or ``samples``), ``"text"`` (``"major.minor"``) or ``"number"``
    (the major as a JSON/YAML integer).
    """

    name: str
    version: str
    spelling: str
    kind: str = ""

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def value(self):
        """What a writer puts in the file's version field now."""
        if self.spelling == "number":
            return self.major
        return self.tag(self.kind) if self.spelling == "tag" else self.version

    def tag(self, kind: str) -> str:
        """``kind/major.minor``: the data files' spelling (``DATA.tag("spans")`` -> ``"spans/1.0"``)."""
        return f"{kind}/{self.version}"

    def parse(self, found) -> tuple[int, int] | None:
        """(major, minor) of a version read from a file, or None when it is not one in this spelling."""
        if self.spelling == "number":
            if isinstance(found, bool) or not isinstance(found, (int, float)):
                return None
            if isinstance(found, float) and not (math.isfinite(found) and found.is_integer()):
                return None
            return (int(found), 0)
        if not isinstance(found, str):
            return None
        if self.spelling == "tag":
            kind, slash, found = found.rpartition("/")
            if slash and self.kind and kind != self.kind:
                return None
        match = _VERSION.match(found)
        if match is None:
            return None
        parts = found.split(".")
        return (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0)

    def check(self, found, where: str) -> tuple[int, int]:
        """(major, minor) of ``found``, the version read from ``where``.

        Raises NewerVersionError when its major is newer than this loadprobe reads, and
        UnreadableVersionError when it is not a version; each message starts with ``where``.
        """
        parsed = self.parse(found)
        if parsed is None and found in (None, ""):  # no version at all: most likely another kind of file
            what = self.name.removesuffix(" format")
            raise UnreadableVersionError(f"{where}: not a loadprobe {what} (it has no version field); give the "
                                         f"{what} loadprobe wrote")
        if parsed is None:
            raise UnreadableVersionError(f"{where}: unreadable {self.name} version {found!r}; "
                                         f"expected like {self.value!r}")
        self._refuse_newer(parsed, found, where)
        return parsed

    def refuse_newer(self, found, where: str) -> None:
        """Raise NewerVersionError when ``found`` is a newer major; let anything else through.

        For readers that never checked the version and read what they can of a damaged one.
        """
        parsed = self.parse(found)
        if parsed is not None:
            self._refuse_newer(parsed, found, where)

    def _refuse_newer(self, parsed: tuple[int, int], found, where: str) -> None:
        if parsed[0] > self.major:
            shown = found.rpartition("/")[2] if isinstance(found, str) else str(found)
            raise NewerVersionError(f"{where}: written with {self.name} {shown}, newer than this loadprobe reads "
                                    f"({self.version}); {UPGRADE}")


DATA = Format("data format", "1.1", "tag")
"""spans-*.parquet / samples-*.parquet and their segment streams: Parquet metadata ``loadprobe.schema``."""

RUN = Format("run.json format", "1.0", "tag", kind="run")
"""run.json's ``schema`` field."""

PORTRAIT = Format("portrait format", "1.11", "text")
"""portrait.json's ``version`` field."""

PLANS = Format("plans.json format", "1.0", "text")
"""plans.json's ``version`` field."""

PIPELINE = Format("pipeline.yaml format", "1", "number")
"""pipeline.yaml's ``version`` key (also ``const`` in pipeline.schema.json, kept equal by a test)."""

SIMULATION = Format("simulation.json format", "1.0", "text")
"""simulation.json's ``version`` field."""

ALIGN = Format("align.json format", "1", "number")
"""align.json's ``version`` field."""

CAPTURE = Format("capture format", "1", "number")
"""A capture file's (``.npz``) metadata ``version``."""

CATALOG = Format("catalog format", "1.0", "text")
"""A device catalog's (devices.json, ``--catalog`` files) ``version`` field."""

VERIFY = Format("verify.json format", "1.0", "text")
"""verify.json: a plan's predictions against its recording (``loadprobe verify``)."""

FORMATS = (DATA, RUN, PORTRAIT, PLANS, PIPELINE, SIMULATION, ALIGN, CAPTURE, CATALOG, VERIFY)
