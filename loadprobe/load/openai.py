"""Driving an OpenAI-compatible server: request bodies of asked lengths, streamed answers timed chunk by chunk.

``loadprobe load URL --openai`` sends completions (``/v1/completions``) or chat completions
(``/v1/chat/completions``) with ``"stream": true`` and ``stream_options.include_usage``, and reads
each answer's server-sent events as they arrive: the time of every chunk that carries output text, and
the prompt and output tokens of the final ``usage`` chunk (engines may pack several tokens into one
chunk, so the server's count is the one kept). ``prepare`` asks the server once before the run: which
model it serves (when ``--model`` is not given), whether it takes ``ignore_eos`` (so that outputs have
the asked length), and how many tokens its tokenizer makes of this module's prompt words, so that a
prompt of N words is about N tokens on any tokenizer. The load client records what came back
(``client.py``); this module holds no network loop of its own.

Usage::

    workload = prepare("http://127.0.0.1:8000/v1/completions", prompt_tokens=lengths("--prompt-tokens", "128", n),
                       output_tokens=lengths("--output-tokens", "16:64", n, seed=1), timeout=30)
    report = loadprobe.load.run(workload.url, offsets, openai=workload)
"""

from __future__ import annotations

import array
import http.client
import json
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import numpy as np

from .._errors import LoadprobeError

__all__ = ["StreamReader", "Workload", "endpoint", "lengths", "prepare"]

# Short, common English words: one token each in the tokenizers of most LLMs, and never a stop sequence.
_WORDS = ("the of and to in is it that for on with as was at by this be from or have an are not but one all "
          "they we can more time out up so into year some when two what about how then its who over new also "
          "people just like way good first well work life day may back use man any after most make even many "
          "world long state part great place small own same old high right system under last never each").split()
_POOL_WORDS = 8192  # a seeded shuffle of the words, cycled: prompts start at different places in it
_CALIBRATION_WORDS = (16, 80)  # two prompt sizes: the tokenizer's tokens per word and a chat template's overhead


