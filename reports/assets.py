"""What a report embeds besides its data: Plotly's JavaScript, the page's CSS and script, the CSP.

Plotly's bundle (from the installed ``plotly`` package) is ~4.8 MB, nearly the whole 5 MB
budget of a report, so it is embedded once, gzip-compressed and base64-encoded (~2 MB); the
page inflates it with the browser's DecompressionStream and runs it as an inline script.
The Content-Security-Policy allows exactly the page's own scripts, by SHA-256 hash (Plotly's
included), and no outside requests of any kind: nothing is fetched, and an injected
``<img onerror=...>`` or ``<script>`` could not run even if escaping failed.

Usage::

    plotly = plotly_payload()                # Payload(base64=..., sha256=..., version=...)
    css, js = static_text("report.css"), static_text("report.js")
    policy = content_security_policy([js, plotly.source_hash])
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Payload:
    base64: str  # gzip of the UTF-8 source, base64-encoded: safe inside <script type=...>
    source_hash: str  # 'sha256-...' of the source, for the CSP
    version: str
    source_bytes: int


@functools.lru_cache(maxsize=1)
def plotly_payload() -> Payload:
    """Plotly's JavaScript, compressed once per process."""
    try:
        import plotly
        from plotly.offline import get_plotlyjs
    except ImportError:  # pragma: no cover - a dependency of loadprobe
        from loadprobe._errors import LoadprobeError

        raise LoadprobeError("the HTML report needs plotly: pip install 'plotly>=5'") from None
    source = get_plotlyjs().encode("utf-8")
    packed = gzip.compress(source, compresslevel=9, mtime=0)
    return Payload(base64=base64.b64encode(packed).decode("ascii"), source_hash=csp_hash(source),
                   version=plotly.__version__, source_bytes=len(source))


def csp_hash(source) -> str:
    """The CSP hash-source of an inline script's text."""
    data = source.encode("utf-8") if isinstance(source, str) else source
    return "'sha256-" + base64.b64encode(hashlib.sha256(data).digest()).decode("ascii") + "'"


@functools.lru_cache(maxsize=None)
def static_text(name: str) -> str:
    """A file from reports/static/, installed as package data."""
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def content_security_policy(script_hashes: list[str]) -> str:
    """Only the listed inline scripts run; styles inline; images only from data: and blob: (Plotly's
    PNG export); no fetch, frame, font, form or base URL may reach anywhere."""
    return "; ".join([
        "default-src 'none'",
        "script-src " + " ".join(script_hashes),
        "style-src 'unsafe-inline'",
        "img-src data: blob:",
        "connect-src 'none'",
        "font-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
    ])
