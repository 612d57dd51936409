"""``loadprobe simulate --llm DATA``: an LLM engine's recording fitted, checked on its own arrivals, replayed at others.

1. The recording's requests (``analysis.run.llm_recording``): the engine's own where they carry first
   tokens (its spans, or its OpenTelemetry spans), else the load client's.
2. The step-time model fitted to them (``steps.fit_steps``).
3. Checked on what was recorded: the recorded arrivals, with their prompt and output lengths, replayed
   through the engine (``engine.run_engine``); the step times are scaled so that the replay's decode
   time equals the recording's, and the recorded TTFT's excess over the replay's (tokenising, the HTTP
   front end, the network where the client's view is shown) is added to every TTFT, as is the time
   after the last output (E2E). Both figures, and the replay against the recording, are reported.
4. The arrivals asked for (a rate, a process or a trace) replayed: each with its trace's lengths where
   it has them, else a (prompt, output) pair drawn from the recording (seeded).

The result's ``llm`` section has the portrait's fields, built by the same code (``analysis.llm.llm_section``),
so ``loadprobe verify`` and the report compare them field by field.

Usage::

    sim = simulate_llm(["data/"], offsets=poisson(6, duration=60, seed=1), settings=EngineSettings(max_running=8))
    sim.to_dict()["llm"]["ttft_ms"]["p95"]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._errors import LoadprobeError
from ..._table import text_table
from ...analysis.histogram import Histogram
from ...analysis.engine_load import most_at_once
from ...analysis.llm import LlmRequests, llm_section
from ...portrait import EngineLevel, Llm, _plain
from .engine import EngineSettings, Served, Workload, run_engine
from .steps import MIN_ROWS, StepModel, fit_steps, prefills_apart

_NS_PER_S = 1_000_000_000


@dataclass
class LlmSimulation:
    llm: Llm  # the simulated requests, as the portrait's ``llm`` section
    model: StepModel
    settings: EngineSettings
    workload: dict  # what was replayed: mode, requests, seed, where the lengths came from
    check: dict  # the recorded arrivals replayed against the recording, and the two corrections taken from it
    engine: dict  # iterations, preemptions, refused, KV use
    beyond: list  # where the replay went past what was recorded: each a sentence
    plan: dict | None = None  # a plan's pools replayed instead of the recorded engine: name -> role, replicas, ...

    def to_dict(self) -> dict:
        if self.plan is not None:
            return {"kind": "llm", "workload": self.workload, "plan": self.plan, "engine": self.engine,
                    "llm": _plain(self.llm)}
        return {"kind": "llm", "workload": self.workload, "engine_settings": self.settings.to_dict(),
                "step_model": self.model.to_dict(), "check": self.check, "engine": self.engine,
                "beyond_recording": self.beyond, "llm": _plain(self.llm)}

    def render(self) -> str:
        w, s = self.workload, self.settings
        lines = [f"{w['requests']:,} requests, {w['mode']}; lengths: {w['lengths']}"]
        if self.plan is not None:
            lines += [f"pool {name}: {p['replicas']} x {p['device'] or 'the recorded engine'}"
                      + (f" tensor-parallel over {p['tensor_parallel']} "
                         f"({p['replicas'] * p['tensor_parallel']} devices)" if p.get("tensor_parallel", 1) > 1 else "")
                      + f" ({p['role']}), at most "
                      f"{p['max_running']} running each; step time: {p['step_time']}"
                      for name, p in self.plan["pools"].items()] + [""]
        else:
            lines += [f"engine: at most {s.max_running} running, "
                      + (f"{s.token_budget:,} tokens per iteration, " if s.token_budget else "")
                      + f"chunked prefill {'on' if s.chunked_prefill else 'off'}, KV cache "
                      + (f"{s.kv_tokens:,} tokens ({s.kv_reserve})" if s.kv_tokens else "unbounded")
                      + (f" -- {s.why}" if s.why else ""),
                      f"step time: {self.model.describe()}",
                      f"checked on the recording: {self.check['summary']}",
                      *(f"beyond the recording: {line}" for line in self.beyond), ""]
        rows = [[name, f"{lat.p50:.2f}", f"{lat.p90:.2f}", f"{lat.p95:.2f}", f"{lat.p99:.2f}", f"{lat.count:,}"]
                for name, lat in (("TTFT", self.llm.ttft_ms), ("TPOT", self.llm.tpot_ms), ("ITL", self.llm.itl_ms),
                                  ("E2E", self.llm.e2e_ms)) if lat is not None]
        lines += text_table(["ms", "p50", "p90", "p95", "p99", "count"], rows, numbers_right=True)
        e, g = self.engine, self.llm.goodput
        lines.append("")
        if self.llm.output_tokens_per_s is not None:
            lines.append(f"output {self.llm.output_tokens_per_s.mean:,.0f} tokens/s; running {e['running_mean']:.2f} "
                         f"sequences on average (peak {e['running_peak']:g})"
                         + (f", {e['iterations']:,} iterations" if "iterations" in e else "")
                         + f", {e['preemptions']:,} preemptions, {e['refused']:,} refused (longer than the KV cache)")
        if g is not None:
            lines.append(f"goodput: {g.share:.1%} of requests ({g.requests:,}) within TTFT <= {g.ttft_ms:.3g} ms"
                         + (f" and TPOT <= {g.tpot_ms:.3g} ms" if g.tpot_ms is not None else ""))
        return "\n".join(lines)


def simulate_llm(paths, *, offsets=None, tokens=None, mode: str | None = None, seed: int = 0,
                 settings: EngineSettings | None = None, service: str | None = None, ttft_ms: float | None = None,
                 tpot_ms: float | None = None, plan=None) -> LlmSimulation:
    """Fit the engine recorded under ``paths`` and replay ``offsets`` (seconds from the start; None: the
    recording's own arrivals) through it. ``tokens``: ``(tokens_in, tokens_out)`` per arrival (-1 where
    unknown: drawn from the recording); ``ttft_ms``/``tpot_ms``: the goodput targets. ``plan``: an LLM plan
    (a PipelineConfig with ``llm:``) whose pools replace the recorded engine (``pools.replay_plan``); the
    recording then gives only the lengths (and, without ``offsets``, the arrivals)."""
    from ...analysis.run import llm_recording

    portrait, views = llm_recording(paths, service=service)
    if plan is not None:
        return _simulate_plan(plan, views, offsets, tokens, mode, seed, ttft_ms, tpot_ms)
    fitted = fit_recording(portrait, views, settings, seed)
    recorded, replayable, own, model, settings, check = (fitted.requests, fitted.replayable, fitted.own, fitted.model,
                                                         fitted.settings, fitted.check)
    if offsets is None:
        workload, how = own, "the recording's"
        mode = mode or f"the recording's {len(own):,} arrivals"
    else:
        workload, how = _workload(np.asarray(offsets, dtype=np.float64), tokens, recorded, replayable, seed)
    if not len(workload):
        raise LoadprobeError("no arrival to simulate: widen --duration or raise --rate")
    served = run_engine(workload, model, settings, seed)
    requests = _served_requests(workload, served, check["ttft_offset_ms"], check["tail_ms"])
    itl = Histogram()
    itl.record(served.itl_ns)
    # The engine's load from its own times: the TTFT's offset is work outside its iterations.
    section = llm_section(requests, "simulated", itl if itl.total else None, ttft_ms, tpot_ms,
                          engine_requests=_served_requests(workload, served, 0.0, 0.0))
    kv = _kv_level(served)
    if section.engine is not None and kv is not None:
        section.engine.kv_cache_pct = kv
    engine = {"iterations": served.iterations, "preemptions": served.preemptions, "refused": served.refused,
              "running_mean": section.engine.running.mean if section.engine and section.engine.running else 0.0,
              "running_peak": section.engine.running.peak if section.engine and section.engine.running else 0.0,
              "kv_cache_pct": _plain(kv)}
    return LlmSimulation(section, model, settings, {"mode": mode, "requests": len(workload), "seed": seed,
                                                     "lengths": how}, check, engine,
                         _beyond(recorded, replayable, model, workload, served))


@dataclass
class Fitted:
    """A recorded engine as the replay runs it: its requests, its fitted steps and settings, checked on them."""

    requests: LlmRequests
    replayable: np.ndarray  # the requests with a first token: what the check replays
    own: Workload  # the recorded arrivals, in order
    model: StepModel
    settings: EngineSettings
    check: dict  # ``_calibrate``'s: the scale and the TTFT offset taken, and the replay against the recording


def fit_recording(portrait, views: dict, settings: EngineSettings | None = None, seed: int = 0) -> Fitted:
    """Fit the engine of an LLM recording (``analysis.run.llm_recording``'s portrait and views) and check the fit
    on its own arrivals. ``settings``: the engine's (None: vLLM's defaults, chunked prefill as recorded)."""
    fitted_view = "service" if _decoded(views["service"]) >= MIN_ROWS else "client"
    recorded = views[fitted_view]
    if recorded is None:
        recorded = views["service"]
    settings = settings or EngineSettings(why="vLLM's defaults: give the engine's own settings")
    known = recorded.tokens_out >= 1
    settings.check_holds(recorded.tokens_in[known], recorded.tokens_out[known])
    apart = prefills_apart(recorded)
    if settings.chunked_prefill is None:
        settings.chunked_prefill = apart is not True  # vLLM V1's default where the recording cannot tell
        settings.why += ("; chunked prefill off: the engine's prefills never overlap its decode passes" if apart else
                         "; chunked prefill on: its prefills overlap its decode passes" if apart is False else
                         "; chunked prefill on (vLLM V1's default): the recording does not time the engine's passes")
    model = fit_steps(recorded, chunked=settings.chunked_prefill, source=f"requests of the {_VIEW[fitted_view]}")
    replayable = recorded.with_first & (recorded.tokens_out >= 1)
    own = _recorded_workload(recorded, replayable)
    check = _calibrate(model, settings, recorded, replayable, own, portrait.llm, seed)
    return Fitted(recorded, replayable, own, model, settings, check)


def lengths_view(views: dict) -> LlmRequests:
    """Of a recording's views (``analysis.run.llm_recording``), the one with the most requests whose output
    length is known: what a plan's load is drawn from (the engine's or the client's, whichever holds more)."""
    return max((views[k] for k in ("service", "client") if views.get(k) is not None),
               key=lambda v: int((v.tokens_out >= 1).sum()))


