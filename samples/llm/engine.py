"""The instrumented generation loop: tokenize, prefill, decode token by token, detokenize.

Usage::

    from loadprobe import request
    from loadprobe.samples.llm.engine import complete, detokenize, generate, tokenize

    with request():                                   # or an HTTP request span
        prompt = tokenize("Hello")
        new = generate(prompt, max_new_tokens=16)
        text = detokenize(new)

    complete("Hello", 16)    # the same, as {"text", "tokens", "prompt_tokens"}

Stages recorded (engine ``cpu``, batch 1):

- ``tokenize`` and ``detokenize``: byte-level, shape = bytes in or tokens in;
- ``prefill``: one per request, shape ``(prompt tokens,)``, FLOPs and bytes from
  ``prefill_cost``; its ``queue_ns`` is the wait for a model worker when the caller says
  when it queued (``enqueued_ns``);
- ``decode``: one per generated token after the first, shape ``(1,)``, FLOPs and bytes
  from ``decode_cost`` at the context length of that step. The first token comes out of
  prefill (its logits are the prompt's last), so ``max_new_tokens`` tokens take
  ``max_new_tokens - 1`` decode steps -- as in any KV-cache server, where time to first
  token is the prefill.

There is no stop token: every request generates exactly ``max_new_tokens`` tokens, so the
load is what the client asked for.
"""

from __future__ import annotations

from time import perf_counter_ns

from loadprobe import probe

from .model import CONFIG, decode_cost, decode_step, greedy, prefill, prefill_cost

BOS = 256  # token ids 0-255 are bytes; 256 starts every prompt; the rest of the vocabulary is unused
MAX_NEW_TOKENS = 256


def fit_prompt(tokens: list[int], max_new_tokens: int, max_context: int = CONFIG.max_context) -> list[int]:
    """The last tokens of ``tokens`` that leave room for ``max_new_tokens`` in the context."""
    room = max(1, max_context - max_new_tokens)
    return tokens[-room:]


@probe("tokenize", batch=1, shape=lambda text: (len(text),), engine="cpu")
def tokenize(text: str) -> list[int]:
    """Byte-level tokens of ``text`` after a BOS token."""
    return [BOS, *text.encode("utf-8")]


@probe("detokenize", batch=1, shape=lambda tokens: (len(tokens),), engine="cpu")
def detokenize(tokens: list[int]) -> str:
    """Text of the byte tokens in ``tokens`` (other ids carry no text)."""
    return bytes(t for t in tokens if t < 256).decode("utf-8", errors="replace")


def generate(prompt_tokens: list[int], max_new_tokens: int, enqueued_ns: int | None = None) -> list[int]:
    """Greedily generate ``max_new_tokens`` tokens after ``prompt_tokens`` (fitted to the context).

    ``enqueued_ns``: the ``perf_counter_ns()`` at which the request started waiting for
    the thread that runs this; the wait is recorded as the prefill's ``queue_ns``.
    """
    started = perf_counter_ns()
    if max_new_tokens < 1:
        return []
    if max_new_tokens >= CONFIG.max_context:
        raise ValueError(f"max_new_tokens must be under the context of {CONFIG.max_context}")
    prompt = fit_prompt(list(prompt_tokens), max_new_tokens)
    if not prompt:
        raise ValueError("empty prompt")
    with probe("prefill") as span:
        span.batch, span.shape, span.engine = 1, (len(prompt),), "cpu"
        span.flops, span.bytes = prefill_cost(len(prompt))
        if enqueued_ns is not None:
            span.queue_ns = max(0, started - enqueued_ns)
        logits, cache = prefill(prompt)
        new = [greedy(logits)]
    while len(new) < max_new_tokens:
        with probe("decode") as span:
            # The step appends the last token to the cache and attends over all of it.
            span.batch, span.shape, span.engine = 1, (1,), "cpu"
            span.flops, span.bytes = decode_cost(cache.length + 1)
            logits = decode_step(new[-1], cache)
            new.append(greedy(logits))
    return new


def complete(text: str, max_new_tokens: int) -> dict:
    """Tokenize, generate and detokenize: ``{"text", "tokens", "prompt_tokens"}``."""
    prompt = fit_prompt(tokenize(text), max_new_tokens)
    new = generate(prompt, max_new_tokens)
    return {"text": detokenize(new), "tokens": len(new), "prompt_tokens": len(prompt)}
