"""The iteration-level replay of an LLM engine: continuous batching, step by step, on a step-time model.

Each iteration, as the engines do it: requests that arrived wait in order; while fewer than
``max_running`` sequences run and the KV cache holds them, the first waiting is admitted (first
come, first served: a smaller one behind it does not overtake). With chunked prefill on (vLLM V1),
one pass carries a token for every decoding sequence and prompt tokens up to the ``token_budget``,
a long prompt spread over several iterations, every token out at the pass's end; with it off (the
sample engine, vLLM V0), each admitted prompt runs in a pass of its own, its first token out at that
pass's end, then one decode pass for the sequences already running. A sequence's first token comes
out of its prefill, so ``n`` output tokens take ``n - 1`` decode iterations.

The KV cache (``kv_tokens``) is held one of two ways: ``"request"`` reserves a sequence's prompt plus
its whole output at admission (the sample engine: nothing is ever preempted); ``"paged"`` holds what
a sequence has so far, in blocks of ``kv_block`` tokens, and when a step would need more than there is,
preempts the sequence admitted last, which waits again at the head of the queue and recomputes its
prompt and what it had generated when it is admitted again (vLLM).

Usage::

    served = run_engine(workload, model, EngineSettings(max_running=8, kv_tokens=4096, kv_reserve="request"))
    served.first_ns, served.last_ns, served.itl_ns   # per request, and every gap between tokens
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass

import numpy as np

from ..._errors import LoadprobeError

KV_RESERVE = ("request", "paged")


@dataclass
class EngineSettings:
    """What the engine's scheduler may do: the settings the replay runs with."""

    max_running: int = 256  # sequences in flight (vLLM: --max-num-seqs)
    token_budget: int | None = None  # tokens per iteration, decodes and prompt chunks (--max-num-batched-tokens)
    chunked_prefill: bool | None = None  # None: as the recording shows it (``steps.prefills_apart``), else on
    kv_tokens: int | None = None  # KV-cache capacity in tokens; None: unbounded
    kv_reserve: str = "paged"
    kv_block: int = 16
    why: str = ""  # where the settings came from (recorded, given, the engine's defaults)

    def __post_init__(self) -> None:
        if self.max_running < 1:
            raise LoadprobeError(f"--max-running {self.max_running}: expected 1 or more sequences")
        if self.token_budget is not None and self.token_budget < 1:
            raise LoadprobeError(f"--token-budget {self.token_budget}: expected 1 or more tokens per iteration")
        if self.kv_tokens is not None and self.kv_tokens < 2:
            raise LoadprobeError(f"--kv-tokens {self.kv_tokens}: expected 2 or more tokens")
        if self.kv_reserve not in KV_RESERVE:
            raise LoadprobeError(f"--kv-reserve {self.kv_reserve!r}: expected one of {', '.join(KV_RESERVE)}")

    def to_dict(self) -> dict:
        return asdict(self)

    def check_holds(self, tokens_in, tokens_out, field: str = "--kv-tokens") -> None:
        """Raise, naming ``field``, where the KV cache cannot hold the longest of these requests (prompt and output):
        it would refuse it every time -- vLLM itself will not start with less than one longest request's cache."""
        if self.kv_tokens is None or not len(tokens_in):
            return
        longest = int((np.asarray(tokens_in) + np.asarray(tokens_out)).max())
        if self.kv_tokens < longest:
            raise LoadprobeError(f"{field} {self.kv_tokens:,}: the longest request needs {longest:,} tokens of KV cache "
                                 f"(its prompt and output); give {longest:,} or more")


@dataclass
class Workload:
    """Requests to replay: arrival (ns from the start), prompt and output tokens, each in order of arrival."""

    arrival_ns: np.ndarray
    tokens_in: np.ndarray
    tokens_out: np.ndarray
    # A decode pool's requests (prefill and decode on separate engines): each prompt was prefilled elsewhere, its
    # first token out at ``first_out_ns``, and its KV cache arrives with it at ``arrival_ns``: only decoding is left.
    first_out_ns: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival_ns)