def _simulate_plan(plan, views: dict, offsets, tokens, mode, seed: int, ttft_ms, tpot_ms) -> LlmSimulation:
    from .pools import pool_engine, replay_plan

    recorded = lengths_view(views)
    known = recorded.tokens_out >= 1
    if offsets is None:
        order = np.argsort(recorded.start[known], kind="stable")
        start = recorded.start[known][order]
        workload = Workload(start - start[0], np.maximum(recorded.tokens_in[known][order], 1),
                            recorded.tokens_out[known][order])
        how, mode = "the recording's", mode or f"the recording's {int(known.sum()):,} arrivals"
    else:
        workload, how = _workload(np.asarray(offsets, dtype=np.float64), tokens, recorded, known, seed)
    if not len(workload):
        raise LoadprobeError("no arrival to simulate: widen --duration or raise --rate")
    replayed = replay_plan(plan, workload, seed)
    if plan.slo is not None:  # goodput against the plan's own targets unless others are given
        ttft_ms = ttft_ms if ttft_ms is not None else plan.slo.ttft_p95_ms
        tpot_ms = tpot_ms if tpot_ms is not None else plan.slo.tpot_p95_ms
    itl = Histogram()
    itl.record(replayed.itl_ns)
    served = _served_requests(workload, replayed, 0.0, 0.0)
    section = llm_section(served, "simulated", itl if itl.total else None, ttft_ms, tpot_ms, engine_requests=served)
    pools = {}
    for name, pool in plan.llm.pools.items():
        steps, settings = pool_engine(plan, name)
        pools[name] = {"role": pool.role, "replicas": pool.replicas, "tensor_parallel": pool.tensor_parallel,
                       "device": plan.engines[name].device,
                       "max_running": pool.max_running, "token_budget": pool.token_budget,
                       "kv_tokens": pool.kv_tokens, "step_time": steps.describe()}
    running = section.engine.running if section.engine is not None else None
    engine = {"preemptions": replayed.preemptions, "refused": replayed.refused,
              "running_mean": running.mean if running else 0.0, "running_peak": running.peak if running else 0.0}
    first = next(iter(plan.llm.pools))
    steps, settings = pool_engine(plan, first)
    return LlmSimulation(section, steps, settings, {"mode": mode, "requests": len(workload), "seed": seed,
                                                    "lengths": how}, {}, engine, [],
                         plan={"service": plan.service, "pools": pools})


