"""``loadprobe load --openai``: streamed completions timed against a server that logs what it did, and
the portrait's ``llm`` section read back from the recording (the real engine: tests/vllm/test_load_openai.py)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import loadprobe
from loadprobe.cli import _Group
from loadprobe.cli import load as cli_load
from loadprobe.load.openai import StreamReader, lengths
from loadprobe.schema import FIRST_TOKEN, TOKEN

from ..support.openai_server import OpenAIServer
from .test_load import AZURE_CODE

pytestmark = pytest.mark.timeout(120)


def cli(*args: str):
    group = _Group("loadprobe")
    group.add_command(cli_load.load)
    return CliRunner().invoke(group, list(args))


# -- reading a stream -------------------------------------------------------------------------------


def _events(*events: dict | str) -> bytes:
    return b"".join(b"data: " + (e.encode() if isinstance(e, str) else json.dumps(e).encode()) + b"\n\n"
                    for e in events)


STREAM = _events(
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},  # the role: no output
    {"choices": [{"index": 0, "delta": {"content": "Hel"}}], "usage": None},
    {"choices": [{"index": 0, "delta": {"content": ""}}]},  # a token that completes no character yet
    {"choices": [{"index": 0, "delta": {"content": 'lo "text": "usage"'}, "finish_reason": "length"}]},
    {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}},
    "[DONE]")


@pytest.mark.parametrize("cut", [1, 7, 50, 200, len(STREAM)])
def test_a_stream_is_read_whatever_the_pieces_it_arrives_in(cut):
    reader = StreamReader()
    for n, at in enumerate(range(0, len(STREAM), cut)):
        reader.feed(STREAM[at:at + cut], n)
    assert len(reader.times) == 3 and (reader.tokens_in, reader.tokens_out) == (12, 3)
    assert reader.done and reader.error is None
    assert list(reader.times) == sorted(reader.times)


def test_completions_chunks_count_even_when_empty_and_errors_are_kept():
    reader = StreamReader()
    reader.feed(_events({"choices": [{"index": 0, "text": ""}]}, {"choices": [{"index": 0, "text": "a"}]},
                        {"choices": [{"index": 0, "text": "b", "finish_reason": "length"}]}), 5)
    assert list(reader.times) == [5, 5, 5] and reader.tokens_out is None
    reader.feed(_events({"error": {"message": "engine dead"}}), 6)
    assert reader.error == "error in stream" and len(reader.times) == 3
    broken = StreamReader()
    broken.feed(b"data: {not json\n\n", 1)
    assert broken.error == "bad stream event"


def test_lengths_are_fixed_or_drawn_from_a_seeded_range():
    assert list(lengths("--prompt-tokens", "7", 3)) == [7, 7, 7]
    drawn = lengths("--output-tokens", "10:20", 2000, seed=4)
    assert drawn.min() == 10 and drawn.max() == 20 and np.array_equal(drawn, lengths("x", "10:20", 2000, seed=4))
    for bad in ("0", "a", "5:2", "1:b", ""):
        with pytest.raises(loadprobe.LoadprobeError, match="expected"):
            lengths("--prompt-tokens", bad, 3)


# -- against a server that logs what it did ---------------------------------------------------------


def _recorded(path) -> pa.Table:
    return pa.concat_tables(pq.read_table(f) for f in sorted(path.rglob("spans-*.parquet")))


@pytest.mark.parametrize("endpoint, per_chunk", [("", 1), ("/v1/chat/completions", 3)])
def test_each_request_is_timed_token_by_token_and_analyze_reads_it_back(tmp_path, endpoint, per_chunk):
    with OpenAIServer(first_ms=15, gap_ms=4, tokens_per_chunk=per_chunk) as server:
        done = cli("load", server.url + endpoint, "--openai", "--rate", "25", "--requests", "30", "--prompt-tokens",
                   "20:60", "--output-tokens", "12", "--seed", "3", "--record", str(tmp_path / "rec"))
        log = server.streamed()
    assert done.exit_code == 0, done.output
    assert len(log) == 30 and all(entry["max_tokens"] == 12 for entry in log)
    # prompts sized by the server's own count: one token per word here, plus a chat template's
    asked = lengths("--prompt-tokens", "20:60", 30, seed=3)
    assert sorted(entry["prompt_tokens"] for entry in log) == sorted(asked)
    assert "tokens    prompt mean" in done.stdout and "output mean 12.0 (asked 12.0)" in done.stdout

    spans = _recorded(tmp_path / "rec").to_pylist()
    roots = {s["span_id"]: s for s in spans if s["parent_id"] is None}
    by_id = {s["request_id"]: s for s in roots.values()}
    chunks = -(-12 // per_chunk)
    for entry in log:  # the client's figures against the server's own log, request by request
        root = by_id[entry["request_id"]]
        assert (root["tokens_in"], root["tokens_out"]) == (entry["prompt_tokens"], 12)
        marks = sorted((s for s in spans if s["parent_id"] == root["span_id"]), key=lambda s: s["ts_ns"])
        assert [m["stage"] for m in marks] == [FIRST_TOKEN] + [TOKEN] * (chunks - 1)
        first = marks[0]
        assert abs(first["ts_ns"] - root["ts_ns"]) < 1e6  # the same instant, converted at two flushes perhaps
        ttft = first["dur_ns"]
        # The same monotonic clock, in another process: a chunk is read after it was written, and a request
        # sent at or after its intended time; scheduling on a busy machine may delay any read a little.
        server_ttft = entry["chunks_ns"][0] - entry["arrived_ns"]
        assert server_ttft <= ttft <= server_ttft + 100e6
        decode, server_decode = sum(m["dur_ns"] for m in marks[1:]), entry["chunks_ns"][-1] - entry["chunks_ns"][0]
        assert abs(decode - server_decode) <= max(20e6, 0.2 * server_decode)

    portrait = loadprobe.analyze([tmp_path / "rec"], slo_ttft_ms=30, slo_tpot_ms=4.5 / per_chunk)
    assert not {FIRST_TOKEN, TOKEN} & {stage.name for stage in portrait.stages}  # markers are no stages
    llm = portrait.llm
    assert (llm.source, llm.requests, llm.tokens_out.total) == ("client", 30, 30 * 12)
    assert llm.tokens_in.total == sum(entry["prompt_tokens"] for entry in log)
    ttfts = np.array([next(s for s in spans if s["parent_id"] == r["span_id"] and s["stage"] == FIRST_TOKEN)["dur_ns"]
                      for r in roots.values()]) / 1e6
    assert llm.ttft_ms.mean == pytest.approx(ttfts.mean(), rel=1e-6)
    assert llm.ttft_ms.p99 == pytest.approx(np.percentile(ttfts, 99), rel=1e-6)
    # TPOT counts tokens, not chunks: a chunk of three tokens every 4 ms is 1.33 ms per token
    server_gap_ms = np.median([g for entry in log for g in np.diff(entry["chunks_ns"])]) / 1e6
    assert llm.tpot_ms.mean == pytest.approx(server_gap_ms / per_chunk, rel=0.3)
    assert llm.itl_ms.count == 30 * (chunks - 1) and llm.itl_ms.p50 == pytest.approx(server_gap_ms, rel=0.3)
    # goodput: exactly the requests a count over the recorded figures finds within both targets
    tpots = []
    for root in roots.values():
        marks = [s for s in spans if s["parent_id"] == root["span_id"]]
        first_end = next(m["ts_ns"] + m["dur_ns"] for m in marks if m["stage"] == FIRST_TOKEN)
        last_end = max(m["ts_ns"] + m["dur_ns"] for m in marks)
        tpots.append((last_end - first_end) / 11 / 1e6)
    good = sum(1 for t, p in zip(ttfts, tpots) if t <= 30 and p <= 4.5 / per_chunk)
    assert llm.goodput.requests == good and llm.goodput.share == pytest.approx(good / 30)
    assert llm.goodput.derived == [] and llm.output_tokens_per_s.mean > 0


def test_targets_not_given_are_twice_the_medians_and_say_so(tmp_path):
    with OpenAIServer(first_ms=10, gap_ms=3) as server:
        assert cli("load", server.url, "--openai", "--rate", "20", "--requests", "10", "--output-tokens", "5",
                   "--prompt-tokens", "8", "--record", str(tmp_path)).exit_code == 0
    llm = loadprobe.analyze([tmp_path]).llm
    assert llm.goodput.derived == ["ttft_ms", "tpot_ms"]
    assert llm.goodput.ttft_ms == pytest.approx(2 * llm.ttft_ms.p50)
    assert llm.goodput.tpot_ms == pytest.approx(2 * llm.tpot_ms.p50)


def test_a_server_that_refuses_ignore_eos_is_driven_without_it_and_short_outputs_are_reported(tmp_path):
    with OpenAIServer(first_ms=5, gap_ms=2, accepts_ignore_eos=False, stop_after=4) as server:
        done = cli("load", server.url, "--openai", "--rate", "20", "--requests", "6", "--output-tokens", "10",
                   "--record", str(tmp_path))
        log = server.streamed()
    assert done.exit_code == 0, done.output
    assert "output mean 4.0 (asked 10.0)" in done.stdout and all(entry["output_tokens"] == 4 for entry in log)
    assert loadprobe.analyze([tmp_path]).llm.tokens_out.max == 4


def test_without_usage_outputs_are_counted_in_chunks(tmp_path):
    with OpenAIServer(first_ms=5, gap_ms=2, sends_usage=False) as server:
        done = cli("load", server.url, "--openai", "--rate", "20", "--requests", "5", "--output-tokens", "6",
                   "--record", str(tmp_path))
    assert done.exit_code == 0, done.output
    assert "prompt mean n/a" in done.stdout and "output mean 6.0" in done.stdout
    llm = loadprobe.analyze([tmp_path]).llm
    assert llm.tokens_in is None and llm.tokens_out.total == 30


def test_replay_asks_each_request_for_the_trace_s_own_lengths(tmp_path):
    import csv

    with AZURE_CODE.open() as trace:
        rows = list(csv.DictReader(trace))[:12]
    with OpenAIServer(first_ms=2, gap_ms=0.2) as server:
        done = cli("load", server.url, "--openai", "--replay", str(AZURE_CODE), "--preset", "azure-llm-2023",
                   "--speed", "20", "--requests", "12")
        log = sorted(server.streamed(), key=lambda e: int(e["request_id"].rsplit("-", 1)[1]))
    assert done.exit_code == 0, done.output
    assert [e["max_tokens"] for e in log] == [max(1, int(r["GeneratedTokens"])) for r in rows]
    assert [e["prompt_tokens"] for e in log] == [int(r["ContextTokens"]) for r in rows]


@pytest.mark.parametrize("args, message", [
    (["--body", "{}"], "--openai makes each request's body (--prompt-tokens, --output-tokens); leave out --body, "
                       "--body-file and --method"),
    (["--prompt-tokens", "0"], "--prompt-tokens '0': expected at least 1 token, and LO <= HI"),
    (["--output-tokens", "many"], "--output-tokens 'many': expected a number of tokens N or a range LO:HI, "
                                  "e.g. 128 or 64:512"),
])
def test_bad_openai_input_exits_2_with_one_line(args, message):
    with OpenAIServer() as server:
        done = cli("load", server.url, "--openai", "--rate", "5", "--requests", "2", *args)
        assert done.exit_code == 2, done.output
        assert done.stderr.splitlines() == [f"loadprobe: error: {message}"]
        assert not server.log


def test_the_server_s_refusal_and_a_wrong_path_are_one_line_errors():
    with OpenAIServer() as server:
        done = cli("load", server.url, "--openai", "--model", "nope", "--rate", "5", "--requests", "2")
        assert done.exit_code == 2
        assert done.stderr.splitlines() == [
            f"loadprobe: error: {server.url}/v1/completions: the server answered 404 to a completions request for "
            "model 'nope': The model `nope` does not exist.; check the URL and --model"]
        done = cli("load", server.url + "/generate", "--openai", "--rate", "5")
        assert done.exit_code == 2 and "--openai sends to an OpenAI-compatible endpoint" in done.stderr
        assert not server.streamed()
    done = cli("load", "--model", "m", "http://127.0.0.1:9/", "--rate", "5")
    assert done.stderr.splitlines() == ["loadprobe: error: --model only applies to --openai; add --openai or leave it "
                                        "out"]
