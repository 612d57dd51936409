"""A plan as a Triton Inference Server model repository: one model per stage and an ensemble.

    files = triton_files(config, paths)   # {"backbone/config.pbtxt": text, ..., "README.md": text}

Every file is text made here; nothing of tritonclient is needed to write it (tests parse each
``config.pbtxt`` with Triton's own ``ModelConfig`` protobuf). The mapping, stage by stage:

- ``batch.size`` -> ``max_batch_size`` and ``dynamic_batching.preferred_batch_size``;
  ``batch.max_wait_ms`` -> ``max_queue_delay_microseconds``. An unbatched stage is
  ``max_batch_size: 1`` with a dynamic batcher kept only for its queue policy (no delay);
- ``timeout_ms`` -> ``default_queue_policy`` (``REJECT`` past it, no client override) and the
  engine's ``max_queue`` -> its ``max_queue_size``;
- the engine -> ``instance_group``: ``KIND_GPU`` with per-GPU ``count`` and ``gpus``,
  ``KIND_CPU`` with ``count``, and for an NPU, which Triton has no kind for, ``KIND_MODEL``;
- the stages in order -> the ensemble's steps, each one's ``OUTPUT`` the next one's ``INPUT``.

Each model is a Python-backend skeleton (``1/model.py``) calling the user's executor by import
path; tensors carry one JSON document per request (README "Inputs and outputs").
"""

from __future__ import annotations

from .._version import __version__
from ..pipeline.config import PipelineConfig
from .losses import Loss, markdown, triton_losses
from .placement import Placement, placements
from .resources import Fit, triton_fit

__all__ = ["triton_files"]

KIND = {"gpu": "KIND_GPU", "cpu": "KIND_CPU", "npu": "KIND_MODEL"}


def _quote(text: str) -> str:
    # Protobuf text format takes C-style escapes; names here are plain, executor paths too.
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _io(name: str) -> str:
    return f"  {{\n    name: {_quote(name)}\n    data_type: TYPE_STRING\n    dims: [ 1 ]\n  }}"


def _parameters(values: dict[str, str]) -> list[str]:
    return [f"parameters {{\n  key: {_quote(key)}\n  value: {{ string_value: {_quote(value)} }}\n}}"
            for key, value in values.items()]


def model_config(p: Placement, service: str, executor: str | None) -> str:
    """``config.pbtxt`` of the model that runs stage ``p.stage`` on its own engine."""
    stage, engine = p.stage, p.engine
    batch = stage.batch
    delay_us = round(batch.max_wait_ms * 1000) if batch else 0
    lines = [f"# Stage {stage.name!r} of plan {service!r} on engine {p.engine_name!r} ({engine.kind}"
             f"{', ' + engine.device if engine.device else ''}), exported by loadprobe {__version__}.",
             "# Regenerate with `loadprobe export` rather than edit: the numbers come from the plan (README.md).",
             f"name: {_quote(stage.name)}",
             'backend: "python"',
             f"max_batch_size: {p.batch_size}",
             "input [\n" + _io("INPUT") + "\n]",
             "output [\n" + _io("OUTPUT") + "\n]",
             "dynamic_batching {"]
    if batch:
        lines.append(f"  preferred_batch_size: [ {batch.size} ]")
    lines += [f"  max_queue_delay_microseconds: {delay_us}",
              "  default_queue_policy {",
              "    timeout_action: REJECT",
              f"    default_timeout_microseconds: {round(stage.timeout_ms * 1000)}",
              "    allow_timeout_override: false",
              f"    max_queue_size: {max(engine.max_queue, 1)}",
              "  }",
              "}"]
    group = [f"    kind: {KIND[p.kind]}", f"    count: {p.per_device if p.kind == 'gpu' else p.slots}"]
    if p.kind == "gpu":
        group.append(f"    gpus: [ {', '.join(map(str, p.device_ids))} ]")
    lines.append("instance_group [\n  {\n" + "\n".join(group) + "\n  }\n]")
    lines += _parameters({"loadprobe_stage": stage.name, "loadprobe_engine": p.engine_name,
                          "loadprobe_executor": executor or "", "loadprobe_batched": "true" if batch else "false"})
    return "\n".join(lines) + "\n"


def ensemble_name(config: PipelineConfig) -> str:
    """The ensemble's model name: the service's, made safe, and never a stage's."""
    # a plan's names are valid as folder and model names (pipeline.names), checked before export
    name, stages = config.service, {s.name for s in config.stages}
    while name in stages:
        name += "-ensemble"
    return name


def ensemble_config(config: PipelineConfig) -> str:
    """``config.pbtxt`` of the ensemble: the stages' models in the plan's order."""
    steps, previous = [], "INPUT"
    for i, stage in enumerate(config.stages):
        output = "OUTPUT" if i == len(config.stages) - 1 else f"{stage.name}_OUTPUT"
        steps.append(f"    {{\n      model_name: {_quote(stage.name)}\n      model_version: -1\n"
                     f"      input_map {{ key: \"INPUT\" value: {_quote(previous)} }}\n"
                     f"      output_map {{ key: \"OUTPUT\" value: {_quote(output)} }}\n    }}")
        previous = output
    return "\n".join([
        f"# Plan {config.service!r}: its {len(config.stages)} stage(s) in order, exported by loadprobe {__version__}.",
        f"name: {_quote(ensemble_name(config))}",
        'platform: "ensemble"',
        "# 1: one request is one JSON document, as in loadprobe's Router; the stages' batchers batch them.",
        "max_batch_size: 1",
        "input [\n" + _io("INPUT") + "\n]",
        "output [\n" + _io("OUTPUT") + "\n]",
        "ensemble_scheduling {\n  step [\n" + ",\n".join(steps) + "\n  ]\n}",
    ]) + "\n"


