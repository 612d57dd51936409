"""Models and captures for the ``loadprobe align`` tests.

``outlier_net()`` is a small torch classifier with one outlier channel: a per-tensor INT8 range
for the convolution that reads it spends its levels on that channel, the failure mode real
models show. ``fake_int8(net, calibration, exclude)`` is post-training static INT8 in plain
torch (per-channel symmetric weights, per-tensor asymmetric activations at the inputs of every
convolution and linear layer, ranges from a calibration pass), rounding as an INT8 kernel
does; ``exclude`` names modules to keep in float. ``write_capture`` writes a capture from
arrays, for figures known in advance.
"""

from __future__ import annotations

import copy

import numpy as np

from loadprobe.align.capture import CaptureWriter


def outlier_net():
    import torch
    from torch import nn

    torch.manual_seed(3)
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 6))
    with torch.no_grad():
        # channel 0 of module 2's output is 40x the others, and module 4 reads it with 40x smaller
        # weights: the FP32 function hardly changes, module 4's INT8 input range does
        net[2].weight[0] *= 40.0
        net[2].bias[0] *= 40.0
        net[4].weight[:, 0] /= 40.0
    return net.eval()


def fake_int8(net, calibration, exclude=()):
    """An INT8-simulated copy of ``net``; the modules named in ``exclude`` stay in float."""
    import torch
    from torch import nn

    model = copy.deepcopy(net)
    targets = {n: m for n, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear)) and n not in exclude}
    ranges: dict = {}

    def observe(name):
        def hook(module, args):
            lo, hi = ranges.get(name, (0.0, 0.0))
            ranges[name] = (min(lo, float(args[0].min())), max(hi, float(args[0].max())))
        return hook

    handles = [m.register_forward_pre_hook(observe(n)) for n, m in targets.items()]
    with torch.no_grad():
        model(calibration)
    for handle in handles:
        handle.remove()
    for name, module in targets.items():
        with torch.no_grad():
            w = module.weight
            scale = w.abs().reshape(w.shape[0], -1).amax(1).clamp_min(1e-12) / 127  # per output channel
            scale = scale.reshape((-1,) + (1,) * (w.dim() - 1))
            w.copy_(torch.clamp(torch.round(w / scale), -127, 127) * scale)
        lo, hi = ranges[name]
        step = max(hi - lo, 1e-12) / 255
        zero = round(-lo / step)

        def quantise(module, args, step=step, zero=zero):
            return ((torch.clamp(torch.round(args[0] / step) + zero, 0, 255) - zero) * step, *args[1:])

        module.register_forward_pre_hook(quantise)
    return model


def write_capture(path, layers: dict, *, digest: str = "same-samples", outputs=("out",), framework: str = "numpy",
                  model: str = "model"):
    """A capture of ``layers`` ({name: array (samples, ...)}, in model order, each fed by the previous)."""
    names = list(layers)
    n = len(next(iter(layers.values())))
    writer = CaptureWriter(framework, model, n_samples=n, digest=digest)
    for i, name in enumerate(names):
        writer.declare(name, nodes=[f"{name}_node"], op="Op", inputs=[names[i - 1]] if i else [],
                       output=name in outputs)
    for name, array in layers.items():
        for start in range(0, n, 5):  # in batches, as the adapters write them
            writer.add(name, np.asarray(array)[start:start + 5])
    return writer.save(path)
