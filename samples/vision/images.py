"""Generated inspection photos: textured metal plates with scratches and pits, as JPEG.

Usage::

    jpegs = inspection_jpegs(50, seed=1)      # list of JPEG bytes, 320x240 to 800x600

    python3 -m loadprobe.samples.vision.images -n 8 -o plates/    # plates/plate-0.jpg ... plate-7.jpg

Sizes vary, as the cameras of a real line do, and so does the number of defects, which
is what makes the detection head's output size change from image to image.
"""

from __future__ import annotations

import io

import numpy as np

SIZES = ((320, 240), (480, 360), (640, 480), (800, 600))


def inspection_jpeg(rng: np.random.Generator, size: tuple[int, int] | None = None) -> bytes:
    """One photo: brushed-metal texture, a lighting gradient, 0-6 dark defects."""
    from PIL import Image, ImageDraw

    w, h = size or SIZES[rng.integers(len(SIZES))]
    brushed = rng.normal(0, 10, (h, 1)) + rng.normal(0, 4, (h, w))  # horizontal grain
    light = np.linspace(-15, 15, w)[None, :]
    plate = np.clip(150 + brushed + light, 0, 255).astype(np.uint8)
    image = Image.fromarray(plate).convert("RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(rng.poisson(2.0)):
        x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
        if rng.random() < 0.5:  # a scratch
            dx, dy = rng.integers(-w // 4, w // 4, 2)
            draw.line([(x, y), (x + int(dx), y + int(dy))], fill=(40, 40, 45), width=int(rng.integers(2, 6)))
        else:  # a pit
            r = int(rng.integers(4, max(5, w // 25)))
            draw.ellipse([x - r, y - r, x + r, y + r], fill=(30, 28, 30))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=85)
    return out.getvalue()


def inspection_jpegs(n: int, seed: int = 0) -> list[bytes]:
    """``n`` photos from a fixed seed."""
    rng = np.random.default_rng(seed)
    return [inspection_jpeg(rng) for _ in range(n)]


def main(argv=None) -> None:
    """Write ``-n`` photos into ``-o`` as plate-<i>.jpg, for curl and ``loadprobe load --body-file``."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description="Write generated inspection photos as JPEG files.")
    parser.add_argument("-n", type=int, default=8, help="how many photos")
    parser.add_argument("-o", "--output", default="plates", help="folder to write them into")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    for i, jpeg in enumerate(inspection_jpegs(args.n, seed=args.seed)):
        (out / f"plate-{i}.jpg").write_bytes(jpeg)
    print(f"wrote {args.n} photos into {out}/")


if __name__ == "__main__":
    main()