def triton_files(config: PipelineConfig, paths: dict[tuple[str, str], str]) -> dict[str, str]:
    """Every file of the repository, by path relative to it; a path ending in ``/`` is a folder."""
    from .triton_model import MODEL_PY

    files: dict[str, str] = {}
    for p in placements(config):
        if not p.primary:
            continue  # Triton sends a model's requests to its own instances only: the fallback is listed as lost
        name = p.stage.name
        files[f"{name}/config.pbtxt"] = model_config(p, config.service, paths.get((name, p.engine_name)))
        files[f"{name}/1/model.py"] = MODEL_PY
    ensemble = ensemble_name(config)
    files[f"{ensemble}/config.pbtxt"] = ensemble_config(config)
    files[f"{ensemble}/1/"] = ""  # Triton loads an ensemble only with a version folder, empty
    files["README.md"] = readme(config, paths, triton_losses(config), triton_fit(config))
    return files


def _row(p: Placement, paths: dict[tuple[str, str], str]) -> str:
    stage, batch = p.stage, p.stage.batch
    instances = (f"{KIND[p.kind]} x {p.per_device} on GPU {', '.join(map(str, p.device_ids))}" if p.kind == "gpu"
                 else f"{KIND[p.kind]} x {p.slots}")
    executor = paths.get((stage.name, p.engine_name))
    cells = [f"`{stage.name}`", f"{p.engine_name} ({p.kind})", instances, str(p.batch_size),
             str(batch.size) if batch else "-", f"{round(batch.max_wait_ms * 1000):,}" if batch else "0",
             f"{round(stage.timeout_ms * 1000):,}", f"{max(p.engine.max_queue, 1):,}",
             f"`{executor}`" if executor else "**none given**"]
    return "| " + " | ".join(cells) + " |"


def readme(config: PipelineConfig, paths: dict[tuple[str, str], str], losses: list[Loss], fit: Fit) -> str:
    ensemble = ensemble_name(config)
    rows = [_row(p, paths) for p in placements(config) if p.primary]
    missing = [p.stage.name for p in placements(config) if p.primary and (p.stage.name, p.engine_name) not in paths]
    body = f'''# Triton model repository for plan `{config.service}`

Written by `loadprobe export --to triton` (loadprobe {__version__}): one model per stage of the
plan, and the ensemble `{ensemble}` that passes each request through them in the plan's order.
Regenerate it from pipeline.yaml rather than edit the numbers by hand.

```bash
tritonserver --model-repository="$PWD"      # in this folder; the Python backend runs each model.py
curl -s localhost:8000/v2/models/{ensemble}/infer -d \\
  '{{"inputs": [{{"name": "INPUT", "datatype": "BYTES", "shape": [1, 1], "data": ["{{\\"x\\": 1}}"]}}]}}'
```

## Inputs and outputs

Triton needs typed tensors; the plan only knows payloads. Every model here takes one tensor
`INPUT` and gives one tensor `OUTPUT`, both `TYPE_STRING` (`BYTES` on the wire) with `dims: [ 1 ]`
after the batch dimension: one element per request, holding one JSON document. The ensemble's
`INPUT` is the first stage's, each stage's `OUTPUT` the next one's `INPUT`, the last stage's
`OUTPUT` the ensemble's. A request is one payload (`max_batch_size: 1` on the ensemble, shape
`[1, 1]`); the stages' dynamic batchers gather requests into batches.

## The models

| model | engine | instance_group | max_batch_size | preferred_batch_size | max_queue_delay µs | queue timeout µs | max_queue_size | executor |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Each `STAGE/1/model.py` is the same Python-backend model: it imports the executor named by the
`loadprobe_executor` parameter of its `config.pbtxt` (`MODULE:NAME`, importable where
tritonserver runs) and calls it the way loadprobe's Router does: a batched stage gets a list of
payloads and returns a list of as many results; an unbatched one gets one payload. `async def`
executors are awaited. An executor's exception fails the requests of its batch with the stage
named.{f" No executor was given for {', '.join(missing)}: those models refuse to load, saying so, "
        "until you export again with `--executor STAGE=MODULE:NAME` or set the parameter." if missing else ""}

To serve a model file instead (ONNX, TensorRT, TorchScript), put it in `STAGE/1/`, replace
`backend: "python"` with its backend or platform and `INPUT`/`OUTPUT` with the model's own
tensors, and rename them in the ensemble's `input_map`/`output_map`. GPU indices count the plan's
GPUs in the order it lists its engines; change `gpus` where this machine numbers them otherwise.

## Resources

What the instance groups ask for, against the line-up the plan was sized on:

{chr(10).join(f"- {line}" for line in fit.asked + [f"**{w}**" for w in fit.warnings])}
'''
    return body + "\n" + markdown(losses)
