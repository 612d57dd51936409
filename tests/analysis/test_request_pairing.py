"""One rule pairs a server's request with the load client's: by the x-request-id the client sent, or by the
trace id it sent with it (``schema.trace_id_of``); a missing id pairs with nothing."""

from __future__ import annotations

import pyarrow as pa

from loadprobe.analysis.pairing import client_keys, pair_ids
from loadprobe.schema import trace_id_of


def test_a_server_id_finds_its_client_request_by_either_id():
    client = ["1a2b3c4d-1", "1a2b3c4d-2", "mine-7", None]
    keys = client_keys(client)
    server = ["1a2b3c4d-2", trace_id_of("1a2b3c4d-1"), "mine-7", "other", None, trace_id_of("1a2b3c4d-9")]
    assert pair_ids(keys, server).tolist() == [1, 0, 2, -1, -1, -1]


def test_arrow_and_chunked_ids_pair_the_same_as_lists():
    keys = client_keys(pa.array(["0badcafe-1", "0badcafe-2"]))
    chunked = pa.chunked_array([["0badcafe-2"], [None, trace_id_of("0badcafe-1")]])
    assert pair_ids(keys, chunked).tolist() == [1, -1, 0]
    assert pair_ids(client_keys([]), ["0badcafe-1"]).tolist() == [-1]
