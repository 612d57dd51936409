"""Every file format's version in one place (loadprobe/formats.py), spelled as files always had it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadprobe import formats
from loadprobe._errors import LoadprobeError
from loadprobe.formats import (ALIGN, CAPTURE, CATALOG, DATA, PIPELINE, PLANS, PORTRAIT, RUN, SIMULATION, VERIFY,
                               FormatVersionError, NewerVersionError, UnreadableVersionError)

from .conftest import REPO


def test_each_format_writes_the_spelling_its_files_have_always_had():
    assert DATA.tag("spans") == "spans/1.1" and DATA.tag("samples") == "samples/1.1"
    assert RUN.value == "run/1.0"
    assert PORTRAIT.value == "1.11"
    assert PLANS.value == "1.0" and SIMULATION.value == "1.0" and CATALOG.value == "1.0" and VERIFY.value == "1.0"
    assert PIPELINE.value == 1 and ALIGN.value == 1 and CAPTURE.value == 1
    assert len(set(formats.FORMATS)) == len(formats.FORMATS) == 10


def test_the_copies_that_cannot_import_it_agree_with_it():
    """pipeline.schema.json is JSON and cannot import formats.py: it must spell the same version;
    so must what the modules write from it."""
    from loadprobe.align import capture, document
    from loadprobe.pipeline import config, files
    from loadprobe.schema import SAMPLES, SCHEMA_KEY, SCHEMA_VERSION, SPANS

    schema = json.loads((REPO / "loadprobe" / "pipeline.schema.json").read_text())
    assert schema["properties"]["version"]["const"] == PIPELINE.value
    assert config.PipelineConfig.__dataclass_fields__["version"].default == PIPELINE.value
    assert f"pipeline.yaml v{PIPELINE.major};" in files.HEADER
    assert document.VERSION == ALIGN.value and capture.VERSION == CAPTURE.value
    assert SPANS.metadata[SCHEMA_KEY] == b"spans/1.1" and SAMPLES.metadata[SCHEMA_KEY] == b"samples/1.1"
    assert SCHEMA_VERSION == DATA.version


@pytest.mark.parametrize("fmt, found, parsed", [
    (RUN, "run/1.0", (1, 0)), (RUN, "1.3", (1, 3)), (RUN, "run/0.9", (0, 9)),
    (DATA, "spans/1.0", (1, 0)), (DATA, "samples/1.7", (1, 7)), (DATA, "1.0", (1, 0)),
    (PORTRAIT, "1.6", (1, 6)), (PORTRAIT, "1", (1, 0)),
    (ALIGN, 1, (1, 0)), (ALIGN, 1.0, (1, 0)),
])
def test_a_readable_version_not_newer_passes(fmt, found, parsed):
    assert fmt.check(found, "f.json") == parsed
    fmt.refuse_newer(found, "f.json")


@pytest.mark.parametrize("fmt, found", [
    (RUN, None), (RUN, 7), (RUN, ""), (RUN, "run/x"), (RUN, "spans"), (RUN, "spans/1.0"),
    (DATA, ""), (DATA, "spans/x"), (PORTRAIT, 1.6), (PORTRAIT, "1.x"), (ALIGN, "1"), (ALIGN, True),
    (ALIGN, 1.5), (ALIGN, float("nan")), (CAPTURE, None),
])
def test_a_damaged_version_is_unreadable_and_refuse_newer_lets_it_through(fmt, found):
    # no version at all most likely means another kind of file: said so, not "unreadable version ''"
    expected = r"^f\.json: not a loadprobe .* \(it has no version field\)" if found in (None, "") else \
        r"^f\.json: unreadable .* version"
    with pytest.raises(UnreadableVersionError, match=expected):
        fmt.check(found, "f.json")
    fmt.refuse_newer(found, "f.json")  # readers that never checked keep reading what they can


@pytest.mark.parametrize("fmt, found, shown, ours", [
    (DATA, "spans/2.0", "2.0", "1.1"), (RUN, "run/9.0", "9.0", "1.0"), (RUN, "2", "2", "1.0"),
    (PORTRAIT, "2.0", "2.0", "1.11"), (PLANS, "3.1", "3.1", "1.0"), (PIPELINE, 2, "2", "1"),
    (ALIGN, 2, "2", "1"), (DATA, "spans/99999999999999999999", "99999999999999999999", "1.1"),
])
def test_a_newer_major_is_refused_in_one_line_naming_the_file_and_the_fix(fmt, found, shown, ours):
    for check in (fmt.check, fmt.refuse_newer):
        with pytest.raises(NewerVersionError) as error:
            check(found, "data/h/s/r/x.json")
        assert str(error.value) == (f"data/h/s/r/x.json: written with {fmt.name} {shown}, newer than this loadprobe "
                                    f"reads ({ours}); upgrade loadprobe (pip install -U loadprobe)")
        assert isinstance(error.value, LoadprobeError) and isinstance(error.value, FormatVersionError)


def test_the_data_format_message_is_the_one_analysis_has_always_given():
    from loadprobe.schema import SchemaVersionError, check_version

    assert check_version("spans/1.0", "f") == "spans"
    with pytest.raises(SchemaVersionError, match=r"^f: written with data format 2\.0, newer than this loadprobe "
                                                 r"reads \(1\.1\); upgrade loadprobe"):
        check_version("spans/2.0", "f")


def test_formats_is_standard_library_only():
    from .conftest import run_python

    done = run_python("import sys, json, loadprobe.formats, loadprobe._files; print(json.dumps(sorted(sys.modules)))")
    assert done.returncode == 0, done.stderr
    loaded = {m.split(".")[0] for m in json.loads(done.stdout)}
    assert not {"pyarrow", "numpy", "psutil", "yaml", "click", "jsonschema"} & loaded


# -- readers that never checked a version now refuse a newer major, and read the rest as before ----


def test_plans_json_of_a_newer_major_is_refused_older_or_damaged_read(tmp_path):
    from loadprobe.pipeline.plans import read_plans_json

    path = tmp_path / "plans.json"
    for version in ("1.0", "0.3", None, "x", 7):
        path.write_text(json.dumps({"version": version, "recommended": {"name": "hybrid"}}))
        assert read_plans_json(path)["recommended"]["name"] == "hybrid"
    path.write_text(json.dumps({"version": "2.0", "recommended": {"name": "hybrid"}}))
    with pytest.raises(LoadprobeError, match=rf"^{path}: written with plans.json format 2\.0, .*upgrade loadprobe"):
        read_plans_json(path)


def test_simulation_json_of_a_newer_major_is_refused_by_report(tmp_path):
    from loadprobe.cli.report import _simulation

    path = tmp_path / "simulation.json"
    path.write_text(json.dumps({"version": "1.0", "plans": {"hybrid": {}}}))
    assert _simulation(str(path))["plans"] == {"hybrid": {}}
    path.write_text(json.dumps({"version": "2.0", "plans": {"hybrid": {}}}))
    with pytest.raises(LoadprobeError, match=rf"^--simulation {path}: written with simulation.json format 2\.0"):
        _simulation(str(path))


def test_a_capture_of_a_newer_major_says_upgrade_an_older_one_says_capture_again(tmp_path):
    from loadprobe.align.capture import FORMAT, load_capture

    for version, message in ((2, r"written with capture format 2, newer .*upgrade loadprobe"),
                             (0, r"capture format version 0; this loadprobe reads version 1: capture again")):
        path = tmp_path / f"v{version}.npz"
        meta = json.dumps({"format": FORMAT, "version": version}).encode()
        np.savez(path, meta=np.frombuffer(meta, dtype=np.uint8))
        with pytest.raises(LoadprobeError, match=rf"^{path}: {message}"):
            load_capture(path)