@dataclass
class Served:
    """What the replayed engine did with each request (ns from the start; -1: never, e.g. it could not fit)."""

    admitted_ns: np.ndarray  # its (first) admission: its prefill starts
    first_ns: np.ndarray
    last_ns: np.ndarray
    itl_ns: np.ndarray  # every gap between two output tokens of a request, all requests together
    preemptions: int
    iterations: int
    refused: int  # requests longer than the KV cache could ever hold
    kv_used: np.ndarray  # (2, iterations): each iteration's start, its KV tokens held
    kv_tokens: int | None
    largest_batch: int = 0  # the most sequences one decode carried
    busy_ns: int = 0  # time spent in passes (the rest the engine waited for arrivals)


class _Seq:
    __slots__ = ("i", "prompt", "out", "done", "pending", "cached", "last")

    def __init__(self, i: int, prompt: int, out: int) -> None:
        self.i, self.prompt, self.out = i, prompt, out
        self.done = 0  # output tokens so far
        self.pending = prompt  # tokens to compute before its next output: the prompt, or after a preemption all of it
        self.cached = 0  # KV tokens held
        self.last = -1  # when its latest token came out

    @property
    def context(self) -> int:
        return self.prompt + self.done


def run_engine(workload: Workload, model, settings: EngineSettings, seed: int = 0) -> Served:
    """Replay ``workload`` through an engine of ``settings`` whose iterations take ``model.step_ns`` (``StepModel``),
    each pass drawn around it with the recorded spread (``seed``: the draws)."""
    n = len(workload)
    admitted, first, last = (np.full(n, -1, dtype=np.int64) for _ in range(3))
    itl: list = []
    kv_trace: list = []
    s = settings
    capacity = s.kv_tokens
    waiting: deque[_Seq] = deque()
    running: list[_Seq] = []
    arrivals = workload.arrival_ns.astype(np.int64)
    t, nxt, iterations, preemptions, refused = 0, 0, 0, 0, 0
    began = 0  # when the current iteration's passes began: busy time is counted per iteration
    held = 0  # KV tokens held by running sequences
    largest, busy = 0, 0
    rng = np.random.default_rng(seed)
    slow = [0.0, 0]  # the engine's drifting speed (log), and when it was last drawn

    def spread(sigma: float) -> float:
        """One pass's time over the model's: log-normal with mean one, as the recorded passes spread -- the
        pass's own part and the slow drift shared by passes close in time (an Ornstein-Uhlenbeck process)."""
        if sigma <= 0:
            return 1.0
        drift = min(model.drift, sigma)
        if drift > 0 and model.drift_s > 0:
            keep = float(np.exp(-(t - slow[1]) / (model.drift_s * 1e9)))
            slow[0] = slow[0] * keep + drift * float(np.sqrt(1 - keep * keep)) * rng.standard_normal()
            slow[1] = t
        own = float(np.sqrt(max(sigma * sigma - drift * drift, 0.0)))
        return float(np.exp(slow[0] + own * rng.standard_normal() - sigma * sigma / 2))

    def need(seq: _Seq, whole: bool = False) -> int:
        """KV tokens ``seq`` holds once admitted (request: its whole context; paged: blocks for what it has,
        or with ``whole`` for all it will have)."""
        if s.kv_reserve == "request":
            return seq.prompt + seq.out
        return _blocks(seq.prompt + (seq.out if whole else seq.done + 1), s.kv_block)

    while nxt < n or waiting or running:
        if not waiting and not running and nxt < n:
            t = max(t, int(arrivals[nxt]))
        while nxt < n and arrivals[nxt] <= t:
            seq = _Seq(nxt, int(workload.tokens_in[nxt]), max(1, int(workload.tokens_out[nxt])))
            if workload.first_out_ns is not None:  # handed over after its prefill: its first token is out
                seq.pending, seq.done, seq.last = 0, 1, int(workload.first_out_ns[nxt])
                first[nxt] = seq.last
                if seq.done >= seq.out:  # a one-token answer has nothing left to decode
                    admitted[nxt] = last[nxt] = seq.last
                    nxt += 1
                    continue
            if capacity is not None and need(seq, whole=True) > capacity:
                refused += 1  # it could never run: the engine refuses it up front
            else:
                waiting.append(seq)
            nxt += 1
        # Admit in order while a slot and the cache allow.
        new: list[_Seq] = []
        while waiting and len(running) < s.max_running:
            seq = waiting[0]
            cost = need(seq)
            if capacity is not None and held + cost > capacity:
                break
            waiting.popleft()
            held += cost
            seq.cached = cost
            if admitted[seq.i] < 0:
                admitted[seq.i] = t
            running.append(seq)
            new.append(seq)
        if not running:  # nothing fits and nothing runs: only more time (arrivals) can change that
            if nxt < n:
                t = max(t, int(arrivals[nxt]))
                continue
            refused += len(waiting)
            break
        kv_trace.append((t, held))
        began = t
        decoding = [q for q in running if q.pending == 0]
        prefilling = [q for q in running if q.pending > 0]
        if s.kv_reserve == "paged" and capacity is not None:
            held, preempted = _grow(decoding, running, waiting, held, capacity, s.kv_block)
            preemptions += preempted
            decoding = [q for q in decoding if q in running]
            prefilling = [q for q in prefilling if q in running]
        if s.chunked_prefill is not False:  # None: not known, vLLM V1's default
            budget = s.token_budget if s.token_budget is not None else 1 << 62
            decoding = decoding[:budget]
            budget -= len(decoding)
            chunks = []
            for q in prefilling:
                if budget <= 0:
                    break
                take = min(budget, q.pending)
                chunks.append((q, take))
                budget -= take
            context = sum(q.context for q in decoding)
            # attention over the prompt: each chunk's tokens over everything of it computed so far
            square = sum((q.prompt + q.done - q.pending + c) ** 2 - (q.prompt + q.done - q.pending) ** 2
                         for q, c in chunks)
            step = model.step_ns(prefills=len(chunks), prompt_tokens=sum(c for _, c in chunks), prompt_sq=square,
                                 sequences=len(decoding), context_tokens=context)
            t += max(1, int(step * spread(model.spread_decode if decoding else model.spread_prefill)))
            for q, take in chunks:
                q.pending -= take
                if q.pending == 0:
                    _emit(q, t, first, itl)
            for q in decoding:
                _emit(q, t, first, itl)
        else:
            for q in prefilling:
                t += max(1, int(model.prefill_ns(q.pending) * spread(model.spread_prefill)))
                q.pending = 0
                _emit(q, t, first, itl)
            if decoding:
                t += max(1, int(model.decode_ns(len(decoding), sum(q.context for q in decoding))
                                * spread(model.spread_decode)))
                for q in decoding:
                    _emit(q, t, first, itl)
        iterations += 1
        busy += t - began
        largest = max(largest, len(decoding))
        for q in [q for q in running if q.done >= q.out]:
            running.remove(q)
            held -= q.cached
            last[q.i] = q.last
    return Served(admitted, first, last, np.asarray(itl, dtype=np.int64), preemptions, iterations, refused,
                  np.asarray(kv_trace, dtype=np.int64).T.reshape(2, -1), capacity, largest, busy)


def _emit(q: _Seq, t: int, first: np.ndarray, itl: list) -> None:
    """``q`` puts out its next token at ``t``."""
    if q.done == 0:
        first[q.i] = t
    elif q.last >= 0:
        itl.append(t - q.last)
    q.done += 1
    q.last = t


def _grow(decoding, running, waiting, held, capacity, block) -> tuple[int, int]:
    """Paged KV: each decoding sequence needs room for one more token; while there is none, the sequence
    admitted last is preempted (back to the head of the queue, its cache freed, recomputed when admitted)."""
    preempted = 0
    for q in list(decoding):
        if q not in running:
            continue
        grown = _blocks(q.context + 1, block)
        while held + grown - q.cached > capacity and running:
            victim = running.pop()
            held -= victim.cached
            victim.cached, victim.pending = 0, victim.prompt + victim.done
            waiting.appendleft(victim)
            preempted += 1
            if victim is q:
                break
        if q in running:
            held += grown - q.cached
            q.cached = grown
    return held, preempted


def _blocks(tokens: int, block: int) -> int:
    return -(-tokens // block) * block
