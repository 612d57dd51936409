"""One rule pairs a server's request with the load client's: by the x-request-id the client sent, or by the
W3C trace id it sent with it (``schema.trace_id_of``: a server traced with OpenTelemetry names a request by
its trace, as vLLM does). The client join (``requestjoin``) and the LLM TTFT split (``llm``) both use it.

Usage::

    keys = client_keys(["1a2b3c4d-1", "1a2b3c4d-2"])     # what a server may name each client request by
    pair_ids(keys, ["1a2b3c4d-2", "other", None])         # array([1, -1, -1]): the client request, or -1
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .columns import with_fill
from ..schema import trace_id_of

__all__ = ["client_keys", "pair_ids"]


def client_keys(ids) -> pa.Array:
    """What a server may name each of the client's requests ``ids`` by: its id, then the trace id the client
    sent with it (the id again where it sent none), for ``pair_ids``."""
    ids = pa.array(ids, pa.string()) if not isinstance(ids, pa.Array) else ids.cast(pa.string())
    return pa.concat_arrays([ids, pa.array([rid and (trace_id_of(rid) or rid) for rid in ids.to_pylist()],
                                           pa.string())])


def pair_ids(keys: pa.Array, ids) -> np.ndarray:
    """For each of ``ids`` (request ids a server recorded), the index of the client request it names in the
    ``client_keys`` ``keys`` -- by the x-request-id the client sent, or by its trace id
    (``schema.trace_id_of``: a server traced with OpenTelemetry names a request by its trace) -- or -1.
    A missing id pairs with nothing."""
    import pyarrow.compute as pc  # here, not at import: it costs ~30 ms

    ids = pa.array(ids, pa.string()) if not isinstance(ids, (pa.Array, pa.ChunkedArray)) else ids.cast(pa.string())
    seen = pc.index_in(ids, value_set=keys, skip_nulls=True)
    where = with_fill(seen.chunks if isinstance(seen, pa.ChunkedArray) else [seen], len(ids), -1, np.int32)
    return np.where(where >= 0, where % max(len(keys) // 2, 1), -1)
