"""Render the HTML load portrait (one run, or two side by side) and write it as one offline file.

The page is a Jinja2 template with autoescaping on, so every recorded string (stage
names, hosts, messages) is text, never markup; the chart data travels as JSON inside a
``<script type="application/json">`` with ``<``, ``>`` and ``&`` escaped, so no value can
close that element. Plotly's JavaScript is embedded once; the page fetches nothing.

Usage::

    from loadprobe.reports.html import render_report, render_comparison, write_html

    html = render_report(portrait, plans=plans_json_dict, pipeline_yaml=yaml_text)
    size = write_html("loadprobe-report/portrait.html", html, overwrite=True)
    diff = render_comparison(before, after, labels=("before", "after"))
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from loadprobe._errors import LoadprobeError
from loadprobe._files import write_file
from loadprobe._version import __version__

from .assets import content_security_policy, csp_hash, plotly_payload, static_text

GENERATOR = "loadprobe"  # <meta name="generator">: marks a file as one loadprobe may replace


def render_report(portrait, plans: dict | None = None, pipeline_yaml: str | None = None,
                  simulation: dict | None = None, align=()) -> str:
    """The single-run report; ``plans`` is plans.json's content and ``pipeline_yaml`` the file's text,
    both from ``loadprobe recommend``, ``simulation`` a simulation.json and ``align`` loadprobe align
    verdicts (``AlignEvidence`` or align.json documents) (all optional)."""
    from .sections import portrait_view

    return _page("portrait.html.j2", portrait_view(portrait, plans, pipeline_yaml, simulation, align))


def render_comparison(a, b, labels: tuple[str, str] = ("A", "B")) -> str:
    """Two portraits side by side with the deltas of their headline figures (B relative to A)."""
    from .compare import comparison_view

    return _page("compare.html.j2", comparison_view(a, b, labels))


def render_simulation(simulation: dict) -> str:
    """A simulation.json (``loadprobe simulate``): its plans side by side, stages, engines' queues."""
    from .simulation import simulation_view

    return _page("simulation.html.j2", simulation_view(simulation))


def write_simulation(simulation: dict, path) -> int:
    """Write ``render_simulation`` to ``path``, replacing a report loadprobe wrote there before."""
    return write_html(path, render_simulation(simulation), overwrite=is_report(path))


def write_html(path, html: str, *, overwrite: bool = False) -> int:
    """Write ``html`` to ``path`` (via a temporary file and a rename); returns its size in bytes.

    An existing file is kept (LoadprobeError) unless ``overwrite``.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise LoadprobeError(f"{path} exists; pass --force to replace it or choose another -o")
    if path.exists() and path.is_dir():
        raise LoadprobeError(f"{path} is a directory; give a file name such as {path / 'portrait.html'}")
    path.parent.mkdir(parents=True, exist_ok=True)
    data = html.encode("utf-8")
    write_file(path, data, overwrite=overwrite)
    return len(data)


def is_report(path) -> bool:
    """Whether ``path`` is an HTML report loadprobe wrote (and so may replace)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return f'<meta name="generator" content="{GENERATOR} '.encode() in head


def script_json(value) -> str:
    """JSON that is safe inside a <script> element: no '<', '>' or '&' can end it or open a comment."""
    text = json.dumps(_finite(value), separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                          ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text


def _finite(value):
    """NaN and infinities become null: JSON has no spelling for them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


@functools.lru_cache(maxsize=1)
def _environment():
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader(__package__, "templates"), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _page(template: str, view: dict) -> str:
    from markupsafe import Markup

    plotly = plotly_payload()
    script = static_text("report.js")
    return _environment().get_template(template).render(
        view=view,
        css=Markup(static_text("report.css")),
        script=Markup(script),
        csp=content_security_policy([csp_hash(script), plotly.source_hash]),
        figures=Markup(script_json(view["figures"])),
        plotly=plotly,
        generator=f"{GENERATOR} {__version__}",
    )
