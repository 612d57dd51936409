"""How long one engine iteration takes: a linear model in what the iteration carries, fitted to a recording.

An iteration (a "step") of a continuously batching engine runs the prompts it admits (prefill) and
one token for every other running sequence (decode). Its time is modelled as

    step = iteration + per_prefill x prompts started + per_prompt_token x prompt tokens
           + per_sequence x sequences decoded + per_context_token x context tokens they attend over

-- fixed work per pass (weights read once, launch and Python overhead), work per prompt token
(compute), per decoded sequence (sampling, streaming), per cached token read (attention over the KV
cache). It is linear, so an iteration whose prompts run as passes of their own before the decode
(chunked prefill off: the sample engine, vLLM V0) costs the same sum as one mixed pass (vLLM V1).

Fitted by non-negative least squares on relative error, from rows that each sum whole iterations:

- every request with two or more output tokens: from its first token to its last it took
  ``tokens_out - 1`` iterations, which carried the prompts whose first token came inside that
  interval and, on average, the sequences decoding then and their contexts (reconstructed from every
  request's first and last output: a sequence decodes between them, its context growing linearly);
- where the engine recorded each request's prefill (``LlmRequests.prefill``): that pass alone, or the
  mixed iteration that carried it (with chunked prefill);
- where it timed its decode passes (``LlmRequests.passes``: the sample engine's ``decode`` spans with
  their ``batch``), those first: they alone separate a pass's fixed cost from its cost per sequence
  when the recording rarely batched, so the pass is fitted to them and the rest of an iteration (the
  engine's own work between passes, prompts) to the rows above.

So a client's recording (first and last token times, token counts) is enough; the engine's spans
make it sharper. ``StepModel.describe()`` says what it was fitted to and how well.

Usage::

    model = fit_steps(requests, chunked=False)
    model.step_ns(prefills=1, prompt_tokens=200, sequences=6, context_tokens=1800)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..._errors import LoadprobeError

TERMS = ("iteration", "per_prefill", "per_prompt_token", "per_sequence", "per_context_token")
MIN_ROWS = 8  # fewer decoding requests than this cannot separate five terms
MIN_PASSES = 5  # decode passes of one batch size needed to keep that size's own time


@dataclass
class StepModel:
    """Nanoseconds per term of an iteration (``TERMS``), and how well they fit what they were fitted to."""

    iteration: float
    per_prefill: float
    per_prompt_token: float
    per_sequence: float
    per_context_token: float
    rows: int = 0  # how many recorded intervals and prefills it was fitted to
    error: float = 0.0  # their relative RMS error
    source: str = ""
    scale: float = 1.0  # a calibration: every step x this (verify --calibrate, or the replay's check)
    # Where the engine timed its decode passes: each batch size's own time over the line above (ns; a
    # BLAS library switching kernels makes batch 1 to 2 dearer than 2 to 3), between sizes interpolated,
    # beyond the largest held.
    by_batch: dict = field(default_factory=dict)

    def step_ns(self, prefills: float = 0, prompt_tokens: float = 0, sequences: float = 0,
                context_tokens: float = 0) -> float:
        """One iteration carrying all of these in one pass (chunked prefill)."""
        return self.scale * (self.iteration + prefills * self.per_prefill + prompt_tokens * self.per_prompt_token
                             + sequences * self.per_sequence + self._excess(sequences)
                             + context_tokens * self.per_context_token)

    def prefill_ns(self, prompt_tokens: float) -> float:
        """One prompt's pass of its own (chunked prefill off)."""
        return self.scale * (self.per_prefill + prompt_tokens * self.per_prompt_token)

    def decode_ns(self, sequences: float, context_tokens: float) -> float:
        """One decode pass over ``sequences`` attending over ``context_tokens`` in all."""
        return self.scale * (self.iteration + sequences * self.per_sequence + self._excess(sequences)
                             + context_tokens * self.per_context_token)

    def _excess(self, sequences: float) -> float:
        if not self.by_batch or sequences <= 0:
            return 0.0
        sizes = sorted(self.by_batch)
        return float(np.interp(sequences, sizes, [self.by_batch[b] for b in sizes]))

    def to_dict(self) -> dict:
        return {**{term: round(getattr(self, term), 3) for term in TERMS}, "unit": "ns",
                "by_batch": {str(b): round(v, 3) for b, v in sorted(self.by_batch.items())}, "rows": self.rows,
                "relative_rms_error": round(self.error, 4), "scale": round(self.scale, 4), "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> "StepModel":
        return cls(**{term: float(d[term]) for term in TERMS}, rows=int(d.get("rows", 0)),
                   error=float(d.get("relative_rms_error", 0.0)), source=str(d.get("source", "")),
                   scale=float(d.get("scale", 1.0)),
                   by_batch={int(b): float(v) for b, v in (d.get("by_batch") or {}).items()})

    def describe(self) -> str:
        ms = lambda ns: f"{ns / 1e6:.3g} ms"  # noqa: E731
        us = lambda ns: f"{ns / 1e3:.3g} us"  # noqa: E731
        return (f"step = {ms(self.iteration)} + {ms(self.per_prefill)} per prompt + {us(self.per_prompt_token)} per "
                f"prompt token + {us(self.per_sequence)} per decoding sequence + {us(self.per_context_token)} per "
                f"context token" + (f", x {self.scale:.3g}" if self.scale != 1.0 else "")
                + f" (fitted to {self.rows:,} {self.source}; relative RMS error {self.error:.1%})")


def fit_steps(requests, *, chunked: bool, source: str = "recorded requests") -> StepModel:
    """The step model of the engine that served ``requests`` (``analysis.llm.LlmRequests``); ``chunked``:
    whether its prefills share an iteration's pass with the decodes (what a recorded prefill time holds)."""
    from scipy.optimize import nnls

    rows, targets = _decode_rows(requests)
    prefill_rows, prefill_targets = _prefill_rows(requests, chunked)
    if len(targets) < MIN_ROWS:
        raise LoadprobeError(f"only {len(targets)} request(s) with a first token and two or more output tokens: "
                             f"the step model needs {MIN_ROWS} or more; record longer, or with longer outputs")
    x = np.vstack([rows, prefill_rows]) if len(prefill_targets) else rows
    y = np.concatenate([targets, prefill_targets])
    what = f"{source}: {len(targets):,} decodes" + (f", {len(prefill_targets):,} prefills" if len(prefill_targets)
                                                     else "")
    pass_rows, pass_targets = _pass_rows(requests)
    by_batch: dict = {}
    if len(pass_targets) >= MIN_ROWS:
        # The decode pass from its own spans, the engine's work between passes from the gaps between them;
        # the prompts from their recorded prefills, else from what the requests' rows hold beyond the rest.
        line, by_batch = _passes(nnls, pass_rows, pass_targets)
        between, gaps = _gaps(requests)
        coef = np.asarray(line) + np.array([between[0], 0.0, 0.0, between[1], 0.0])
        if len(prefill_targets) >= MIN_ROWS and not chunked:
            coef[1:3] = _nnls(nnls, prefill_rows[:, 1:3], prefill_targets)
        else:
            known = StepModel(*coef, by_batch=by_batch)
            excess = np.array([known._excess(s / max(n, 1.0)) * n for n, s in zip(x[:, 0], x[:, 3])])
            coef[1:3] = _nnls(nnls, x[:, 1:3], y - x @ coef - excess)
        what += f", {len(pass_targets):,} decode passes, {gaps:,} gaps between them"
    else:
        coef = _nnls(nnls, x, y)
    model = StepModel(*map(float, coef), rows=len(y) + len(pass_targets), source=what, by_batch=by_batch)
    predicted = x @ coef + np.array([model._excess(s / max(n, 1.0)) * n for n, s in zip(x[:, 0], x[:, 3])])
    model.error = float(np.sqrt(np.mean((predicted / y - 1.0) ** 2)))
    return model


def _passes(nnls, rows: np.ndarray, targets: np.ndarray) -> tuple[list, dict]:
    """The decode pass: each batch size seen ``MIN_PASSES`` times gets its own time (and all one cost per
    context token); a line through the batched sizes (2 and up, where there are two) gives the fixed and
    per-sequence cost; each size's time over that line is kept (``StepModel.by_batch``)."""
    batch = rows[:, 3].astype(np.int64)
    sizes, counts = np.unique(batch, return_counts=True)
    sizes = sizes[counts >= MIN_PASSES]
    keep = np.isin(batch, sizes)
    onehot = (batch[keep, None] == sizes[None, :]).astype(np.float64)
    coef = _nnls(nnls, np.hstack([onehot, rows[keep, 4:5]]), targets[keep])
    own, per_context = coef[:-1], float(coef[-1])
    batched = sizes >= 2 if (sizes >= 2).sum() >= 2 else np.ones(len(sizes), dtype=bool)
    if batched.sum() >= 2:
        slope, intercept = np.polyfit(sizes[batched].astype(np.float64), own[batched], 1)
        slope = max(float(slope), 0.0)
        intercept = max(float(np.mean(own[batched] - slope * sizes[batched])), 0.0)
    else:
        slope, intercept = 0.0, float(own[0])
    by_batch = {int(b): float(t - intercept - slope * b) for b, t in zip(sizes, own)}
    return [intercept, 0.0, 0.0, slope, per_context], by_batch


def prefills_apart(requests) -> bool | None:
    """Whether the engine ran its prompts in passes of their own (chunked prefill off): its recorded prefills
    never overlap its timed decode passes. None where it timed neither."""
    if requests.passes is None or not requests.passes.shape[1]:
        return None
    timed = requests.with_first & (requests.prefill > 0)
    if not timed.any():
        return None
    start, dur, _ = requests.passes[:, np.argsort(requests.passes[0], kind="stable")]
    p_start, p_end = requests.first[timed] - requests.prefill[timed], requests.first[timed]
    # a prefill overlaps a pass when some pass starts before it ends and ends after it starts
    before_end = np.searchsorted(start, p_end, side="left")
    latest_end = np.maximum.accumulate(start + dur)
    overlaps = (before_end > 0) & (latest_end[np.maximum(before_end - 1, 0)] > p_start)
    return bool(overlaps.mean() < 0.01)


def _nnls(nnls, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative coefficients for ``x @ c ~ y`` on relative error (a 30 ms prefill counts as much as a 2 s
    decode); rows whose target is not positive are left out."""
    keep = y > 0
    x, y = x[keep], y[keep]
    weighted = x / y[:, None]
    scale = np.maximum(np.abs(weighted).max(axis=0), 1e-30)  # columns of comparable size
    coef, _ = nnls(weighted / scale, np.ones(len(y)))
    return coef / scale


def _decode_rows(r) -> tuple[np.ndarray, np.ndarray]:
    """One row per request that decoded: the iterations from its first token to its last, and what they carried."""
    timed = r.with_first
    first = r.first[timed].astype(np.float64)
    last = np.maximum(r.last[timed], r.first[timed]).astype(np.float64)
    tokens_in = np.maximum(r.tokens_in[timed], 0).astype(np.float64)
    tokens_out = r.tokens_out[timed].astype(np.float64)
    decoding = (tokens_out >= 2) & (last > first)
    if not decoding.any():
        return np.zeros((0, len(TERMS))), np.zeros(0)
    seqs, context = _load_integrals(first, last, tokens_in, tokens_out)
    f, l_ = first[decoding], last[decoding]
    span = l_ - f
    steps = tokens_out[decoding] - 1
    # Prompts whose first token came inside (first, last]: their prefill ran in one of these iterations.
    order = np.argsort(first)
    sorted_first, cumulative_in = first[order], np.concatenate([[0.0], np.cumsum(tokens_in[order])])
    lo, hi = np.searchsorted(sorted_first, f, side="right"), np.searchsorted(sorted_first, l_, side="right")
    prefills, prompt_tokens = (hi - lo).astype(np.float64), cumulative_in[hi] - cumulative_in[lo]
    mean_seqs = (seqs(l_) - seqs(f)) / span
    mean_context = (context(l_) - context(f)) / span
    rows = np.stack([steps, prefills, prompt_tokens, steps * mean_seqs, steps * mean_context], axis=1)
    return rows, span


def _prefill_rows(r, chunked: bool) -> tuple[np.ndarray, np.ndarray]:
    """One row per recorded prefill: its pass alone, or (chunked) the iteration it shared with the decodes."""
    timed = r.with_first & (r.prefill > 0) & (r.tokens_in > 0)
    if not timed.any():
        return np.zeros((0, len(TERMS))), np.zeros(0)
    n = r.tokens_in[timed].astype(np.float64)
    ones, zeros = np.ones(len(n)), np.zeros(len(n))
    if not chunked:
        return np.stack([zeros, ones, n, zeros, zeros], axis=1), r.prefill[timed].astype(np.float64)
    d = r.with_first
    first, last = r.first[d].astype(np.float64), np.maximum(r.last[d], r.first[d]).astype(np.float64)
    seqs, context = _load_integrals(first, last, np.maximum(r.tokens_in[d], 0).astype(np.float64),
                                    r.tokens_out[d].astype(np.float64))
    at, before = r.first[timed].astype(np.float64), r.first[timed] - r.prefill[timed]
    span = np.maximum(at - before, 1.0)
    return (np.stack([ones, ones, n, (seqs(at) - seqs(before)) / span, (context(at) - context(before)) / span],
                     axis=1), r.prefill[timed].astype(np.float64))


def _pass_rows(r) -> tuple[np.ndarray, np.ndarray]:
    """One row per timed decode pass: its batch, and the contexts decoding then (reconstructed)."""
    if r.passes is None or not r.passes.shape[1]:
        return np.zeros((0, len(TERMS))), np.zeros(0)
    start, dur, batch = (row.astype(np.float64) for row in r.passes)
    d = r.with_first
    first, last = r.first[d].astype(np.float64), np.maximum(r.last[d], r.first[d]).astype(np.float64)
    seqs, context = _load_integrals(first, last, np.maximum(r.tokens_in[d], 0).astype(np.float64),
                                    r.tokens_out[d].astype(np.float64))
    end = start + np.maximum(dur, 1.0)
    per_sequence = (context(end) - context(start)) / np.maximum(seqs(end) - seqs(start), 1e-9)
    ones, zeros = np.ones(len(dur)), np.zeros(len(dur))
    return np.stack([ones, zeros, zeros, batch, batch * per_sequence], axis=1), dur


def _gaps(r) -> tuple[tuple[float, float], int]:
    """The engine's own time between two decode passes (retiring, handing tokens over), as a fixed cost and
    one per sequence of the pass before: a line through each batch size's median gap, weighted by how
    often it was seen. Gaps holding a prefill, or longer than the passes around them by far (the engine
    idle, waiting for work), are left out."""
    start, dur, batch = r.passes[:, np.argsort(r.passes[0], kind="stable")]
    gap = start[1:] - (start[:-1] + dur[:-1])
    timed = r.with_first & (r.prefill > 0)
    prefill_start = np.sort(r.first[timed] - r.prefill[timed])
    inside = np.searchsorted(prefill_start, start[1:]) - np.searchsorted(prefill_start, start[:-1] + dur[:-1])
    clean = (inside == 0) & (gap >= 0) & (gap <= 10 * np.maximum(dur[:-1], dur[1:]))
    sizes, counts = np.unique(batch[:-1][clean], return_counts=True)
    seen = counts >= MIN_PASSES
    if not seen.any():
        return (0.0, 0.0), 0
    medians = np.array([np.median(gap[clean & (batch[:-1] == b)]) for b in sizes[seen]])
    if seen.sum() >= 2:
        slope, intercept = np.polyfit(sizes[seen].astype(np.float64), medians, 1, w=np.sqrt(counts[seen]))
    else:
        slope, intercept = 0.0, float(medians[0])
    slope = max(float(slope), 0.0)
    return (max(float(intercept), 0.0), slope), int(clean.sum())


def _load_integrals(first, last, tokens_in, tokens_out):
    """Functions of time giving the integral, from the start, of the sequences decoding and of their contexts.

    A sequence decodes from its first output to its last; its context grows from its prompt + 1 to
    prompt + output at a steady rate. So the number decoding is piecewise constant and the context
    piecewise linear, ``A(t) + t B(t)``; both integrals are exact between the breakpoints."""
    origin = float(first.min())  # times from the first output: their squares stay exact in float64
    first, last = first - origin, last - origin
    slope = np.where(last > first, (tokens_out - 1) / np.maximum(last - first, 1.0), 0.0)
    intercept = tokens_in + 1 - slope * first
    times = np.concatenate([first, last])
    order = np.argsort(times, kind="stable")
    times = times[order]
    sign = np.concatenate([np.ones(len(first)), -np.ones(len(last))])[order]
    count = np.cumsum(sign)  # sequences decoding after each breakpoint
    a = np.cumsum(sign * np.concatenate([intercept, intercept])[order])
    b = np.cumsum(sign * np.concatenate([slope, slope])[order])
    width = np.diff(times)
    seq_area = np.concatenate([[0.0], np.cumsum(count[:-1] * width)])
    ctx_area = np.concatenate([[0.0], np.cumsum(a[:-1] * width + b[:-1] * width * (times[1:] + times[:-1]) / 2)])

    def integral(area, level, t):
        t = np.asarray(t, dtype=np.float64) - origin
        i = np.clip(np.searchsorted(times, t, side="right") - 1, 0, len(times) - 1)
        return area[i] + level(i, t)

    def seqs(t):
        return integral(seq_area, lambda i, t: count[i] * (t - times[i]), t)

    def context(t):
        return integral(ctx_area, lambda i, t: (t - times[i]) * (a[i] + b[i] * (t + times[i]) / 2), t)

    return seqs, context
