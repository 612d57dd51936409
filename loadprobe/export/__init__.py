"""A plan as another server's configuration: a Triton model repository, a Ray Serve application, or (an LLM plan)
vLLM engine arguments.

    from loadprobe.export import export

    done = export("pipeline.yaml", "triton", "triton-repo/", executors=["decode=myservice.steps:decode"])
    done.files        # the paths written
    done.losses       # what the target cannot express of this plan (also in done.out_dir / README.md)
    done.missing      # "stage" / "stage@engine" that were given no executor
    done.warnings     # what will not schedule on the line-up the plan was sized on (README.md, "Resources")

``to`` is ``"triton"`` (``triton``: one model per stage and an ensemble), ``"ray-serve"``
(``rayserve``: ``serve_config.yaml`` and a module with a deployment per stage) or ``"vllm"`` (``vllm``: a
launch script per pool of a plan with ``llm:``). Executors are
named by import path (``executors``). Only text is written: neither tritonclient nor ray is
needed to export. docs/export.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from .._errors import LoadprobeError, listed
from .._files import inside, write_file
from ..pipeline.config import PipelineConfig
from .losses import Loss

__all__ = ["TARGETS", "Exported", "export"]

TARGETS = ("triton", "ray-serve", "vllm")
SCRIPT = ".sh"  # written executable: vLLM's serve-POOL.sh is started as ./serve-POOL.sh N


@dataclass(frozen=True)
class Exported:
    target: str
    out_dir: Path
    files: list[Path]
    losses: list[Loss]
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what will not schedule on the plan's line-up (resources)

    @property
    def dropped(self) -> list[Loss]:
        """The plan's features the target does not carry over at all."""
        return [loss for loss in self.losses if loss.dropped]


def export(plan: PipelineConfig | str | os.PathLike, to: str, out_dir: str | os.PathLike, *,
           executors: Iterable[str] | Mapping[str, str] | None = None, force: bool = False, strict: bool = False,
           num_cpus: float | None = None, check_imports: bool = True, catalog=None) -> Exported:
    """Write ``plan`` (a PipelineConfig, or a pipeline.yaml path) for target ``to`` into ``out_dir``.

    ``out_dir`` must be missing or empty unless ``force`` (then the files the export writes are
    replaced; others are left alone). ``strict`` refuses a plan using a feature the target drops.
    ``num_cpus`` is what each Ray Serve replica reserves (ray-serve only; default: an equal share of the
    plan's cores, at most 1, so that the application fits the host it was planned for). Bad input
    is a LoadprobeError saying what to change; so is an executor that does not import here,
    unless ``check_imports`` is False. ``catalog``: the hardware catalog the plan's devices are checked
    against (default: the packaged one).
    """
    from ..pipeline.files import dump, load, loads
    from .executors import check_importable, executor_paths

    if to not in TARGETS:
        raise LoadprobeError(f"unknown export target {to!r}; the targets are: {', '.join(TARGETS)}")
    if num_cpus is not None and to != "ray-serve":
        raise LoadprobeError("num_cpus (--num-cpus) is what each Ray Serve replica reserves: only for --to ray-serve")
    if num_cpus is not None and not 0 < num_cpus <= 1024:
        raise LoadprobeError(f"num_cpus must be more than 0 and at most 1024, not {num_cpus:g}")
    # A config built in code is checked as a file is: its names become folders and identifiers.
    config = (loads(dump(plan), source="the plan given", catalog=catalog) if isinstance(plan, PipelineConfig)
              else load(plan, catalog=catalog))
    if to == "vllm" and executors:
        raise LoadprobeError("vLLM runs the model itself: executors (--executor) are for --to triton and ray-serve")
    paths = executor_paths(config, executors)
    if check_imports:
        check_importable(paths.values())
    files, losses, fit = _render(config, to, paths, num_cpus)
    if strict and (dropped := [loss for loss in losses if loss.dropped]):
        lost = "; ".join(f"{x.feature} ({x.where})" for x in dropped)
        raise LoadprobeError(f"{config.service}: {to} cannot express {lost}; nothing written (without --strict "
                             f"these are listed in README.md)")
    out = Path(out_dir)
    _check_target(out, force)
    written = []
    targets = {relative: inside(out, relative) for relative in files}  # all checked before the first is written
    for relative, text in files.items():
        target = targets[relative]
        if relative.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            written.append(write_file(target, text, overwrite=force,
                                      mode=0o755 if relative.endswith(SCRIPT) else None))
        except FileExistsError:
            raise LoadprobeError(f"{target} appeared while exporting; not replaced (pass --force to replace it)") \
                from None
    missing = [stage if engine == _own(config, stage) else f"{stage}@{engine}"
               for stage, engine in _needed(config, to) if (stage, engine) not in paths]
    return Exported(to, out, written, losses, missing, fit.warnings)


def _own(config: PipelineConfig, stage: str) -> str:
    return next(s.engine for s in config.stages if s.name == stage)


def _needed(config: PipelineConfig, to: str) -> list[tuple[str, str]]:
    """The (stage, engine) pairs the target runs code for: Triton only the stages' own engines; vLLM none (it runs
    the model itself)."""
    if to == "vllm":
        return []
    return [(s.name, e) for s in config.stages for e in (s.runs_on if to == "ray-serve" else (s.engine,))]


def _render(config: PipelineConfig, to: str, paths, num_cpus: float | None):
    """The files, the losses and how the files fit the plan's line-up (``resources.Fit``)."""
    if to == "vllm":
        from .losses import vllm_losses
        from .resources import Fit
        from .vllm import vllm_files

        return vllm_files(config), vllm_losses(config), Fit(asked=[])
    if to == "triton":
        from .losses import triton_losses
        from .resources import triton_fit
        from .triton import triton_files

        return triton_files(config, paths), triton_losses(config), triton_fit(config)
    from .losses import ray_losses
    from .rayserve import accelerator_resources, application, ray_files

    return (ray_files(config, paths, num_cpus=num_cpus), ray_losses(config, accelerator_resources(config)),
            application(config, paths, num_cpus)[2])


def _check_target(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise LoadprobeError(f"{out} exists and is not a folder; give -o a folder to export into")
    if out.is_dir() and not force:
        try:
            entries = sorted(p.name for p in out.iterdir())
        except OSError as exc:
            raise LoadprobeError(f"{out}: cannot read it ({exc.strerror or exc})") from None
        if entries:
            raise LoadprobeError(f"{out} is not empty ({listed(entries)}); pass --force to write into it, replacing "
                                 f"the files the export writes, or choose another -o")
