"""The Triton Python-backend ``model.py`` every exported stage gets: it calls the user's executor.

The same file serves every stage; what differs (the stage, its engine, the executor's import
path, whether it is batched) is read from the ``parameters`` of the model's ``config.pbtxt``, so
the numbers live in one place. It only runs inside tritonserver, which provides
``triton_python_backend_utils``.
"""

MODEL_PY = '''\
"""Triton Python-backend model of one loadprobe pipeline stage (written by `loadprobe export --to triton`).

It calls the executor named by the `loadprobe_executor` parameter of this model's config.pbtxt,
MODULE:NAME, the way loadprobe's Router does: a batched stage gets a list of payloads and
returns a list of as many results, an unbatched one gets one payload; `async def` executors are
awaited. Each element of the TYPE_STRING tensors INPUT and OUTPUT is one JSON document.
"""

import asyncio
import importlib
import inspect
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _parameter(config, key):
    return config.get("parameters", {}).get(key, {}).get("string_value", "")


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.stage = _parameter(config, "loadprobe_stage") or args["model_name"]
        self.engine = _parameter(config, "loadprobe_engine")
        self.batched = _parameter(config, "loadprobe_batched") == "true"
        path = _parameter(config, "loadprobe_executor")
        if not path:
            raise pb_utils.TritonModelException(
                f"stage {self.stage!r} has no executor: export again with --executor {self.stage}=MODULE:NAME, "
                "or set the loadprobe_executor parameter of its config.pbtxt")
        module, _, name = path.partition(":")
        target = importlib.import_module(module)
        for part in name.split("."):
            target = getattr(target, part)
        self.executor = target
        self.is_async = inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
            getattr(target, "__call__", None))
        self.loop = asyncio.new_event_loop() if self.is_async else None

    def _call(self, argument):
        result = self.executor(argument)
        return self.loop.run_until_complete(result) if self.is_async else result

    def _run(self, payloads):
        if not self.batched:
            return [self._call(payload) for payload in payloads]
        results = list(self._call(payloads))
        if len(results) != len(payloads):
            raise ValueError(f"the executor returned {len(results)} results for a batch of {len(payloads)}")
        return results

    def execute(self, requests):
        counts, payloads = [], []
        for request in requests:
            items = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().reshape(-1)
            counts.append(len(items))
            payloads.extend(json.loads(item) for item in items)
        try:
            results = self._run(payloads)
        except Exception as exc:  # every request of the batch fails, saying where
            error = pb_utils.TritonError(f"stage {self.stage!r} on engine {self.engine!r}: "
                                         f"{type(exc).__name__}: {exc}")
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        responses, start = [], 0
        for count in counts:
            chunk = [json.dumps(result).encode() for result in results[start:start + count]]
            start += count
            tensor = pb_utils.Tensor("OUTPUT", np.array(chunk, dtype=np.object_).reshape(count, 1))
            responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return responses

    def finalize(self):
        if self.loop is not None:
            self.loop.close()
'''
