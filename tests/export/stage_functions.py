"""Executors for the exported applications under test, importable by path (``stage_functions:parse``).

They follow the Router's contract: a plain function or ``async def`` per payload, and a list in,
a list out for a batched stage. The payloads are JSON documents, as over HTTP.
"""

from __future__ import annotations

import asyncio


def parse(payload: dict) -> dict:
    """A plain function (it runs in a thread): fails when asked to, passes the rest on."""
    if payload.get("fail"):
        raise ValueError(f"asked to fail at parse: {payload['fail']}")
    return {**payload, "parsed": True}


async def score(batch: list) -> list:
    """A batched stage: one result per payload, in order, each telling the batch's size."""
    return [{**payload, "score": payload["value"] * 2, "batch": len(batch)} for payload in batch]


async def finish(payload: dict) -> dict:
    """Hangs when asked to (until its stage's timeout cancels it); else the answer."""
    if payload.get("hang"):
        await asyncio.Event().wait()
    return {"value": payload["value"], "score": payload["score"], "batch": payload["batch"], "done": True}