def endpoint(url: str) -> tuple[str, str]:
    """``(the URL requests go to, "completions" or "chat")``: a server's root or ``/v1`` means its completions."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path.endswith("/chat/completions"):
        return url, "chat"
    if path.endswith("/completions"):
        return url, "completions"
    if path in ("", "/v1"):
        return f"{parts.scheme}://{parts.netloc}/v1/completions", "completions"
    raise LoadprobeError(f"URL {url!r}: --openai sends to an OpenAI-compatible endpoint; give the server "
                         "(http://HOST:PORT), .../v1/completions or .../v1/chat/completions")


def lengths(option: str, text: str, count: int, seed: int | None = None) -> np.ndarray:
    """``count`` token counts from ``"N"`` (all N) or ``"LO:HI"`` (uniform integers from LO to HI, seeded)."""
    lo, sep, hi = str(text).partition(":")
    try:
        low, high = int(lo), int(hi if sep else lo)
    except ValueError:
        raise LoadprobeError(f"{option} {text!r}: expected a number of tokens N or a range LO:HI, "
                             "e.g. 128 or 64:512") from None
    if low < 1 or high < low:
        raise LoadprobeError(f"{option} {text!r}: expected at least 1 token, and LO <= HI")
    if low == high:
        return np.full(count, low, dtype=np.int64)
    return np.random.default_rng(seed).integers(low, high + 1, size=count, dtype=np.int64)


@dataclass
class Workload:
    """What each request asks: request n (1-based, in send order) takes index (n - 1) mod the lengths' count."""

    url: str
    kind: str  # "completions" or "chat"
    model: str
    prompt_tokens: np.ndarray  # asked, per request index
    output_tokens: np.ndarray
    ignore_eos: bool = True
    words_per_token: float = 1.0  # from the server's counts (prepare); 1.0 where it reports none
    overhead_tokens: float = 0.0  # a chat template's tokens around every prompt
    usage_reported: bool = True
    _pool: str = field(default="", repr=False)
    _starts: np.ndarray = field(default=None, repr=False)  # char offset of each pool word, and of the end

    def __post_init__(self) -> None:
        if len(self.prompt_tokens) != len(self.output_tokens) or not len(self.prompt_tokens):
            raise LoadprobeError("--prompt-tokens and --output-tokens must give a length to every request")
        self._make_pool(int(self.prompt_tokens.max()))

    def _make_pool(self, most_words: int) -> None:
        """The pool text, long enough for a prompt of ``most_words`` from any start."""
        order = np.random.default_rng(7).integers(0, len(_WORDS), size=_POOL_WORDS)
        unit = [_WORDS[i] for i in order]
        words = unit * ((_POOL_WORDS + most_words + 2) // _POOL_WORDS + 1)
        self._pool = " ".join(words) + " "
        self._starts = np.concatenate(([0], np.cumsum([len(w) + 1 for w in words])))

    def words_for(self, tokens: int) -> int:
        """Prompt words that make about ``tokens`` tokens (at least one)."""
        return max(1, round((tokens - self.overhead_tokens) * self.words_per_token))

    def prompt(self, n: int, tokens: int) -> str:
        """Request ``n``'s prompt: its number first (no two prompts share a prefix, so a prefix cache cannot
        skip their prefill), then pool words from a place that moves with ``n``."""
        words = self.words_for(tokens) - 1
        start = (n * 2654435761) % _POOL_WORDS
        if start + words + 1 >= len(self._starts):
            self._make_pool(words)
        return f"{n} " + self._pool[self._starts[start]:self._starts[start + words] - 1] if words else str(n)

    def body(self, n: int) -> bytes:
        """The JSON body of request ``n``."""
        i = (n - 1) % len(self.prompt_tokens)
        return self.body_for(self.prompt(n, int(self.prompt_tokens[i])), int(self.output_tokens[i]), n)

    def body_for(self, prompt: str, max_tokens: int, n: int = 0, stream: bool = True) -> bytes:
        fields = {"model": self.model}
        if self.kind == "chat":
            fields["messages"] = [{"role": "user", "content": prompt}]
        else:
            fields["prompt"] = prompt
        fields["max_tokens"] = max_tokens
        if self.ignore_eos:
            fields["ignore_eos"] = True
        if stream:
            fields |= {"stream": True, "stream_options": {"include_usage": True}}
        return json.dumps(fields, separators=(",", ":")).encode()

    def asked(self, count: int) -> tuple[float, float]:
        """Mean asked prompt and output tokens over the first ``count`` requests."""
        index = np.arange(count) % len(self.prompt_tokens)
        return float(self.prompt_tokens[index].mean()), float(self.output_tokens[index].mean())


class StreamReader:
    """One streamed answer's server-sent events, read as they arrive: output chunk times and the usage.

    ``feed(data, now_ns)`` takes the body's bytes (chunked framing already removed) and the time they
    arrived. A chunk is output when a choice has ``text`` (completions) or a delta with ``content``,
    ``reasoning_content`` or ``tool_calls`` (chat), even empty: an engine sends a token whose bytes do
    not yet complete a character as empty text, and it is still a token. A chat's opening delta that
    only names the role is not output. The ``usage`` object gives the server's prompt and output tokens.
    """

    __slots__ = ("times", "tokens_in", "tokens_out", "error", "done", "_rest")

    def __init__(self) -> None:
        self.times = array.array("q")  # perf_counter_ns of each chunk that carried output
        self.tokens_in = self.tokens_out = None
        self.error: str | None = None
        self.done = False  # [DONE] seen
        self._rest = b""

    def feed(self, data: bytes, now_ns: int) -> None:
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        for line in lines:
            if not line.startswith(b"data:"):
                continue  # comments, event names, blank lines between events
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                continue
            if _plain_output(payload):  # the common chunk, told from its bytes: no JSON decoding per token
                self.times.append(now_ns)
                continue
            try:
                event = json.loads(payload)
            except ValueError:
                self.error = "bad stream event"
                continue
            self._read(event, now_ns)

    def _read(self, event, now_ns: int) -> None:
        if not isinstance(event, dict):
            return
        if event.get("error"):
            self.error = "error in stream"
            return
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.tokens_in = _count(usage.get("prompt_tokens"))
            self.tokens_out = _count(usage.get("completion_tokens"))
        for choice in event.get("choices") or ():
            if isinstance(choice, dict) and _is_output(choice):
                self.times.append(now_ns)
                return


def _plain_output(payload: bytes) -> bool:
    """Whether an event is surely one output chunk and nothing else: a choice with an output key, no
    usage, no role, no error. (Inside JSON strings quotes are escaped, so these byte patterns are keys.)
    Anything else is decoded in full."""
    if b'"usage"' in payload and b'"usage":null' not in payload and b'"usage": null' not in payload:
        return False
    return ((b'"text"' in payload or b'"content"' in payload or b'"reasoning_content"' in payload
             or b'"tool_calls"' in payload) and b'"choices"' in payload and b'"choices":[]' not in payload
            and b'"choices": []' not in payload and b'"role"' not in payload and b'"error"' not in payload)


def _is_output(choice: dict) -> bool:
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return isinstance(choice.get("text"), str)
    if delta.get("role") and not delta.get("content") and not delta.get("tool_calls"):
        return False  # the opening "assistant" announcement
    return any(isinstance(delta.get(key), (str, list)) for key in ("content", "reasoning_content", "tool_calls"))


def _count(value) -> int | None:
    return value if type(value) is int and value >= 0 else None


# -- before the run: the model, ignore_eos, the tokenizer's tokens per word -----------------------------

def prepare(url: str, prompt_tokens: np.ndarray, output_tokens: np.ndarray, *, model: str | None = None,
            headers=(), timeout: float = 30.0, ignore_eos: bool = True) -> Workload:
    """The workload for ``url``, after asking the server (three small requests at most, before the run).

    LoadprobeError, in one line, when the server is not OpenAI-compatible there, serves no model,
    or refuses the request (its own message is quoted).
    """
    target, kind = endpoint(url)
    parts = urlsplit(target)
    conn = _Connection(parts, list(headers), timeout)
    try:
        if model is None:
            model = conn.first_model(target)
        workload = Workload(target, kind, model, np.asarray(prompt_tokens, dtype=np.int64),
                            np.asarray(output_tokens, dtype=np.int64), ignore_eos=ignore_eos)
        counts = []
        for words in _CALIBRATION_WORDS:
            prompt = workload.prompt(0, words)
            status, answer = conn.post(parts.path, workload.body_for(prompt, 1, stream=False))
            if status == 400 and workload.ignore_eos and "ignore_eos" in answer:
                workload.ignore_eos = False  # this server does not take it: outputs may end early
                status, answer = conn.post(parts.path, workload.body_for(prompt, 1, stream=False))
            if not 200 <= status < 300:
                raise LoadprobeError(f"{target}: the server answered {status} to a {kind} request for model "
                                     f"{model!r}: {_said(answer)}; check the URL and --model")
            counts.append(_prompt_count(answer))
    finally:
        conn.close()
    if None in counts or counts[1] <= counts[0]:
        workload.usage_reported = False  # prompts are then as many words as tokens asked
    else:
        per_word = (counts[1] - counts[0]) / (_CALIBRATION_WORDS[1] - _CALIBRATION_WORDS[0])
        workload.words_per_token = 1.0 / per_word
        workload.overhead_tokens = max(0.0, counts[0] - _CALIBRATION_WORDS[0] * per_word)
    return workload


class _Connection:
    """One plain HTTP connection for the questions ``prepare`` asks (http.client: no event loop yet)."""

    def __init__(self, parts, headers: list[str], timeout: float) -> None:
        self.host, self.port = parts.hostname, parts.port or 80
        self.headers = {"Content-Type": "application/json"}
        for header in headers:
            name, _, value = header.partition(":")
            self.headers[name.strip()] = value.strip()
        self.http = http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _ask(self, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
        try:
            self.http.request(method, path, body=body, headers=self.headers)
            response = self.http.getresponse()
            return response.status, response.read().decode("utf-8", "replace")
        except OSError as exc:
            raise LoadprobeError(f"cannot reach {self.host}:{self.port} ({exc.strerror or exc}); is the server "
                                 "running and the URL right?") from None
        except http.client.HTTPException as exc:
            raise LoadprobeError(f"{self.host}:{self.port} did not answer in HTTP ({type(exc).__name__}); "
                                 "is this an OpenAI-compatible server?") from None

    def post(self, path: str, body: bytes) -> tuple[int, str]:
        return self._ask("POST", path, body)

    def first_model(self, target: str) -> str:
        path = urlsplit(target).path.rsplit("/completions", 1)[0].removesuffix("/chat") + "/models"
        status, answer = self._ask("GET", path)
        try:
            models = [m["id"] for m in json.loads(answer)["data"]] if status == 200 else []
        except (ValueError, KeyError, TypeError):
            models = []
        if not models or not isinstance(models[0], str):
            raise LoadprobeError(f"{target}: GET {path} named no model (HTTP {status}); give --model NAME")
        return models[0]

    def close(self) -> None:
        self.http.close()


def _prompt_count(answer: str) -> int | None:
    try:
        return _count(json.loads(answer)["usage"]["prompt_tokens"])
    except (ValueError, KeyError, TypeError):
        return None


def _said(answer: str) -> str:
    """The server's error message, in a line."""
    try:
        data = json.loads(answer)
        message = data.get("error", data) if isinstance(data, dict) else data
        message = message.get("message", message) if isinstance(message, dict) else message
    except ValueError:
        message = answer
    text = " ".join(str(message).split())
    return (text[:200] + "...") if len(text) > 200 else text or "no message"
