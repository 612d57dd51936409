"""The command line's shared behaviour: errors, --debug, missing extras, outputs checked first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from loadprobe.cli import main


def cli(*args, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADPROBE_")}
    return subprocess.run([sys.executable, "-m", "loadprobe", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def test_debug_is_accepted_after_the_subcommand(tmp_path):
    missing = str(tmp_path / "nothing-here")
    plain = cli("analyze", missing)
    assert plain.returncode == 2 and len(plain.stderr.strip().splitlines()) == 1 and "Traceback" not in plain.stderr
    for args in (("--debug", "analyze", missing), ("analyze", missing, "--debug"), ("analyze", "--debug", missing)):
        debug = cli(*args)
        assert debug.returncode != 0 and "Traceback" in debug.stderr and "No such option" not in debug.stderr, args


def test_debug_after_a_double_dash_belongs_to_the_recorded_command(tmp_path):
    done = cli("record", "-o", str(tmp_path / "data"), "--", sys.executable, "-c",
               "import sys; print(sys.argv[1:])", "--debug")
    assert done.returncode == 0, done.stderr
    assert "['--debug']" in done.stdout


def test_a_missing_optional_dependency_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba now fails as if not installed

    @click.command("needs-numba")
    def needs_numba():
        import numba  # noqa: F401

    main.add_command(needs_numba)
    try:
        result = CliRunner().invoke(main, ["needs-numba"])
    finally:
        main.commands.pop("needs-numba")
    assert result.exit_code == 2
    assert "pip install 'loadprobe[fast]'" in result.output and "internal error" not in result.output


class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_load_exits_non_zero_with_its_summary_when_no_request_succeeds():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = cli("load", f"http://127.0.0.1:{server.server_port}/infer", "--rate", "20", "--duration", "1")
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 1
    assert "statuses  404:" in done.stdout  # the summary still says what happened
    assert "no request of" in done.stderr and "answered 404" in done.stderr and "Traceback" not in done.stderr


def test_tco_json_rounds_money_to_the_cent():
    done = cli("tco", "--power-w", "300", "--price-per-kwh", "0.8", "--years", "3", "--purchase", "0", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["electricity"] == 6307.2 and "000000" not in done.stdout
    assert doc["price_per_kwh"] == 0.8  # inputs as given


def test_recommend_refuses_to_overwrite_before_doing_the_work(tmp_path):
    out = tmp_path / "pipeline.yaml"
    out.write_text("kept\n")
    # the source does not exist: had the work started first, that would be the error reported
    done = cli("recommend", str(tmp_path / "no-such-portrait.json"), "-o", str(out))
    assert done.returncode == 2 and "exists; pass --force" in done.stderr
    assert out.read_text() == "kept\n"


def test_loadprobe_error_is_public():
    import loadprobe

    assert issubclass(loadprobe.LoadprobeError, Exception)
    assert "LoadprobeError" in loadprobe.__all__


@pytest.mark.parametrize("command", ["demo", "analyze", "recommend", "load", "simulate", "export"])
def test_every_help_text_reads_as_a_sentence(command):
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0 and "Check up" not in result.output


def test_counts_are_printed_one_way(tmp_path):
    """Thousands separated everywhere on the terminal: 1,500, never 1500 beside 1,500."""
    import re

    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("version: 1\nservice: counts\nengines:\n  a:\n    kind: cpu\n    max_concurrency: 4\n"
                        "    max_queue: 1000\nstages:\n  - name: work\n    engine: a\n    timeout_ms: 1000\n"
                        "    service_time_ms: {p50: 1.0, p95: 2.0, source: measured}\n")
    done = cli("simulate", str(pipeline), "--rate", "300", "--duration", "5", "-o", str(tmp_path / "sim"))
    assert done.returncode == 0, done.stderr
    assert "1,500 requests" in done.stdout
    # no bare count of four digits or more (times and rates are decimals or carry units)
    assert not re.findall(r"(?<![\d.,:/-])\d{4,}(?![\d.,]| ?ms| s\b)", done.stdout), done.stdout


def test_analyze_with_a_window_that_holds_no_span_fails_and_says_what_the_recording_covers(tmp_path):
    import loadprobe

    loadprobe.start(tmp_path / "data", service="svc", sample_devices=False)
    with loadprobe.request(), loadprobe.probe("decode"):
        pass
    loadprobe.stop()
    for window in (["--since", "2030-01-01"], ["--until", "2001-01-01"]):
        done = CliRunner().invoke(main, ["analyze", str(tmp_path / "data"), "-o", str(tmp_path / "report"), *window])
        assert done.exit_code == 2, done.output
        assert f"no span lies within {' '.join(window)} (2 read, all outside; the runs cover 20" in done.output  # request + stage
        assert not (tmp_path / "report").exists()


def test_tco_without_a_purchase_price_asks_for_one_instead_of_counting_zero():
    done = cli("tco", "--power-w", "300", "--price-per-kwh", "0.8", "--years", "3")
    assert done.returncode == 2 and "purchase 0" not in done.stdout and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "loadprobe: error: --purchase: buying needs the price of one unit; give --purchase (0 for hardware you own "
        "already), --device for the catalog's price, or --hourly-rate to rent"]


def test_every_writing_command_refuses_its_earlier_output_before_working_and_replaces_it_with_force(tmp_path):
    """One rule: analyze, recommend, simulate (and report, align, verify, export) keep an existing output
    byte for byte unless --force."""
    import loadprobe

    loadprobe.start(tmp_path / "data", service="svc", sample_devices=False)
    for _ in range(30):
        with loadprobe.request(), loadprobe.probe("decode"):
            pass
    loadprobe.stop()
    report, plan, sim = tmp_path / "report", tmp_path / "plan" / "pipeline.yaml", tmp_path / "sim"
    commands = {
        "analyze": (["analyze", str(tmp_path / "data"), "-o", str(report)], [report / "portrait.json",
                                                                            report / "portrait.html"]),
        "recommend": (["recommend", str(report / "portrait.json"), "-o", str(plan)], [plan, plan.with_name("plans.json")]),
        "simulate": (["simulate", str(plan), "--rate", "50", "--requests", "100", "-o", str(sim)],
                     [sim / "simulation.json", sim / "simulation.html"]),
    }
    for name, (args, outputs) in commands.items():
        first = CliRunner().invoke(main, args)
        assert first.exit_code == 0, (name, first.output)
        before = {p: p.read_bytes() for p in outputs}
        again = CliRunner().invoke(main, args)
        assert again.exit_code == 2, (name, again.output)
        assert again.output.strip().splitlines() == [
            f"loadprobe: error: {outputs[0]} exists; pass --force to replace it or choose another -o"], name
        assert {p: p.read_bytes() for p in outputs} == before, name
        assert CliRunner().invoke(main, [*args, "--force"]).exit_code == 0, name
    # An output under a file cannot be made, forced or not: one line naming the file.
    (tmp_path / "a-file").write_text("kept")
    for name, (args, _) in commands.items():
        under = [*args[:-1], str(tmp_path / "a-file" / "out" / Path(args[-1]).name)]
        for extra in ([], ["--force"]):
            done = CliRunner().invoke(main, [*under, *extra])
            (line,) = done.output.strip().splitlines()
            assert done.exit_code == 2 and line.startswith(f"loadprobe: error: {under[-1]}") and line.endswith(
                f": {tmp_path / 'a-file'} is a file, not a folder; choose another -o"), (name, done.output)
    assert (tmp_path / "a-file").read_text() == "kept"


def test_catalog_lists_every_device_and_shows_each_figure_with_its_source_or_why_not():
    from loadprobe.catalog import load_catalog

    listed = CliRunner().invoke(main, ["catalog"])
    assert listed.exit_code == 0, listed.output
    ids = [line.split()[0] for line in listed.output.splitlines()[2:] if line and not line.startswith(" ")]
    assert set(load_catalog().ids()) <= set(ids)
    one = CliRunner().invoke(main, ["catalog", "nvidia-l4"])
    assert one.exit_code == 0 and "tdp_w = 72 W (" in one.output and "price_usd: no figure (" in one.output
    as_json = json.loads(CliRunner().invoke(main, ["catalog", "--json"]).output)
    assert {d["id"] for d in as_json} == set(load_catalog().ids())
    unknown = CliRunner().invoke(main, ["catalog", "nvidia-l5"])
    assert unknown.exit_code == 2 and "did you mean nvidia-l4" in unknown.output
    assert "loadprobe catalog lists them" in unknown.output and "load_catalog()" not in unknown.output


def test_catalog_shows_every_figure_of_a_device_in_text_and_json(tmp_path):
    """The interconnect and on-chip figures too, with units and source, or "no figure"; an override shows."""
    from loadprobe.catalog import FIGURES, load_catalog
    from loadprobe.cli.catalog import UNITS

    assert set(UNITS) == set(FIGURES)  # a new figure gets a unit, not a bare number
    h100 = load_catalog().get("nvidia-h100-sxm")
    text = CliRunner().invoke(main, ["catalog", "nvidia-h100-sxm", "google-tpu-v5e"]).output
    h100_text, tpu_text = text.split("\ngoogle-tpu-v5e: ")
    assert all(f"\n  {name}" in part for name in FIGURES for part in (h100_text, tpu_text))
    assert f"\n  interconnect_bytes_per_s = 450 GB/s ({h100.sources['interconnect_bytes_per_s']})\n" in h100_text
    assert "\n  on_chip_bytes: no figure (not in the catalog)\n" in h100_text
    assert "\n  interconnect_bytes_per_s: no figure (not in the catalog)\n" in tpu_text
    h100_json, tpu_json = json.loads(CliRunner().invoke(main, ["catalog", "nvidia-h100-sxm", "google-tpu-v5e",
                                                               "--json"]).output)
    assert set(FIGURES) <= set(h100_json) and set(FIGURES) <= set(tpu_json)
    assert (h100_json["interconnect_bytes_per_s"], h100_json["on_chip_bytes"]) == (450e9, None)
    assert h100_json["sources"]["interconnect_bytes_per_s"] == h100.sources["interconnect_bytes_per_s"]
    assert tpu_json["interconnect_bytes_per_s"] is None and "interconnect_bytes_per_s" not in tpu_json["sources"]

    site = tmp_path / "site.json"
    site.write_text(json.dumps({"version": "1.0", "devices": {"google-tpu-v5e": {
        "interconnect_bytes_per_s": 200e9, "on_chip_bytes": 48e6,
        "sources": {"interconnect_bytes_per_s": "our ICI measurement", "on_chip_bytes": "our datasheet"}}}}))
    text = CliRunner().invoke(main, ["catalog", "google-tpu-v5e", "--catalog", str(site)]).output
    assert "\n  interconnect_bytes_per_s = 200 GB/s (our ICI measurement)\n" in text
    assert "\n  on_chip_bytes = 48 MB (our datasheet)\n" in text
    [tpu_json] = json.loads(CliRunner().invoke(main, ["catalog", "google-tpu-v5e", "--catalog", str(site),
                                                      "--json"]).output)
    assert (tpu_json["interconnect_bytes_per_s"], tpu_json["on_chip_bytes"]) == (200e9, 48e6)
    assert tpu_json["origin"] == ["loadprobe/devices.json", str(site)]


def test_errors_point_the_right_way_for_files_of_another_kind(tmp_path):
    """A JSON file that is not a portrait, and a plans.json given to validate: one line saying what it is."""
    other = tmp_path / "notportrait.json"
    other.write_text('{"a": 1}')
    done = CliRunner().invoke(main, ["report", str(other), "-o", str(tmp_path / "r.html")])
    assert done.exit_code == 2 and done.output.strip().splitlines() == [
        f"loadprobe: error: {other}: not a loadprobe portrait (it has no version field); give the portrait "
        "loadprobe wrote"], done.output
    plans = tmp_path / "plans.json"
    plans.write_text(json.dumps({"version": "1.0", "service": "svc", "scenario": "batch", "recommended": {},
                                 "alternatives": []}))
    done = CliRunner().invoke(main, ["validate", str(plans)])
    lines = done.output.strip().splitlines()
    assert done.exit_code == 2 and len(lines) == 2, done.output  # the problem, then the count of bad files
    assert "this is a plans.json (loadprobe recommend's options side by side), not a pipeline.yaml" in lines[0]


def test_ctrl_c_on_a_long_command_says_what_was_kept_and_exits_130(tmp_path):
    import signal
    import time

    # a simulation long enough to be interrupted: a million arrivals through the Python loop
    plan = tmp_path / "pipeline.yaml"
    plan.write_text("version: 1\nservice: svc\nengines:\n  host: {kind: cpu, count: 1, max_concurrency: 4, "
                    "max_queue: 100}\nstages:\n  - name: work\n    engine: host\n    timeout_ms: 100\n"
                    "    service_time_ms: {p50: 1, p95: 2, source: user}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADPROBE_")}
    proc = subprocess.Popen([sys.executable, "-m", "loadprobe", "simulate", str(plan), "--rate", "500",
                             "--requests", "5000000", "-o", str(tmp_path / "sim")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import psutil

    watched, deadline = psutil.Process(proc.pid), time.monotonic() + 60
    while sum(watched.cpu_times()[:2]) < 2.5 and time.monotonic() < deadline:  # imported, now simulating
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "Aborted" not in err and "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("loadprobe: interrupted; simulate stopped before its next output: files "
                                            "already written are kept whole, none is left half-written")
    assert not (tmp_path / "sim" / "simulation.json").exists()
