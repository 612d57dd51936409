"""Continuous batching: one engine thread runs iterations over every sequence in flight.

Each iteration first admits waiting requests while fewer than ``max_running`` sequences run and
the KV-cache budget (``kv_tokens``: each sequence reserves its prompt plus its ``max_tokens``)
holds them, prefilling each admitted prompt (its first token comes out of the prefill), then
runs one decode step for all running sequences at once (``model.decode_batch``: one matrix
product per weight for the whole batch). A request that does not fit waits in order; one that
finishes or is aborted frees its share of the budget at the end of the iteration. This is the
scheduling vLLM and its kin do (without chunked prefill or preemption), small enough to read.

The engine knows nothing of HTTP or recording: each sequence's ``on_event`` is called from the
engine thread with what happened to it, and the caller (``serve.py``) streams and records it.

Usage::

    engine = Engine(max_running=8, kv_tokens=4096).start()
    seq = engine.submit(prompt_tokens, max_tokens=32, on_event=print)
    # ("prefill", t0, t1, waited_ns, flops, bytes, token), ("decode", t0, t1, batch, flops, bytes, token), ...
    # ... ("done",), or ("error", message)
    engine.abort(seq); engine.stop()
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Callable

from .model import CONFIG, KVCache, decode_batch, decode_batch_cost, greedy, prefill, prefill_cost


@dataclass(eq=False)
class Sequence:
    """One request in the engine: its prompt, what it may generate, and what it has."""

    prompt: list[int]
    max_tokens: int
    on_event: Callable
    submitted_ns: int = field(default_factory=perf_counter_ns)
    tokens: list[int] = field(default_factory=list)
    cache: KVCache | None = None
    aborted: bool = False

    @property
    def reserved(self) -> int:
        """KV-cache tokens this sequence holds while it runs: its whole context, reserved at admission."""
        return len(self.prompt) + self.max_tokens


class Engine:
    def __init__(self, *, max_running: int = 8, kv_tokens: int = 4096, config=CONFIG) -> None:
        if max_running < 1 or kv_tokens < 2:
            raise ValueError("max_running must be at least 1 and kv_tokens at least 2")
        self.max_running, self.kv_tokens, self.config = max_running, kv_tokens, config
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.kv_used = 0
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="llm-engine", daemon=True)

    def start(self) -> "Engine":
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout=10)

    def submit(self, prompt: list[int], max_tokens: int, on_event: Callable) -> Sequence:
        """Queue a request; ValueError when it could never run (longer than the context or the budget)."""
        seq = Sequence(list(prompt), int(max_tokens), on_event)
        if not seq.prompt or seq.max_tokens < 1:
            raise ValueError("a request needs a prompt and at least one token to generate")
        if seq.reserved > min(self.kv_tokens, self.config.max_context):
            raise ValueError(f"prompt ({len(seq.prompt)}) + max_tokens ({seq.max_tokens}) exceeds the "
                             f"{min(self.kv_tokens, self.config.max_context)} tokens one sequence may hold")
        with self._wake:
            self.waiting.append(seq)
            self._wake.notify()
        return seq

    def abort(self, seq: Sequence) -> None:
        """Stop generating for ``seq`` (its client went away): it leaves at the end of the iteration."""
        seq.aborted = True

    @property
    def kv_usage(self) -> float:
        """The share of the KV-cache budget reserved by running sequences."""
        return self.kv_used / self.kv_tokens

    # -- the engine thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and not self.waiting and not self.running:
                    self._wake.wait()
                if self._stopping:
                    return
                admitted = self._admit()
            for seq in admitted:
                self._prefill(seq)
            decoding = [seq for seq in self.running if not seq.aborted and len(seq.tokens) < seq.max_tokens
                        and seq not in admitted]
            if decoding:
                self._decode(decoding)
            self._retire()

    def _admit(self) -> list[Sequence]:
        """Waiting requests, in order, while a running slot and their KV reservation are free."""
        admitted = []
        while self.waiting and len(self.running) < self.max_running:
            seq = self.waiting[0]
            if seq.aborted:
                self.waiting.popleft()
                continue
            if self.kv_used + seq.reserved > self.kv_tokens:
                break  # first come, first served: a later, smaller request does not overtake it
            self.waiting.popleft()
            self.kv_used += seq.reserved
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def _prefill(self, seq: Sequence) -> None:
        t0 = perf_counter_ns()
        try:
            logits, seq.cache = prefill(seq.prompt, self.config)
        except Exception as exc:  # noqa: BLE001 - the request fails, the engine goes on
            seq.aborted = True
            seq.on_event(("error", str(exc)))
            return
        seq.tokens.append(greedy(logits))
        flops, nbytes = prefill_cost(len(seq.prompt), self.config)
        seq.on_event(("prefill", t0, perf_counter_ns(), t0 - seq.submitted_ns, flops, nbytes, seq.tokens[-1]))

    def _decode(self, batch: list[Sequence]) -> None:
        t0 = perf_counter_ns()
        contexts = [seq.cache.length + 1 for seq in batch]
        logits = decode_batch([seq.tokens[-1] for seq in batch], [seq.cache for seq in batch], self.config)
        t1 = perf_counter_ns()
        flops, nbytes = decode_batch_cost(contexts, self.config)
        for i, seq in enumerate(batch):
            seq.tokens.append(greedy(logits[i]))
            # The batch's cost goes with its first member only, so that achieved FLOP/s counts it once.
            seq.on_event(("decode", t0, t1, len(batch), flops if i == 0 else None, nbytes if i == 0 else None,
                          seq.tokens[-1]))

    def _retire(self) -> None:
        with self._wake:
            for seq in [s for s in self.running if s.aborted or len(s.tokens) >= s.max_tokens]:
                self.running.remove(seq)
                self.kv_used -= seq.reserved
                seq.cache = None
                if not seq.aborted:
                    seq.on_event(("done",))
