"""The inspection pipeline's CPU stages and its detection head, each one a loadprobe stage.

Usage::

    image = decode(jpeg)                       # "decode": JPEG -> RGB uint8
    x, darkness = preprocess(image)            # "preprocess": resize, normalise, CHW
    features = session.run(None, {"images": x[None]})[0]   # the backbone (see serve.py)
    boxes = detect(features[0], darkness)      # "head" + "nms": dynamic output sizes

The head is deliberately light and shape-dynamic, as the seeds' detection heads are: how
many candidate boxes pass the score threshold depends on the image, so ``head`` and
``nms`` run at a different shape for nearly every request. That is what keeps them off a
fixed-shape accelerator in a recommended plan.
"""

from __future__ import annotations

import io

import numpy as np

from loadprobe import probe

from .shapes import CHANNELS, GRID, SIZE

MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255
SCORE_THRESHOLD = 0.5
IOU_THRESHOLD = 0.45
_head = np.random.default_rng(3)
HEAD_W = (_head.standard_normal((CHANNELS[-1], 5)) * 0.05).astype(np.float32)  # objectness + 4 box terms

# Work per call, counted from the code below so the roofline places each stage by its own
# arithmetic intensity. preprocess: bilinear resize (4 taps: 4 multiplies, 3 adds per output
# value), normalise (a subtract and a divide), the grey mean (3) and the cell minimum (1) per pixel.
PREPROCESS_FLOPS = SIZE * SIZE * 3 * (7 + 2) + SIZE * SIZE * (3 + 1)
PREPROCESS_OUT_BYTES = 3 * SIZE * SIZE * 4 + GRID * GRID * 4  # the float32 CHW tensor and the darkness map
# head: the 1x1 projection (a multiply-add per channel and term), then ~12 per cell for the
# objectness, sigmoid and threshold; reads the feature map, the weights and the darkness map.
HEAD_FLOPS = 2 * CHANNELS[-1] * 5 * GRID * GRID + 12 * GRID * GRID
HEAD_BYTES = 4 * (CHANNELS[-1] * GRID * GRID + CHANNELS[-1] * 5 + GRID * GRID)
NMS_FLOPS_PER_PAIR = 13  # 2 max, 2 min, 2 subtractions, 2 clips, a multiply, 3 for the union, a divide


@probe("decode", engine="cpu", bytes=lambda jpeg: len(jpeg))
def decode(jpeg: bytes) -> np.ndarray:
    """JPEG bytes to an (H, W, 3) uint8 array."""
    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as img:
        return np.asarray(img.convert("RGB"))


@probe("preprocess", engine="cpu", shape=lambda image: image.shape, flops=lambda image: PREPROCESS_FLOPS,
       bytes=lambda image: image.nbytes + PREPROCESS_OUT_BYTES)
def preprocess(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Resize to the backbone's fixed 160x160, normalise, CHW; plus a darkness map per grid cell."""
    from PIL import Image

    small = np.asarray(Image.fromarray(image).resize((SIZE, SIZE), Image.BILINEAR), np.float32)
    x = ((small - MEAN) / STD).transpose(2, 0, 1).copy()
    gray = small.mean(axis=2)
    cell = SIZE // GRID
    darkness = 1.0 - gray.reshape(GRID, cell, GRID, cell).min(axis=(1, 3)) / 255.0
    return x, darkness.astype(np.float32)


def detect(features: np.ndarray, darkness: np.ndarray, *, queued_ns: int | None = None) -> list[dict]:
    """Boxes for one image: score every grid cell, keep the likely ones, suppress overlaps.

    ``queued_ns``: how long the call waited for a thread before it started (recorded as the
    head's queue time, so the report shows the wait instead of unexplained request time)."""
    boxes, scores = head(features, darkness, queued_ns=queued_ns)
    keep = nms(boxes, scores)
    return [{"box": [round(float(v), 1) for v in boxes[i]], "score": round(float(scores[i]), 3)} for i in keep]


def head(features: np.ndarray, darkness: np.ndarray, *, queued_ns: int | None = None
         ) -> tuple[np.ndarray, np.ndarray]:
    """Candidate boxes (K, 4) in input pixels and their scores; K depends on the image."""
    with probe("head") as span:
        span.engine = "cpu"
        span.queue_ns = queued_ns
        span.flops, span.bytes = HEAD_FLOPS, HEAD_BYTES
        terms = np.einsum("chw,ck->hwk", features, HEAD_W)
        # Dark pits and scratches raise a cell's objectness: the backbone is untrained.
        logits = terms[..., 0] + 12.0 * (darkness - 0.55)
        score = 1.0 / (1.0 + np.exp(-logits))
        ys, xs = np.nonzero(score > SCORE_THRESHOLD)
        cell = SIZE / GRID
        cx, cy = (xs + 0.5) * cell, (ys + 0.5) * cell
        half = cell * (1.0 + np.abs(terms[ys, xs, 1:3]))  # width and height terms
        boxes = np.stack([cx - half[:, 0], cy - half[:, 1], cx + half[:, 0], cy + half[:, 1]], axis=1)
        span.shape = (len(boxes), 4)
        span.batch = 1
        return boxes.astype(np.float32), score[ys, xs].astype(np.float32)


def nms(boxes: np.ndarray, scores: np.ndarray) -> list[int]:
    """Greedy non-maximum suppression: indices of the boxes kept, best first."""
    with probe("nms") as span:
        span.engine = "cpu"
        span.shape = (len(boxes),)
        order = np.argsort(-scores, kind="stable")
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        keep = []
        pairs = 0
        while order.size:
            best, rest = order[0], order[1:]
            keep.append(int(best))
            x1 = np.maximum(boxes[best, 0], boxes[rest, 0])
            y1 = np.maximum(boxes[best, 1], boxes[rest, 1])
            x2 = np.minimum(boxes[best, 2], boxes[rest, 2])
            y2 = np.minimum(boxes[best, 3], boxes[rest, 3])
            inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
            iou = inter / (area[best] + area[rest] - inter)
            order = rest[iou <= IOU_THRESHOLD]
            pairs += len(rest)
        span.flops = 2 * len(boxes) + NMS_FLOPS_PER_PAIR * pairs  # areas, then one IoU per pair compared
        span.bytes = boxes.nbytes + scores.nbytes + 4 * (pairs + len(boxes))
        return keep