def _beyond(r: LlmRequests, keep: np.ndarray, model: StepModel, workload: Workload, served: Served) -> list:
    """What the replay asked of the model past the recording: batches larger than any recorded (their cost
    continues a line), prompts longer (their prefill too)."""
    lines = []
    recorded_batch = max(model.by_batch) if model.by_batch else most_at_once(r.first[keep], r.last[keep])
    if served.largest_batch > recorded_batch:
        lines.append(f"decodes of up to {served.largest_batch} sequences, where the recording's largest was "
                     f"{recorded_batch}: their cost is the recorded line carried on, less sure the further it goes")
    longest = int(r.tokens_in[keep].max())
    if len(workload) and int(workload.tokens_in.max()) > longest:
        over = int((workload.tokens_in > longest).sum())
        lines.append(f"{over:,} prompt(s) longer than the recording's longest ({longest:,} tokens; up to "
                     f"{int(workload.tokens_in.max()):,}): their prefill is the fitted model carried on; record "
                     "prompts that long to know it")
    return lines


_VIEW = {"service": "engine's own spans", "client": "load client's recording"}


def _decoded(r: LlmRequests | None) -> int:
    return 0 if r is None else int((r.with_first & (r.tokens_out >= 2)).sum())


def _recorded_workload(r: LlmRequests, keep: np.ndarray) -> Workload:
    order = np.argsort(r.start[keep], kind="stable")
    start = r.start[keep][order]
    return Workload(start - start[0], np.maximum(r.tokens_in[keep][order], 1), r.tokens_out[keep][order])


