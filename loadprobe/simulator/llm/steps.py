"""How long one engine iteration takes: a linear model in what the iteration carries, fitted to a recording.

An iteration (a "step") of a continuously batching engine runs the prompts it admits (prefill) and
one token for every other running sequence (decode). Its time is modelled as

    step = iteration + per_prefill x prompts started + per_prompt_token x prompt tokens
           + per_prompt_token_sq x prompt tokens squared + per_sequence x sequences decoded
           + per_context_token x context tokens they attend over

-- fixed work per pass (weights read once, launch and Python overhead), work per prompt token
(compute), the prompt's attention over itself (quadratic: it dominates long prompts), per decoded
sequence (sampling, streaming), per cached token read (attention over the KV cache). It is linear, so an iteration whose prompts run as passes of their own before the decode
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
make it sharper. The spread of the engine's recorded passes around the model is kept too, so that a
replay's percentiles have the recording's spread, not only its means: log-normal, mean one, in two
parts -- each pass's own, and the engine's speed drifting over time (a shared host: a pass's
slowness persists for a fraction of a second, so a request's whole decode can run slow), whose share
and correlation time come from how alike the recorded passes' residuals are at growing time apart.
``StepModel.describe()`` says what it was fitted to and how well.

Usage::

    model = fit_steps(requests, chunked=False)
    model.step_ns(prefills=1, prompt_tokens=200, sequences=6, context_tokens=1800)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..._errors import LoadprobeError

TERMS = ("iteration", "per_prefill", "per_prompt_token", "per_prompt_token_sq", "per_sequence", "per_context_token")
IT, PREFILL, PROMPT, PROMPT_SQ, SEQ, CTX = range(len(TERMS))  # their columns in the fit's rows
MIN_ROWS = 8  # fewer decoding requests than this cannot separate the terms
MIN_PASSES = 5  # decode passes of one batch size needed to keep that size's own time
QUADRATIC_GAIN = 0.05  # the prompt's quadratic term is kept where it cuts the prefills' relative error by 5%


@dataclass
class StepModel:
    """Nanoseconds per term of an iteration (``TERMS``), and how well they fit what they were fitted to."""

    iteration: float
    per_prefill: float
    per_prompt_token: float
    per_prompt_token_sq: float
    per_sequence: float
    per_context_token: float
    rows: int = 0  # how many recorded intervals, prefills and passes it was fitted to
    error: float = 0.0  # the relative RMS error over the requests' rows
    source: str = ""
    scale: float = 1.0  # a calibration: every step x this (verify --calibrate, or the replay's check)
    # Where the engine timed its decode passes: each batch size's own time over the line above (ns; a
    # BLAS library switching kernels makes batch 1 to 2 dearer than 2 to 3), between sizes interpolated,
    # beyond the largest held.
    by_batch: dict = field(default_factory=dict)
    # The recorded passes' spread around the model: sigma of log(recorded / modelled), prefill and decode,
    # of which ``drift`` (sigma) is the engine's speed wandering with correlation time ``drift_s``.
    spread_prefill: float = 0.0
    spread_decode: float = 0.0
    drift: float = 0.0
    drift_s: float = 0.0
    # A roofline estimate (``roofline.on_device``): a pass reads the weights (``weights_ns``) and the KV cache
    # while it computes, so it takes the larger of memory and compute, plus ``iteration`` (the engine's own work).
    weights_ns: float = 0.0
    roofline: bool = False
    # A tensor-parallel roofline unit's all-reduces, after the pass: a fixed time per pass (their latency) and
    # a time per token it carries (the activations over the link between the devices).
    link_ns: float = 0.0
    link_per_token: float = 0.0

    def step_ns(self, prefills: float = 0, prompt_tokens: float = 0, prompt_sq: float = 0, sequences: float = 0,
                context_tokens: float = 0) -> float:
        """One iteration carrying all of these in one pass (chunked prefill); ``prompt_sq``: the sum over its
        prompt chunks of (tokens through the chunk)^2 - (tokens before it)^2."""
        compute = (prompt_tokens * self.per_prompt_token + prompt_sq * self.per_prompt_token_sq
                   + sequences * self.per_sequence + self._excess(sequences))
        return self.scale * (self.iteration + prefills * self.per_prefill
                             + self._pass(compute, context_tokens * self.per_context_token)
                             + self._link(prompt_tokens + sequences))

    def prefill_ns(self, prompt_tokens: float) -> float:
        """One prompt's pass of its own (chunked prefill off)."""
        compute = prompt_tokens * self.per_prompt_token + prompt_tokens ** 2 * self.per_prompt_token_sq
        return self.scale * (self.per_prefill + (self._pass(compute, 0.0) if self.roofline else compute)
                             + self._link(prompt_tokens))

    def decode_ns(self, sequences: float, context_tokens: float) -> float:
        """One decode pass over ``sequences`` attending over ``context_tokens`` in all."""
        return self.scale * (self.iteration + self._pass(sequences * self.per_sequence + self._excess(sequences),
                                                         context_tokens * self.per_context_token)
                             + self._link(sequences))

    def _pass(self, compute: float, memory: float) -> float:
        """A pass's compute and memory time: overlapped under a roofline, else (a fitted line) their sum."""
        return max(compute, self.weights_ns + memory) if self.roofline else compute + memory

    def _link(self, tokens: float) -> float:
        """A tensor-parallel pass's all-reduces over ``tokens`` (none without tokens or a group)."""
        return self.link_ns + tokens * self.link_per_token if tokens > 0 and self.link_ns else 0.0

    def _excess(self, sequences: float) -> float:
        if not self.by_batch or sequences <= 0:
            return 0.0
        sizes = sorted(self.by_batch)
        return float(np.interp(sequences, sizes, [self.by_batch[b] for b in sizes]))

    def _predict(self, rows: np.ndarray) -> np.ndarray:
        """Each row's time: its terms, and its iterations' batch excess at their mean batch."""
        coef = np.array([getattr(self, t) for t in TERMS])
        excess = np.array([self._excess(s / max(n, 1.0)) * n for n, s in zip(rows[:, IT], rows[:, SEQ])])
        return self.scale * (rows @ coef + excess)

    def to_dict(self) -> dict:
        return {**{term: round(getattr(self, term), 5) for term in TERMS}, "unit": "ns",
                "by_batch": {str(b): round(v, 3) for b, v in sorted(self.by_batch.items())},
                "spread_prefill": round(self.spread_prefill, 4), "spread_decode": round(self.spread_decode, 4),
                "drift": round(self.drift, 4), "drift_s": round(self.drift_s, 4),
                **({"weights_ns": round(self.weights_ns, 3), "roofline": True} if self.roofline else {}),
                **({"link_ns": round(self.link_ns, 3), "link_per_token": round(self.link_per_token, 5)}
                   if self.link_ns else {}),
                "rows": self.rows, "relative_rms_error": round(self.error, 4), "scale": round(self.scale, 4),
                "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> "StepModel":
        return cls(**{term: float(d[term]) for term in TERMS}, rows=int(d.get("rows", 0)),
                   error=float(d.get("relative_rms_error", 0.0)), source=str(d.get("source", "")),
                   scale=float(d.get("scale", 1.0)),
                   by_batch={int(b): float(v) for b, v in (d.get("by_batch") or {}).items()},
                   spread_prefill=float(d.get("spread_prefill", 0.0)), spread_decode=float(d.get("spread_decode", 0.0)),
                   drift=float(d.get("drift", 0.0)), drift_s=float(d.get("drift_s", 0.0)),
                   weights_ns=float(d.get("weights_ns", 0.0)), roofline=bool(d.get("roofline", False)),
                   link_ns=float(d.get("link_ns", 0.0)), link_per_token=float(d.get("link_per_token", 0.0)))

    def describe(self) -> str:
        ms = lambda ns: f"{ns / 1e6:.3g} ms"  # noqa: E731
        us = lambda ns: f"{ns / 1e3:.3g} us"  # noqa: E731
        if self.roofline:
            return (f"step = {ms(self.iteration)} + the larger of memory ({ms(self.weights_ns)} for the weights + "
                    f"{us(self.per_context_token)} per context token) and compute ({us(self.per_prompt_token)} per "
                    f"prompt token or decoding sequence + {self.per_prompt_token_sq:.3g} ns per prompt token squared)"
                    + (f" + the all-reduces ({us(self.link_ns)} + {self.link_per_token:.3g} ns per token)"
                       if self.link_ns else "")
                    + (f", x {self.scale:.3g}" if self.scale != 1.0 else "") + f" ({self.source})")
        return (f"step = {ms(self.iteration)} + {ms(self.per_prefill)} per prompt + {us(self.per_prompt_token)} per "
                f"prompt token + {self.per_prompt_token_sq:.3g} ns per prompt token squared + "
                f"{us(self.per_sequence)} per decoding sequence + {us(self.per_context_token)} per context token"
                + (f", x {self.scale:.3g}" if self.scale != 1.0 else "")
                + (f"; passes spread {self.spread_prefill:.0%} (prefill), {self.spread_decode:.0%} (decode)"
                   if self.spread_prefill or self.spread_decode else "")
                + (f", of which {self.drift:.0%} drifts over {self.drift_s * 1e3:.0f} ms" if self.drift else "")
                + f" (fitted to {self.rows:,} rows, {self.source}; relative RMS error {self.error:.1%})")


def fit_steps(requests, *, chunked: bool, source: str = "recorded requests") -> StepModel:
    """The step model of the engine that served ``requests`` (``analysis.llm.LlmRequests``); ``chunked``:
    whether its prefills share an iteration's pass with the decodes (what a recorded prefill time holds)."""
    from scipy.optimize import nnls

    rows, targets = _decode_rows(requests)
    prefill_rows, prefill_targets = _prefill_rows(requests, chunked)
    first_tokens = len(prefill_targets) < MIN_ROWS  # no prefill recorded: each request's time to its first token
    if first_tokens:
        prefill_rows, prefill_targets = _prefill_rows(requests, chunked, whole=True)
    if len(targets) < MIN_ROWS:
        timed = int(requests.with_first.sum())
        found = f"only {len(targets)} request{'s' if len(targets) != 1 else ''}" if len(targets) else "no request"
        raise LoadprobeError(f"{found} with a first token and two or more output tokens: "
                             f"the step model needs {MIN_ROWS} or more; "
                             + ("record longer, or with longer outputs" if timed else
                                "none of its requests times its first token (an imported trace of arrivals and "
                                "lengths): record the engine itself, or plan a model on catalog devices "
                                "(recommend --llm DATA --model ...)"))
    x = np.vstack([rows, prefill_rows])
    y = np.concatenate([targets, prefill_targets])
    what = f"{source}: {len(targets):,} decodes" + (
        f", {len(prefill_targets):,} {'times to first token' if first_tokens else 'prefills'}" if len(prefill_targets)
        else "")
    pass_rows, pass_targets = _pass_rows(requests)
    model = StepModel(*np.zeros(len(TERMS)))
    if len(pass_targets) >= MIN_ROWS:
        # The decode pass from its own spans, the engine's work between passes from the gaps between them;
        # the prompts from their recorded prefills, else from what the requests' rows hold beyond the rest.
        line, model.by_batch = _passes(nnls, pass_rows, pass_targets)
        between, gaps = _gaps(requests)
        coef = line + between
        prompt_terms = [PREFILL, PROMPT, PROMPT_SQ]
        if len(prefill_targets) >= MIN_ROWS and not chunked:
            coef[prompt_terms] = _prompt_fit(nnls, prefill_rows, prefill_targets)
        else:
            _set(model, coef)
            coef[prompt_terms] = _nnls(nnls, x[:, prompt_terms], y - model._predict(x))
        _set(model, coef)
        model.spread_decode = _spread(model._predict(pass_rows), pass_targets)
        model.drift, model.drift_s = _drift(model._predict(pass_rows), pass_targets, requests.passes[0])
        what += f", {len(pass_targets):,} decode passes, {gaps:,} gaps between them"
    else:
        _set(model, _without_unseen_curve(nnls, x, y))
    if len(prefill_targets) and not chunked:
        model.spread_prefill = _spread(model._predict(prefill_rows), prefill_targets)
    model.rows, model.source = len(y) + len(pass_targets), what
    model.error = float(np.sqrt(np.mean((model._predict(x) / y - 1.0) ** 2)))
    return model


def _prompt_fit(nnls, rows: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """A prompt's pass: per prompt and per token (and the quadratic term, ``_without_unseen_curve``)."""
    return _without_unseen_curve(nnls, rows[:, [PREFILL, PROMPT, PROMPT_SQ]], targets, square=2)


def _without_unseen_curve(nnls, x: np.ndarray, y: np.ndarray, square: int = PROMPT_SQ) -> np.ndarray:
    """The fit with the quadratic term (attention over the prompt: column ``square``) only where the recorded
    prompts show it -- it must cut the relative error by ``QUADRATIC_GAIN`` --, since over a narrow range of
    lengths a curve and a line fit alike, and the curve would rule the long prompts of another workload."""
    curve = _nnls(nnls, x, y)
    line_x = x.copy()
    line_x[:, square] = 0.0
    line = _nnls(nnls, line_x, y)
    error = lambda c: float(np.sqrt(np.mean((x @ c / y - 1.0) ** 2)))  # noqa: E731
    return curve if error(curve) < (1.0 - QUADRATIC_GAIN) * error(line) else line


def _set(model: StepModel, coef) -> None:
    for term, value in zip(TERMS, coef):
        setattr(model, term, float(value))


def _spread(predicted: np.ndarray, recorded: np.ndarray) -> float:
    """sigma of log(recorded / predicted), over the central 98% (a descheduled pass is not the engine's spread)."""
    ok = (predicted > 0) & (recorded > 0)
    if ok.sum() < MIN_ROWS:
        return 0.0
    ratio = np.log(recorded[ok] / predicted[ok])
    lo, hi = np.percentile(ratio, (1, 99))
    return float(np.std(ratio[(ratio >= lo) & (ratio <= hi)]))


def _drift(predicted: np.ndarray, recorded: np.ndarray, start: np.ndarray) -> tuple[float, float]:
    """The slow part of the passes' spread: (sigma, correlation time in s). Consecutive passes' residuals
    correlate by rho_1 (the slow share of the variance); the correlation time is where that likeness has
    fallen to 1/e of it (a 50-pass lag's likeness, as exp(-time apart / tau))."""
    ok = (predicted > 0) & (recorded > 0)
    if ok.sum() < 200:
        return 0.0, 0.0
    order = np.argsort(start[ok], kind="stable")
    res, t = np.log(recorded[ok] / predicted[ok])[order], start[ok][order].astype(np.float64)
    lo, hi = np.percentile(res, (1, 99))
    res = np.clip(res, lo, hi) - np.clip(res, lo, hi).mean()
    var = float(res.var())
    if var <= 0:
        return 0.0, 0.0
    near = float(np.mean(res[:-1] * res[1:])) / var
    lag = 50
    far = float(np.mean(res[:-lag] * res[lag:])) / var
    if near <= 0.05 or far <= 0 or far >= near:
        return 0.0, 0.0
    apart_s = float(np.median(t[lag:] - t[:-lag])) / 1e9
    return float(np.sqrt(near * var)), apart_s / float(np.log(near / far))


def _passes(nnls, rows: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, dict]:
    """The decode pass: each batch size seen ``MIN_PASSES`` times gets its own time (and all one cost per
    context token); a line through the batched sizes (2 and up, where there are two) gives the fixed and
    per-sequence cost; each size's time over that line is kept (``StepModel.by_batch``)."""
    batch = rows[:, SEQ].astype(np.int64)
    sizes, counts = np.unique(batch, return_counts=True)
    sizes = sizes[counts >= MIN_PASSES]
    keep = np.isin(batch, sizes)
    onehot = (batch[keep, None] == sizes[None, :]).astype(np.float64)
    coef = _nnls(nnls, np.hstack([onehot, rows[keep, CTX:CTX + 1]]), targets[keep], relative=False)
    own, per_context = coef[:-1], float(coef[-1])
    batched = sizes >= 2 if (sizes >= 2).sum() >= 2 else np.ones(len(sizes), dtype=bool)
    weights = np.sqrt(np.bincount(batch[keep])[sizes[batched]])
    if batched.sum() >= 2:
        slope, intercept = np.polyfit(sizes[batched].astype(np.float64), own[batched], 1, w=weights)
        slope = max(float(slope), 0.0)
        intercept = max(float(np.average(own[batched] - slope * sizes[batched], weights=weights)), 0.0)
    else:
        slope, intercept = 0.0, float(own[0])
    line = np.zeros(len(TERMS))
    line[[IT, SEQ, CTX]] = intercept, slope, per_context
    return line, {int(b): float(t - intercept - slope * b) for b, t in zip(sizes, own)}


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


def _nnls(nnls, x: np.ndarray, y: np.ndarray, relative: bool = True) -> np.ndarray:
    """Non-negative coefficients for ``x @ c ~ y``: on relative error where the rows mix sizes (a 30 ms
    prefill counts as much as a 2 s decode), else plain; rows whose target is not positive are left out."""
    keep = y > 0
    x, y = x[keep], y[keep]
    weight = 1.0 / y if relative else np.full(len(y), 1.0 / max(float(np.mean(y)), 1e-30))
    weighted = x * weight[:, None]
    scale = np.maximum(np.abs(weighted).max(axis=0), 1e-30)  # columns of comparable size
    coef, _ = nnls(weighted / scale, y * weight)
    return coef / scale


def _decode_rows(r) -> tuple[np.ndarray, np.ndarray]:
    """One row per request that decoded: the iterations from its first token to its last, and what they carried."""
    first, last, tokens_in, tokens_out = _timed(r)
    decoding = (tokens_out >= 2) & (last > first)
    if not decoding.any():
        return np.zeros((0, len(TERMS))), np.zeros(0)
    seqs, context = _load_integrals(first, last, tokens_in, tokens_out)
    f, l_ = first[decoding], last[decoding]
    span = l_ - f
    steps = tokens_out[decoding] - 1
    # Prompts whose first token came inside (first, last]: their prefill ran in one of these iterations.
    order = np.argsort(first)
    sorted_first = first[order]
    cumulative = [np.concatenate([[0.0], np.cumsum(v[order])]) for v in (tokens_in, tokens_in ** 2)]
    lo, hi = np.searchsorted(sorted_first, f, side="right"), np.searchsorted(sorted_first, l_, side="right")
    rows = np.zeros((len(f), len(TERMS)))
    rows[:, IT], rows[:, PREFILL] = steps, hi - lo
    rows[:, PROMPT], rows[:, PROMPT_SQ] = (c[hi] - c[lo] for c in cumulative)
    rows[:, SEQ] = steps * (seqs(l_) - seqs(f)) / span
    rows[:, CTX] = steps * (context(l_) - context(f)) / span
    return rows, span


def _prefill_rows(r, chunked: bool, whole: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One row per recorded prefill: its pass alone, or (chunked) the iteration it shared with the decodes.
    ``whole``: where no prefill was recorded, each request's time to its first token stands for it, holding
    also, on average, half of the decode iteration under way when it arrived (its queue under load is
    left in the fit's error)."""
    if whole:
        r = replace(r, prefill=np.where(r.with_first, r.first - r.start, -1))
    timed = r.with_first & (r.prefill > 0) & (r.tokens_in > 0)
    rows = np.zeros((int(timed.sum()), len(TERMS)))
    if not timed.any():
        return rows, np.zeros(0)
    n = r.tokens_in[timed].astype(np.float64)
    rows[:, PREFILL], rows[:, PROMPT], rows[:, PROMPT_SQ] = 1.0, n, n ** 2
    if not chunked and not whole:
        return rows, r.prefill[timed].astype(np.float64)
    seqs, context = _load_integrals(*_timed(r))
    at, before = r.first[timed].astype(np.float64), (r.first[timed] - r.prefill[timed]).astype(np.float64)
    span = np.maximum(at - before, 1.0)
    # the iteration that carries it (chunked), and half of the one under way on arrival (whole)
    now = before + 1e6
    under_way = (seqs(now) - seqs(before)) / 1e6, (context(now) - context(before)) / 1e6
    share = (1.0 if chunked else 0.0), (0.5 if whole else 0.0)
    carried = ((seqs(at) - seqs(before)) / span, (context(at) - context(before)) / span) if chunked else (0.0, 0.0)
    rows[:, IT] = share[0] + share[1] * (under_way[0] > 0)
    rows[:, SEQ] = share[0] * carried[0] + share[1] * under_way[0]
    rows[:, CTX] = share[0] * carried[1] + share[1] * under_way[1]
    return rows, r.prefill[timed].astype(np.float64)


def _pass_rows(r) -> tuple[np.ndarray, np.ndarray]:
    """One row per timed decode pass: its batch, and the contexts decoding then (reconstructed)."""
    if r.passes is None or not r.passes.shape[1]:
        return np.zeros((0, len(TERMS))), np.zeros(0)
    start, dur, batch = (row.astype(np.float64) for row in r.passes)
    seqs, context = _load_integrals(*_timed(r))
    end = start + np.maximum(dur, 1.0)
    per_sequence = (context(end) - context(start)) / np.maximum(seqs(end) - seqs(start), 1e-9)
    rows = np.zeros((len(dur), len(TERMS)))
    rows[:, IT], rows[:, SEQ], rows[:, CTX] = 1.0, batch, batch * per_sequence
    return rows, dur


def _gaps(r) -> tuple[np.ndarray, int]:
    """The engine's own time between two decode passes (retiring, handing tokens over), as a fixed cost and
    one per sequence of the pass before: a line through each batch size's median gap, weighted by how
    often it was seen. Gaps holding a prefill, or longer than the passes around them by far (the engine
    idle, waiting for work), are left out. Returned as terms to add to the pass's."""
    start, dur, batch = r.passes[:, np.argsort(r.passes[0], kind="stable")]
    gap = start[1:] - (start[:-1] + dur[:-1])
    timed = r.with_first & (r.prefill > 0)
    prefill_start = np.sort(r.first[timed] - r.prefill[timed])
    inside = np.searchsorted(prefill_start, start[1:]) - np.searchsorted(prefill_start, start[:-1] + dur[:-1])
    clean = (inside == 0) & (gap >= 0) & (gap <= 10 * np.maximum(dur[:-1], dur[1:]))
    sizes, counts = np.unique(batch[:-1][clean], return_counts=True)
    seen = counts >= MIN_PASSES
    terms = np.zeros(len(TERMS))
    if not seen.any():
        return terms, 0
    medians = np.array([np.median(gap[clean & (batch[:-1] == b)]) for b in sizes[seen]])
    if seen.sum() >= 2:
        slope, intercept = np.polyfit(sizes[seen].astype(np.float64), medians, 1, w=np.sqrt(counts[seen]))
    else:
        slope, intercept = 0.0, float(medians[0])
    terms[IT], terms[SEQ] = max(float(intercept), 0.0), max(float(slope), 0.0)
    return terms, int(clean.sum())


def _timed(r) -> tuple[np.ndarray, ...]:
    """The requests with a first token: first and last output, prompt and output tokens, as floats."""
    d = r.with_first
    return (r.first[d].astype(np.float64), np.maximum(r.last[d], r.first[d]).astype(np.float64),
            np.maximum(r.tokens_in[d], 0).astype(np.float64), r.tokens_out[d].astype(np.float64))


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
