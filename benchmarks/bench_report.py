"""Report benchmark: the HTML load portrait of a 100M-span portrait, against Plotly's own HTML export.

    python benchmarks/bench_report.py [--portrait PATH ...] [--repeat 5] [--json PATH]

Portraits rendered:

- ``fleet-day``: the synthetic portrait of ``tests/support/fleet_portrait.py`` (what
  ``benchmarks/gen_portrait.py`` writes), 100M spans over 24 h on 8 hosts x 4 GPUs with 12
  stages: the largest display shape the analysis produces (the timeline at its point caps, a
  1,440-bucket arrival curve, 13 latency CDFs);
- each ``--portrait`` given, e.g. the real portrait of ``benchmarks/gen_spans.py``'s 100M-span
  dataset (``loadprobe analyze /tmp/loadprobe-bench/spans-100000000 -o DIR --no-html``).

For each, two contenders run in fresh interpreters, ``--repeat`` times, interleaved:

- ``loadprobe report``: ``Portrait.load`` + ``render_report`` + ``write_html`` (the whole page:
  every section, Plotly gzip-embedded once);
- ``plotly.io.to_html``: the same figure dicts through ``plotly.graph_objects.Figure`` (which
  validates them) and ``to_html``, Plotly's JavaScript included once, the pages concatenated
  into one file: the charts alone, no tables or text.

Wall time is measured by the parent from launch to exit (imports included); ``render s`` is
the time inside the child after its imports. Sizes are the written files'.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

LOADPROBE = """
import sys, time
t0 = time.perf_counter()
from loadprobe.portrait import Portrait
from loadprobe.reports.html import render_report, write_html
t1 = time.perf_counter()
size = write_html(sys.argv[2], render_report(Portrait.load(sys.argv[1])), overwrite=True)
print(time.perf_counter() - t1, size)
"""

PLOTLY = """
import sys, time
t0 = time.perf_counter()
import plotly.graph_objects as go
import plotly.io as pio
from loadprobe.portrait import Portrait
from loadprobe.reports.figures import portrait_figures
t1 = time.perf_counter()
figures = portrait_figures(Portrait.load(sys.argv[1]))
parts = [pio.to_html(go.Figure(f), include_plotlyjs=(i == 0), full_html=False) for i, f in enumerate(figures.values())]
html = "<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>" + "".join(parts) + "</body></html>"
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write(html)
print(time.perf_counter() - t1, len(html.encode()))
"""


def run(code: str, portrait: Path, out: Path) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, str(portrait), str(out)], capture_output=True, text=True,
                          cwd=REPO, timeout=600)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    render_s, size = done.stdout.split()
    return {"wall_s": wall, "render_s": float(render_s), "bytes": int(size)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--portrait", action="append", type=Path, default=[], help="a portrait.json to render too")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.support.fleet_portrait import fleet_portrait

    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    cases = {"fleet-day (synthetic, 100M spans)": fleet_portrait().save(work / "fleet-day.json")}
    for path in args.portrait:
        cases[f"{path} ({path.stat().st_size / 1e6:.1f} MB portrait)"] = path
    results = {}
    for name, portrait in cases.items():
        runs = {"loadprobe report": [], "plotly.io.to_html": []}
        for _ in range(args.repeat):
            runs["loadprobe report"].append(run(LOADPROBE, portrait, work / "report.html"))
            runs["plotly.io.to_html"].append(run(PLOTLY, portrait, work / "plotly.html"))
        results[name] = {k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "render_s", "bytes")}
                         for k, v in runs.items()}
    print(f"{'portrait':<48} {'contender':<20} {'wall s':>7} {'render s':>9} {'MB':>6}")
    for name, contenders in results.items():
        for contender, r in contenders.items():
            print(f"{name:<48} {contender:<20} {r['wall_s']:>7.2f} {r['render_s']:>9.2f} {r['bytes'] / 1e6:>6.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