def _calibrate(model: StepModel, settings: EngineSettings, r: LlmRequests, keep: np.ndarray, own: Workload,
               shown: Llm | None, seed: int) -> dict:
    """Replay the recorded arrivals; scale the step times to the recorded decode time, then take the recorded
    TTFT's and E2E's excess over the replay's. Returns what was taken and how the replay compares."""
    order = np.argsort(r.start[keep], kind="stable")
    start = r.start[keep][order]
    rec_first, rec_last = r.first[keep][order] - start, np.maximum(r.last[keep][order], r.first[keep][order]) - start
    rec_dur, out = r.dur[keep][order], r.tokens_out[keep][order]
    decoding = out >= 2
    for _ in range(2):  # the scale changes the batches, which change the decode time: once more settles it
        served = run_engine(own, model, settings, seed)
        sim_decode = (served.last_ns - served.first_ns)[decoding & (served.first_ns >= 0)].sum()
        rec_decode = (rec_last - rec_first)[decoding & (served.first_ns >= 0)].sum()
        if sim_decode > 0 and rec_decode > 0:
            model.scale *= float(rec_decode / sim_decode)
    served = run_engine(own, model, settings, seed)
    ran = served.first_ns >= 0
    # The median: a request that queued longer in the engine than in its replay says nothing of the work outside.
    # Never below none: a replay slower than the recording has no work to take back (its settings are not the
    # recorded engine's; the comparison below says so).
    offset_ns = max(0.0, float(np.median(rec_first[ran] - served.first_ns[ran] + own.arrival_ns[ran])))
    outside = shown.ttft_split_ms.outside_ms if (shown is not None and shown.source == "client" and
                                                 shown.ttft_split_ms is not None and
                                                 shown.ttft_split_ms.outside_ms is not None) else 0.0
    tail_ns = float(np.mean(np.maximum(rec_dur - rec_last, 0)[ran]))
    sim_ttft = (served.first_ns - own.arrival_ns)[ran] + offset_ns
    sim_tpot = ((served.last_ns - served.first_ns)[ran & decoding]) / (out[ran & decoding] - 1)
    rec_ttft, rec_tpot = rec_first[ran], (rec_last - rec_first)[ran & decoding] / (out[ran & decoding] - 1)
    compared = {}
    for name, rec, sim in (("ttft", rec_ttft, sim_ttft), ("tpot", rec_tpot, sim_tpot)):
        if len(rec) and len(sim):
            for q in (50, 95):
                a, b = float(np.percentile(rec, q)) / 1e6, float(np.percentile(sim, q)) / 1e6
                compared[f"{name}_p{q}_ms"] = {"recorded": round(a, 4), "replayed": round(b, 4),
                                               "error": round(b / a - 1.0, 4) if a > 0 else None}
    slower = (compared.get("ttft_p50_ms") or {}).get("error")  # the replay's median TTFT over the recording's, - 1
    summary = ", ".join(f"{k.split('_')[0].upper()} p{k.split('_')[1][1:]} {v['replayed']:.3g} ms against "
                        f"{v['recorded']:.3g} recorded" for k, v in compared.items())
    return {"requests": int(ran.sum()), "step_scale": round(model.scale, 4), "ttft_offset_ms": offset_ns / 1e6 + outside,
            "client_outside_ms": outside, "tail_ms": tail_ns / 1e6, "compared": compared,
            "summary": f"{int(ran.sum()):,} recorded arrivals replayed: {summary}; step times x {model.scale:.3g}, "
                       f"{offset_ns / 1e6 + outside:.3g} ms added to each TTFT (work before the first token that "
                       f"no step holds" + (", the client's view" if outside else "") + ")"
                       + (f"; these settings do not reproduce the engine as recorded: its replay's median TTFT is "
                          f"{slower + 1:.3g}x the recorded one" if slower is not None and slower > 1.0 else "")}


