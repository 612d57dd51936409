"""Where each stage of a plan runs once exported: its engine, devices, and executions at once.

Both targets place a stage the same way, so the numbers in a Triton ``config.pbtxt`` and a Ray
Serve deployment agree with each other and with the plan::

    for p in placements(config):            # stage order; a stage's fallback engine after its own
        p.stage.name, p.engine_name, p.kind, p.slots, p.per_device, p.device_ids, p.sharing

``slots`` is what the Router allows: the stage's ``max_concurrency`` within the engine's. Device
indices count the devices of one kind in the order the plan lists its engines (``gpu0`` with
count 2, then ``gpu1``: GPUs 0, 1 and 2), which is what an exported file can say without
knowing the machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..pipeline.config import EngineConfig, PipelineConfig, StageConfig

__all__ = ["Placement", "placements"]


@dataclass(frozen=True)
class Placement:
    stage: StageConfig
    engine_name: str
    engine: EngineConfig
    primary: bool       # the stage's own engine (False: its fallback engine)
    sharing: int        # placements on this engine, this one included: they share its devices
    first_device: int   # the engine's first device among the plan's devices of its kind

    @property
    def kind(self) -> str:
        return self.engine.kind

    @property
    def devices(self) -> int:
        return self.engine.count

    @property
    def slots(self) -> int:
        """Executions (a batch is one) in service at once on the engine, all its devices together."""
        own = self.stage.max_concurrency
        return min(own, self.engine.max_concurrency) if own else self.engine.max_concurrency

    @property
    def per_device(self) -> int:
        """Executions at once on each device: the slots spread over the devices, rounded up."""
        return math.ceil(self.slots / self.devices)

    @property
    def device_ids(self) -> list[int]:
        return list(range(self.first_device, self.first_device + self.devices))

    @property
    def batch_size(self) -> int:
        return self.stage.batch.size if self.stage.batch else 1


def placements(config: PipelineConfig) -> list[Placement]:
    """One placement per (stage, engine it may run on), in stage order, its own engine first."""
    pairs = [(stage, engine, engine == stage.engine) for stage in config.stages for engine in stage.runs_on]
    sharing = {name: sum(1 for _, engine, _ in pairs if engine == name) for name in config.engines}
    first, seen = {}, {}
    for name, engine in config.engines.items():
        first[name] = seen.get(engine.kind, 0)
        seen[engine.kind] = first[name] + engine.count
    return [Placement(stage, name, config.engines[name], primary, sharing[name], first[name])
            for stage, name, primary in pairs]

