"""The hardware catalog: the packaged figures load, are cited and sane; override files are checked."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from loadprobe._errors import LoadprobeError
from loadprobe.catalog import FIGURES, PRECISIONS, PRICE_POWER, PRICES, load_catalog

from ..conftest import REPO, run_python


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def write(tmp_path, devices, name="site.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"version": "1.0", "devices": devices}))
    return path


def test_packaged_catalog_covers_every_kind(catalog):
    assert len(catalog) >= 12
    assert {d.kind for d in catalog} == {"cpu", "gpu", "npu"}
    assert catalog.ids() == sorted(catalog.ids())
    assert all(d.origin == ("loadprobe/devices.json",) for d in catalog)


def test_every_published_figure_has_a_source(catalog):
    for device in catalog:
        for name in FIGURES:
            if getattr(device, name) is not None:
                assert device.sources.get(name), (device.id, name)
        for precision in device.peak_flops:
            assert device.sources.get(f"peak_flops.{precision}") or device.sources.get("peak_flops"), \
                (device.id, precision)


def test_h100_figures_are_the_vendor_numbers(catalog):
    h100 = catalog.get("nvidia-h100-sxm")
    assert h100.peak("fp16") == 989.4e12 and h100.memory_bandwidth_bytes_per_s == 3.35e12
    assert h100.ridge_point("fp16") == pytest.approx(295, rel=0.01)


def test_ridge_points_are_sane(catalog):
    for device in catalog:
        if device.memory_bandwidth_bytes_per_s is None:
            continue
        for precision in device.peak_flops:
            assert 5 < device.ridge_point(precision) < 1000, (device.id, precision)
        if "fp32" in device.peak_flops and "int8" in device.peak_flops:
            assert device.ridge_point("int8") > device.ridge_point("fp32"), device.id


def test_peak_has_no_silent_fallback(catalog):
    t4 = catalog.get("nvidia-t4")
    assert t4.peak("fp16") == 65e12 and t4.peak("bf16") is None  # Turing has no bf16
    with pytest.raises(LoadprobeError, match="unknown precision 'fp17'"):
        t4.peak("fp17")
    with pytest.raises(LoadprobeError, match="'hailo-8'.*memory_bandwidth_bytes_per_s"):
        catalog.get("hailo-8").ridge_point("int8")


@pytest.mark.parametrize("name, device_id", [
    ("NVIDIA H100 80GB HBM3", "nvidia-h100-sxm"),
    ("NVIDIA H200", "nvidia-h200"),
    ("NVIDIA A100-SXM4-80GB", "nvidia-a100-sxm-80gb"),
    ("NVIDIA L4", "nvidia-l4"),
    ("NVIDIA L40S", "nvidia-l40s"),
    ("NVIDIA A10", "nvidia-a10"),
    ("Tesla T4", "nvidia-t4"),
    ("Intel(R) Xeon(R) Platinum 8480+", "intel-xeon-8480"),
    ("AMD EPYC 9654 96-Core Processor", "amd-epyc-9654"),
    ("Ascend310P3", "ascend-310p"),
    ("Ascend910B3", "ascend-910b"),
    ("TPU v5 lite", "google-tpu-v5e"),
    ("Hailo-8", "hailo-8"),
    # different SKUs with other figures must not borrow these entries
    ("NVIDIA H100 PCIe", None),
    ("NVIDIA H200 NVL", None),
    ("NVIDIA A100 80GB PCIe", None),
    ("NVIDIA A10G", None),
    ("Hailo-8L", None),
    ("NVIDIA GeForce RTX 4090", None),
])
def test_match_maps_recorded_names(catalog, name, device_id):
    found = catalog.match(name)
    assert (found.id if found else None) == device_id


def test_unknown_id_suggests_close_ids(catalog):
    with pytest.raises(LoadprobeError) as error:
        catalog.get("nvidia-h100")
    message = str(error.value)
    assert "'nvidia-h100'" in message and "nvidia-h100-sxm" in message and "loadprobe catalog lists them" in message
    assert "\n" not in message


def test_override_changes_one_field_and_keeps_the_rest(tmp_path, catalog):
    path = write(tmp_path, {"nvidia-l4": {
        "price_usd": 2500, "peak_flops": {"fp16": 120e12},
        "sources": {"price_usd": "our 2025 purchase order", "peak_flops.fp16": "measured, cuBLAS"}}})
    l4 = load_catalog(path).get("nvidia-l4")
    before = catalog.get("nvidia-l4")
    assert l4.price_usd == 2500 and l4.peak("fp16") == 120e12
    assert l4.peak("bf16") == before.peak("bf16") and l4.memory_bytes == before.memory_bytes
    assert l4.sources["memory_bytes"] == before.sources["memory_bytes"]
    assert l4.sources["price_usd"] == "our 2025 purchase order"
    assert l4.origin == ("loadprobe/devices.json", str(path))


def test_extra_file_adds_a_device_and_later_files_win(tmp_path):
    entry = {
        "kind": "npu", "vendor": "Acme", "name": "Acme N1", "peak_flops": {"int8": 8e12, "fp16": None},
        "memory_bandwidth_bytes_per_s": 50e9, "memory_bytes": 8e9, "tdp_w": 10, "price_usd": None,
        "dynamic_shapes": "poor", "int8": True, "aliases": ["Acme N1"],
        "sources": {"peak_flops": "Acme N1 datasheet rev 2, table 1", "memory_bandwidth_bytes_per_s": "same",
                    "memory_bytes": "same", "tdp_w": "same"},
    }
    first = write(tmp_path, {"acme-n1": entry}, "a.json")
    second = write(tmp_path, {"acme-n1": {"tdp_w": 12, "sources": {"tdp_w": "rev 3"}}}, "b.json")
    catalog = load_catalog(first, second)
    device = catalog.get("acme-n1")
    assert device.tdp_w == 12 and device.peak("fp16") is None and device.ridge_point("int8") == 160
    assert catalog.match("acme n1 pcie card") is device


def test_yaml_override(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "site.yaml"
    path.write_text(textwrap.dedent("""
        devices:
          nvidia-t4:
            tdp_w: 60
            sources: {tdp_w: "power-capped in our fleet"}
    """))
    assert load_catalog(path).get("nvidia-t4").tdp_w == 60
    path.write_text("devices:\n  nvidia-t4:\n    memory_bytes: 16e9\n    sources: {memory_bytes: x}\n")
    with pytest.raises(LoadprobeError, match=r"'16e9' is not a positive number .*write 80.0e\+9"):
        load_catalog(path)
    path = tmp_path / "site.YML"  # the suffix, in any case, says YAML
    path.write_text("devices:\n  nvidia-t4:\n    peak_flops: {fp16: 65e12}\n    sources: {peak_flops: x}\n")
    with pytest.raises(LoadprobeError, match=r"fp16 = '65e12' is not a positive number .*write 80.0e\+9"):
        load_catalog(path)


def test_a_quoted_figure_in_json_gets_no_yaml_advice(tmp_path):
    path = write(tmp_path, {"nvidia-t4": {"memory_bytes": "16e9", "sources": {"memory_bytes": "x"}}})
    with pytest.raises(LoadprobeError, match=r"'16e9' is not a positive number \(or null when unknown\)$"):
        load_catalog(path)
    path = write(tmp_path, {"nvidia-t4": {"peak_flops": {"fp16": "65e12"}, "sources": {"peak_flops": "x"}}})
    with pytest.raises(LoadprobeError, match=r"fp16 = '65e12' is not a positive number \(or null when unknown\)$"):
        load_catalog(path)


@pytest.mark.parametrize("devices, expected", [
    ({"nvidia-l4": {"tdp_w": -72, "sources": {"tdp_w": "x"}}}, r"'nvidia-l4', field 'tdp_w': -72 is not a positive"),
    ({"nvidia-l4": {"tdp_w": True, "sources": {"tdp_w": "x"}}}, r"'nvidia-l4', field 'tdp_w': True"),
    ({"nvidia-l4": {"peak_flops": {"fp16": 0}, "sources": {"peak_flops": "x"}}}, r"'nvidia-l4', field 'peak_flops'"),
    ({"nvidia-l4": {"peak_flops": {"fp12": 1e12}}}, r"field 'peak_flops': unknown precision 'fp12'"),
    ({"nvidia-l4": {"memory_gb": 24}}, r"'nvidia-l4', field 'memory_gb': unknown field"),
    ({"nvidia-l4": {"origin": "x"}}, r"field 'origin': unknown field"),
    ({"nvidia-l4": {"price_usd": 2500}}, r"'nvidia-l4', field 'price_usd': 2500 has no source"),
    ({"nvidia-l4": {"peak_flops": {"int4": 485e12}}}, r"field 'peak_flops.int4': .* has no source"),
    ({"nvidia-l4": {"sources": {"price_usd": " "}}}, r"field 'sources': the source for 'price_usd' is empty"),
    ({"nvidia-l4": {"kind": "tpu"}}, r"'nvidia-l4', field 'kind': 'tpu' is not a kind"),
    ({"nvidia-l4": {"dynamic_shapes": "sometimes"}}, r"field 'dynamic_shapes': 'sometimes'"),
    ({"nvidia-l4": {"aliases": ["L4("]}}, r"field 'aliases': 'L4\(' is not a valid regular expression"),
    ({"Big GPU": {}}, r"device id 'Big GPU' is not a lowercase slug"),
    ({"acme-n1": {"kind": "npu"}}, r"'acme-n1', field 'vendor': missing"),
])
def test_bad_override_names_file_device_and_field(tmp_path, devices, expected):
    path = write(tmp_path, devices)
    with pytest.raises(LoadprobeError, match=expected) as error:
        load_catalog(path)
    assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)


@pytest.mark.parametrize("text, expected", [
    ("{\"devices\": {", r"not valid JSON \(.* at line 1"),
    ("[]", r"expected an object with a \"devices\" object"),
    ("{\"devices\": {}, \"extra\": 1}", r"unknown top-level key 'extra'"),
    ("{\"version\": \"2.0\", \"devices\": {}}",
     r"written with catalog format 2\.0, newer than this loadprobe reads \(1\.0\); upgrade loadprobe"),
    ("{\"version\": \"0.9\", \"devices\": {}}",
     r"catalog version '0\.9' is not supported; this loadprobe reads version 1\.x"),
    ("{\"version\": 1, \"devices\": {}}", r"catalog version 1 is not supported; this loadprobe reads version 1\.x"),
])
def test_bad_files_are_named(tmp_path, text, expected):
    path = tmp_path / "site.json"
    path.write_text(text)
    with pytest.raises(LoadprobeError, match=expected) as error:
        load_catalog(path)
    assert str(error.value).startswith(f"{path}: ")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(LoadprobeError, match=r"nope\.json: cannot read the device file"):
        load_catalog(tmp_path / "nope.json")


def test_precisions_and_docs_cover_the_catalog(catalog):
    assert PRECISIONS == ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int4")
    doc = (REPO / "docs" / "catalog.md").read_text()
    for device_id in catalog.ids():
        assert f"`{device_id}`" in doc, device_id


def test_importing_the_catalog_stays_light():
    done = run_python(
        "import json, sys; from loadprobe.catalog import load_catalog; load_catalog(); "
        "print(json.dumps(sorted(sys.modules)))")
    assert done.returncode == 0, done.stderr
    loaded = {m.split(".")[0] for m in json.loads(done.stdout)}
    assert not loaded & {"yaml", "numpy", "pyarrow", "psutil", "click", "pynvml", "difflib"}


def test_every_price_and_power_figure_is_cited_and_dated_or_said_to_be_unpublished(catalog):
    # the walk behind "no silent zeros": a figure has a source (prices a date too), or null has a reason
    for device in catalog:
        for name in PRICE_POWER:
            value = getattr(device, name)
            if value is None:
                assert device.unpublished.get(name, "").strip(), (device.id, name)
                assert "no figure" in device.figure_note(name) and device.unpublished[name] in device.figure_note(name)
            else:
                assert value > 0 and device.sources.get(name), (device.id, name)
                assert name not in device.unpublished, (device.id, name)
                if name in PRICES:
                    assert re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", device.dates.get(name, "")), (device.id, name)
        assert device.max_power_w == device.tdp_w


def test_the_published_rates_are_the_sources_numbers(catalog):
    h100, a100 = catalog.get("nvidia-h100-sxm"), catalog.get("nvidia-a100-sxm-80gb")
    assert h100.hourly_usd == pytest.approx(55.04 / 8) and "p5.48xlarge" in h100.sources["hourly_usd"]
    assert a100.hourly_usd == pytest.approx(27.44705 / 8, abs=1e-4) and "p4de.24xlarge" in a100.sources["hourly_usd"]
    assert h100.dates["hourly_usd"] == "2026-11-09" and h100.price_usd is None
    assert catalog.get("amd-epyc-9654").dates["price_usd"] == "2022-11-10"
    # rented only: no purchase price, no TDP, and the entry says why
    tpu = catalog.get("google-tpu-v5e")
    assert tpu.price_usd is None and tpu.unpublished["price_usd"] == "rented, not sold"


def test_an_override_figure_answers_the_unpublished_note_and_drops_an_old_date(tmp_path):
    path = write(tmp_path, {
        "nvidia-l4": {"price_usd": 2500, "idle_w": 16, "sources": {"price_usd": "PO 2025-0142", "idle_w": "nvidia-smi"},
                      "dates": {"price_usd": "2025-03-01"}},
        "nvidia-h100-sxm": {"hourly_usd": 2.5, "sources": {"hourly_usd": "our provider's quote"}}})
    catalog = load_catalog(path)
    l4, h100 = catalog.get("nvidia-l4"), catalog.get("nvidia-h100-sxm")
    assert (l4.price_usd, l4.idle_w, l4.dates["price_usd"]) == (2500, 16, "2025-03-01")
    assert "price_usd" not in l4.unpublished and "idle_w" not in l4.unpublished
    assert l4.dates["hourly_usd"] == load_catalog().get("nvidia-l4").dates["hourly_usd"]  # the packaged rate's date stays
    assert h100.hourly_usd == 2.5 and "hourly_usd" not in h100.dates  # the packaged date was for the packaged rate
    assert l4.figure_note("price_usd") == "nvidia-l4 price_usd = 2500 (PO 2025-0142, 2025-03-01)"


@pytest.mark.parametrize("devices, expected", [
    ({"nvidia-l4": {"hourly_usd": 0.8}}, r"'nvidia-l4', field 'hourly_usd': 0.8 has no source"),
    ({"nvidia-l4": {"idle_w": -3, "sources": {"idle_w": "x"}}}, r"field 'idle_w': -3 is not a positive"),
    ({"nvidia-l4": {"dates": {"price_usd": "March 2025"}}}, r"field 'dates': the date for 'price_usd' is 'March 2025'"),
    ({"nvidia-l4": {"dates": {"peak_flops": "2025-03"}}}, r"field 'dates': 'peak_flops' is not a field to date"),
    ({"nvidia-l4": {"dates": "2025"}}, r"field 'dates': expected an object"),
    ({"nvidia-l4": {"unpublished": {"price_usd": ""}}}, r"field 'unpublished': the reason for 'price_usd' is empty"),
    ({"nvidia-l4": {"unpublished": {"memory_bytes": "x"}}}, r"field 'unpublished': 'memory_bytes' is not a price"),
    ({"nvidia-l4": {"sources": {"dates": "x"}}}, r"field 'sources': 'dates' is not a field to cite"),
])
def test_bad_price_and_power_fields_name_the_field(tmp_path, devices, expected):
    path = write(tmp_path, devices)
    with pytest.raises(LoadprobeError, match=expected) as error:
        load_catalog(path)
    assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)


@pytest.mark.parametrize("entry, expected", [
    ({"price_usd": 2500, "sources": {"price_usd": "PO"}}, r"field 'price_usd': 2500(\.0)? has no date"),
    ({"unpublished": {"price_usd": "x"}, "price_usd": 2500, "sources": {"price_usd": "PO"},
      "dates": {"price_usd": "2025-01"}}, r"field 'price_usd': 2500 is given and also marked unpublished"),
])
def test_strict_files_account_for_every_price_and_power_figure(tmp_path, entry, expected):
    new = {"kind": "npu", "vendor": "Acme", "name": "Acme N1", "peak_flops": {}, "memory_bandwidth_bytes_per_s": None,
           "memory_bytes": None, "tdp_w": 35, "price_usd": None, "dynamic_shapes": "poor", "int8": True,
           "aliases": ["Acme N1"], "sources": {"tdp_w": "datasheet"},
           "unpublished": {"idle_w": "not published", "hourly_usd": "not rented", "price_usd": "no list price"}}
    assert load_catalog(write(tmp_path, {"acme-n1": new}), strict=True).get("acme-n1").tdp_w == 35
    lax = {**new, "unpublished": {}}
    assert load_catalog(write(tmp_path, {"acme-n1": lax})).get("acme-n1").idle_w is None  # not strict: allowed
    with pytest.raises(LoadprobeError, match=r"'acme-n1', field 'idle_w': null with no reason"):
        load_catalog(write(tmp_path, {"acme-n1": lax}), strict=True)
    merged = {**new, **entry, "unpublished": {**new["unpublished"], **entry.get("unpublished", {})}}
    if "unpublished" not in entry:
        merged["unpublished"].pop("price_usd")
    merged["sources"] = {**new["sources"], **entry.get("sources", {})}
    with pytest.raises(LoadprobeError, match=expected):
        load_catalog(write(tmp_path, {"acme-n1": merged}), strict=True)


def test_a_bad_catalog_file_is_one_line_and_exit_2(tmp_path):
    from click.testing import CliRunner

    from loadprobe.cli import main

    path = write(tmp_path, {"nvidia-l4": {"dates": {"hourly_usd": "soon"}}})
    result = CliRunner().invoke(main, ["recommend", str(tmp_path / "none.json"), "-o", str(tmp_path / "p.yaml"),
                                       "--catalog", str(path)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"loadprobe: error: {path}: device 'nvidia-l4', field 'dates': the date for "
                                    f"'hourly_usd' is 'soon'") and result.stderr.count("\n") == 1