def _workload(offsets: np.ndarray, tokens, r: LlmRequests, keep: np.ndarray, seed: int) -> tuple[Workload, str]:
    n = len(offsets)
    pairs = np.stack([np.maximum(r.tokens_in[keep], 1), r.tokens_out[keep]], axis=1)
    drawn = pairs[np.random.default_rng(seed).integers(0, len(pairs), n)]
    tokens_in, tokens_out = drawn[:, 0].copy(), drawn[:, 1].copy()
    given = 0
    if tokens is not None:
        t_in, t_out = (np.asarray(t, dtype=np.int64)[:n] for t in tokens)
        known = (t_in >= 0) & (t_out >= 1)
        tokens_in[known], tokens_out[known] = np.maximum(t_in[known], 1), t_out[known]
        given = int(known.sum())
    how = (f"the trace's for {given:,}, " if given else "") + (
        f"drawn from the recording's {len(pairs):,} (prompt, output) pairs (seed {seed})" if given < n else "")
    return Workload(np.round(offsets * _NS_PER_S).astype(np.int64), tokens_in, tokens_out), how.rstrip(", ")


def _served_requests(w: Workload, s, ttft_offset_ms: float, tail_ms: float) -> LlmRequests:
    ran = s.first_ns >= 0
    shift = int(round(ttft_offset_ms * 1e6))
    first = np.where(ran, s.first_ns + shift, -1)
    last = np.where(ran, np.maximum(s.last_ns, s.first_ns) + shift, -1)
    end = np.where(ran, last + int(round(tail_ms * 1e6)), w.arrival_ns)
    admitted = np.where(ran, s.admitted_ns, w.arrival_ns)
    return LlmRequests(start=w.arrival_ns.copy(), dur=end - w.arrival_ns, tokens_in=w.tokens_in.astype(np.int64),
                       tokens_out=np.where(ran, w.tokens_out, 0).astype(np.int64), ok=ran,
                       first=first, last=last, queued=np.where(ran, admitted - w.arrival_ns, -1),
                       prefill=np.where(ran, first - admitted, -1), ids=None)


def _kv_level(s: Served) -> EngineLevel | None:
    if s.kv_tokens is None or not s.kv_used.shape[1]:
        return None
    t, used = s.kv_used
    width = np.diff(np.append(t, t[-1]))
    pct = used / s.kv_tokens * 100.0
    mean = float((pct * width).sum() / width.sum()) if width.sum() > 0 else float(pct.mean())
    return EngineLevel(mean=mean, peak=float(pct.max()), source="simulated")
