"""A small decoder-only transformer in numpy, with a KV cache and an analytical cost model.

Usage::

    from loadprobe.samples.llm.model import prefill, decode_step, prefill_cost, decode_cost

    logits, cache = prefill([256, 72, 105])     # the whole prompt at once
    token = int(logits.argmax())                # greedy
    logits = decode_step(token, cache)          # one token against the cache
    flops, nbytes = decode_cost(cache.length)   # what that step cost

The weights are random, from a fixed seed (nothing is downloaded), so the text it writes is
noise; what matters here is that it does the same arithmetic, in the same shapes, as a real
model of its size: pre-norm blocks (RMSNorm, multi-head causal self-attention, GELU MLP),
learned positions, float32.

Its two phases load the machine very differently, which is what the sample shows:

- ``prefill`` runs every prompt token through each weight matrix in one matrix-matrix
  product: each weight byte read serves ``n_prompt`` multiply-adds (compute-bound);
- ``decode_step`` runs one token, a matrix-vector product: every weight is read once for
  one multiply-add per element (bandwidth-bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Every matrix product goes through this name, so a test can count the work actually done.
matmul = np.matmul

FLOAT_BYTES = 4  # float32


@dataclass(frozen=True)
class Config:
    n_layers: int = 4
    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 1024
    vocab: int = 512
    max_context: int = 512
    seed: int = 0

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


CONFIG = Config()


class Model:
    """Weights for one ``Config``, drawn from its seed. Use ``get_model()`` for a shared one."""

    def __init__(self, config: Config = CONFIG) -> None:
        if config.d_model % config.n_heads:
            raise ValueError("d_model must be a multiple of n_heads")
        self.config = c = config
        rng = np.random.default_rng(c.seed)

        def dense(fan_in: int, fan_out: int) -> np.ndarray:
            # 1/sqrt(fan_in) keeps activations around unit scale through the layers.
            return (rng.standard_normal((fan_in, fan_out)) / math.sqrt(fan_in)).astype(np.float32)

        self.embed = (rng.standard_normal((c.vocab, c.d_model)) * 0.5).astype(np.float32)
        self.pos = (rng.standard_normal((c.max_context, c.d_model)) * 0.1).astype(np.float32)
        self.layers = [
            {
                "norm1": np.ones(c.d_model, np.float32),
                "wqkv": dense(c.d_model, 3 * c.d_model),  # Q, K and V in one product
                "wo": dense(c.d_model, c.d_model),
                "norm2": np.ones(c.d_model, np.float32),
                "w1": dense(c.d_model, c.d_ff),
                "w2": dense(c.d_ff, c.d_model),
            }
            for _ in range(c.n_layers)
        ]
        self.norm_f = np.ones(c.d_model, np.float32)
        self.w_out = dense(c.d_model, c.vocab)

    def parameters(self) -> list[np.ndarray]:
        """Every weight array."""
        arrays = [self.embed, self.pos, self.norm_f, self.w_out]
        for layer in self.layers:
            arrays += layer.values()
        return arrays


_models: dict[Config, Model] = {}


def get_model(config: Config = CONFIG) -> Model:
    """The model for ``config``, built once per process (weights are read-only afterwards)."""
    model = _models.get(config)
    if model is None:
        model = _models[config] = Model(config)
    return model


class KVCache:
    """Keys and values of every token seen so far, one request's worth.

    Preallocated for ``max_context`` tokens, so appending never copies what is there.
    Layout ``(layers, heads, position, d_head)``: each head's keys are contiguous.
    """

    def __init__(self, config: Config = CONFIG) -> None:
        shape = (config.n_layers, config.n_heads, config.max_context, config.d_head)
        self.k = np.zeros(shape, np.float32)
        self.v = np.zeros(shape, np.float32)
        self.length = 0


def _rms_norm(x: np.ndarray, gain: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * gain


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(0.7978846 * (x + 0.044715 * x * x * x)))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _run(model: Model, tokens, cache: KVCache, all_logits: bool = False) -> np.ndarray:
    """Run ``tokens`` after what ``cache`` holds, appending their keys and values to it.

    Prefill is a chunk of n tokens on an empty cache; a decode step is a chunk of one.
    Returns the logits of the last token (of every token with ``all_logits``).
    """
    c = model.config
    tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
    n, past = len(tokens), cache.length
    end = past + n
    if n == 0:
        raise ValueError("no tokens to run")
    if end > c.max_context:
        raise ValueError(f"context of {end} tokens exceeds max_context={c.max_context}")
    h, dh = c.n_heads, c.d_head
    x = model.embed[tokens] + model.pos[past:end]  # (n, d)
    # Token i of the chunk sits at position past + i and may attend to positions 0..past + i.
    future = np.arange(end)[None, :] > (past + np.arange(n))[:, None] if n > 1 else None
    scale = np.float32(1.0 / math.sqrt(dh))
    for i, layer in enumerate(model.layers):
        qkv = matmul(_rms_norm(x, layer["norm1"]), layer["wqkv"])  # (n, 3d)
        q, k, v = (qkv[:, j * c.d_model:(j + 1) * c.d_model].reshape(n, h, dh).transpose(1, 0, 2) for j in range(3))
        cache.k[i, :, past:end] = k
        cache.v[i, :, past:end] = v
        keys, values = cache.k[i, :, :end], cache.v[i, :, :end]  # (h, end, dh)
        scores = matmul(q, keys.transpose(0, 2, 1)) * scale  # (h, n, end)
        if future is not None:
            scores[:, future] = -np.inf
        attn = matmul(_softmax(scores), values)  # (h, n, dh)
        x = x + matmul(attn.transpose(1, 0, 2).reshape(n, c.d_model), layer["wo"])
        x = x + matmul(_gelu(matmul(_rms_norm(x, layer["norm2"]), layer["w1"])), layer["w2"])
    cache.length = end
    last = x if all_logits else x[-1:]
    logits = matmul(_rms_norm(last, model.norm_f), model.w_out)
    return logits if all_logits else logits[0]


def prefill(tokens, config: Config = CONFIG) -> tuple[np.ndarray, KVCache]:
    """Process a whole prompt at once: (logits of its last token, a cache holding it)."""
    cache = KVCache(config)
    return _run(get_model(config), tokens, cache), cache


def decode_step(token: int, cache: KVCache, config: Config = CONFIG) -> np.ndarray:
    """Process one token after ``cache`` (which it extends): the logits of the next token."""
    return _run(get_model(config), [token], cache)


def decode_batch(tokens, caches: list[KVCache], config: Config = CONFIG) -> np.ndarray:
    """One decode step for each of several sequences at once: their next-token logits, ``(B, vocab)``.

    What continuous batching buys: the projections and the MLP run as one ``(B x d)`` matrix
    product per weight, so each weight is read once for the whole batch instead of once per
    sequence, while attention runs per sequence against its own cache (their lengths differ).
    Each cache is extended by its token, as ``decode_step`` does for one.
    """
    model, c = get_model(config), config
    lengths = [cache.length for cache in caches]
    if len(lengths) != len(tokens) or not lengths:
        raise ValueError("one token per cache, and at least one")
    if max(lengths) + 1 > c.max_context:
        raise ValueError(f"context of {max(lengths) + 1} tokens exceeds max_context={c.max_context}")
    h, dh, d = c.n_heads, c.d_head, c.d_model
    x = model.embed[np.asarray(tokens, dtype=np.int64)] + model.pos[lengths]  # (B, d)
    scale = np.float32(1.0 / math.sqrt(dh))
    attn = np.empty((len(caches), d), np.float32)
    for i, layer in enumerate(model.layers):
        qkv = matmul(_rms_norm(x, layer["norm1"]), layer["wqkv"])  # (B, 3d): the batch's one product
        for b, (cache, at) in enumerate(zip(caches, lengths)):
            q, k, v = (qkv[b, j * d:(j + 1) * d].reshape(h, 1, dh) for j in range(3))
            cache.k[i, :, at] = k[:, 0]
            cache.v[i, :, at] = v[:, 0]
            scores = matmul(q, cache.k[i, :, :at + 1].transpose(0, 2, 1)) * scale  # (h, 1, at + 1)
            attn[b] = matmul(_softmax(scores), cache.v[i, :, :at + 1]).reshape(d)
        x = x + matmul(attn, layer["wo"])
        x = x + matmul(_gelu(matmul(_rms_norm(x, layer["norm2"]), layer["w1"])), layer["w2"])
    for cache in caches:
        cache.length += 1
    return matmul(_rms_norm(x, model.norm_f), model.w_out)


def forward(tokens, config: Config = CONFIG) -> np.ndarray:
    """Logits at every position of ``tokens``, computed in one pass (no cache kept)."""
    return _run(get_model(config), tokens, KVCache(config), all_logits=True)


def greedy(logits: np.ndarray) -> int:
    """The most likely next token."""
    return int(np.argmax(logits))


# -- cost model ----------------------------------------------------------------------


def _chunk_cost(n: int, context: int, c: Config) -> tuple[int, int]:
    """(FLOPs, bytes) of running ``n`` new tokens that attend to ``context`` positions."""
    d, f = c.d_model, c.d_ff
    # Multiply-adds per layer, one matrix product per term.
    layer_macs = (
        n * d * 3 * d  # Q, K, V projection
        + n * context * d  # scores: every head, every new token against every position
        + n * context * d  # scores x values
        + n * d * d  # output projection
        + 2 * n * d * f  # MLP up and down
    )
    flops = 2 * (c.n_layers * layer_macs + d * c.vocab)  # + logits of the last token

    weights = _shared_weights(c) + 2 * n * d  # + the embedding and position rows of the new tokens
    kv = 2 * n * d + 2 * context * d  # K and V written for the new tokens, read for every position
    # Activations: each product reads its input and writes its output; the (heads x n x
    # context) score matrix is written by one product and read by the next.
    hnc = c.n_heads * n * context
    layer_acts = (
        n * d + 3 * n * d  # QKV: normalised input in, q, k, v out
        + n * d + hnc  # scores: q in, scores out
        + hnc + n * d  # x values: probabilities in, attention output out
        + n * d + n * d  # output projection
        + n * d + n * f  # MLP up
        + n * f + n * d  # MLP down
    )
    acts = c.n_layers * (kv + layer_acts) + d + c.vocab
    return flops, FLOAT_BYTES * (weights + acts)


def _shared_weights(c: Config) -> int:
    """Weights every chunk reads whatever its tokens: wqkv, wo, w1, w2 and two norm gains per layer,
    the output head and the final norm."""
    return c.n_layers * (4 * c.d_model * c.d_model + 2 * c.d_model * c.d_ff + 2 * c.d_model) + \
        c.d_model * c.vocab + c.d_model


def prefill_cost(n_prompt: int, config: Config = CONFIG) -> tuple[int, int]:
    """(FLOPs, bytes moved) of ``prefill`` on a prompt of ``n_prompt`` tokens.

    FLOPs count 2 per multiply-add of every matrix product, attention included: per layer
    the QKV, output and MLP projections (``2 n (4 d^2 + 2 d d_ff)``) and the attention
    products (``4 n^2 d``: the full square is computed, then masked), plus the logits of
    the last token (``2 d vocab``). Norms, softmax, GELU and residual adds are left out
    (under 1%). Bytes: every weight read once, the K/V of each token written to the cache
    and read back by attention, and the activations each product reads and writes.

    >>> flops, nbytes = prefill_cost(128)
    """
    return _chunk_cost(n_prompt, n_prompt, config)


def decode_cost(context_len: int, config: Config = CONFIG) -> tuple[int, int]:
    """(FLOPs, bytes moved) of one ``decode_step`` whose token attends to ``context_len`` positions.

    ``context_len`` counts the new token too: ``cache.length`` after the step. Counted as
    in ``prefill_cost`` with one token: ``2 (4 d^2 + 2 d d_ff + 2 context d)`` per layer
    plus the logits, against every weight read once plus the whole K/V cache -- about 2
    FLOPs per 4-byte weight, which is why decoding is bandwidth-bound.
    """
    return _chunk_cost(1, context_len, config)


def decode_batch_cost(context_lens, config: Config = CONFIG) -> tuple[int, int]:
    """(FLOPs, bytes moved) of one ``decode_batch`` whose sequences attend to ``context_lens`` positions
    (each counting its new token): each sequence's ``decode_cost``, less the shared weights that the
    batch reads once instead of once per sequence."""
    flops = nbytes = 0
    for context in context_lens:
        f, b = _chunk_cost(1, context, config)
        flops, nbytes = flops + f, nbytes + b
    return flops, nbytes - FLOAT_BYTES * _shared_weights(config) * (len(context_lens) - 1)
