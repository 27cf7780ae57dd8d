"""Drawing: paddles and markers are drawn at `antialias`x resolution and Lanczos-downsampled.

Follows the original generator (Linsley et al. 2018, drewlinsley/pathfinder): a paddle is a PIL
line of width round(thickness·antialias) on a small square around its start pixel, downsampled
to 8 bits; its occupancy footprint is the same line dilated by a disk of radius
margin·antialias, downsampled the same way. Both depend only on the paddle's angle, so they are
computed once per angle. Markers are disks of value 1.0 (before contrast, the strokes being
scaled by theirs), and the final image is min-max rescaled to bytes.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw


def translate(y: int, x: int, angle: float, dist: float) -> tuple[int, int]:
    """The integer point `dist` along `angle` from (y, x), rounded up (image rows point down)."""
    return (int(math.ceil(y + float(dist) * math.sin(angle))),
            int(math.ceil(x + float(dist) * math.cos(angle))))


def disk_offsets(radius: float) -> np.ndarray:
    """(k, 2) integer (dy, dx) with dy² + dx² <= radius², row-major."""
    r = int(math.floor(radius))
    dy, dx = np.mgrid[-r:r + 1, -r:r + 1]
    keep = dy * dy + dx * dx <= radius * radius
    return np.stack([dy[keep], dx[keep]], axis=1)


def dilate_binary(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """out[p] = any(mask[p + o]) over in-bounds p + o."""
    q = int(np.abs(offsets).max()) if len(offsets) else 0
    h, w = mask.shape
    padded = np.zeros((h + 2 * q, w + 2 * q), bool)
    padded[q:q + h, q:q + w] = mask
    out = np.zeros((h, w), bool)
    for dy, dx in offsets:
        out |= padded[q + dy:q + dy + h, q + dx:q + dx + w]
    return out


def bytescale(x: np.ndarray) -> np.ndarray:
    """Min-max rescale to uint8: (x - min)·255/(max - min), clipped, + 0.5, truncated."""
    lo, hi = float(x.min()), float(x.max())
    scaled = (x - lo) * (255.0 / ((hi - lo) or 1.0))
    return (scaled.clip(0, 255) + 0.5).astype(np.uint8)


def lanczos(image_u8: np.ndarray, size: int) -> np.ndarray:
    """Resize an 8-bit square image to size x size with PIL's Lanczos filter."""
    return np.asarray(Image.fromarray(image_u8).resize((size, size), Image.Resampling.LANCZOS))


@dataclass(frozen=True)
class Stamp:
    """A paddle drawn from the centre pixel of a (2·half+1)² patch: stroke and occupancy in 0..1."""

    line: np.ndarray
    mask: np.ndarray
    half: int


@functools.lru_cache(maxsize=None)
def paddle_stamp(angle: float, length: int, thickness: float, margin: int, antialias: int) -> Stamp:
    """The paddle that starts at the patch centre and points along `angle` (radians)."""
    half = length + int(math.ceil(thickness)) + margin
    big, centre = 2 * half * antialias + 1, half * antialias
    width = int(round(thickness * antialias))
    if width != thickness * antialias:
        raise ValueError(f"paddle_thickness {thickness} times antialias {antialias} must be a "
                         "whole number of pixels")
    hy, hx = translate(centre, centre, angle, length * antialias)
    canvas = Image.new("F", (big, big), 0.0)
    ImageDraw.Draw(canvas).line([(centre, centre), (hx, hy)], fill=255.0, width=width)
    stroke = np.asarray(canvas) > 0
    halo = dilate_binary(stroke, disk_offsets(margin * antialias))
    size = 2 * half + 1
    line = lanczos(np.where(stroke, 255, 0).astype(np.uint8), size).astype(np.float64) / 255
    mask = lanczos(np.where(halo, 255, 0).astype(np.uint8), size).astype(np.float64) / 255
    # the original keeps footprints in float32 images: its acceptance test (occupancy plus
    # footprint below 1.8) and candidate weights see these rounded values
    mask = mask.astype(np.float32).astype(np.float64)
    line.flags.writeable = mask.flags.writeable = False
    return Stamp(line, mask, half)


def paste_max(canvas: np.ndarray, patch: np.ndarray, y: int, x: int, scale: float = 1.0) -> None:
    """canvas = max(canvas, scale·patch) with the patch centred on (y, x), clipped to the canvas."""
    h = patch.shape[0] // 2
    size_y, size_x = canvas.shape
    y0, x0 = max(y - h, 0), max(x - h, 0)
    y1, x1 = min(y + h + 1, size_y), min(x + h + 1, size_x)
    if y0 >= y1 or x0 >= x1:
        return
    part = patch[y0 - y + h:y1 - y + h, x0 - x + h:x1 - x + h]
    if scale != 1.0:
        part = part * scale
    view = canvas[y0:y1, x0:x1]
    np.maximum(view, part, out=view)


def marker_disk(resolution: int, centre: tuple[int, int], radius: float, antialias: int) -> np.ndarray:
    """A filled disk of value 1.0 centred on pixel `centre`, drawn at `antialias`x and
    Lanczos-downsampled over the whole image (float in 0..1)."""
    n = resolution * antialias
    yy = np.arange(n)[:, None] - centre[0] * antialias
    xx = np.arange(n)[None, :] - centre[1] * antialias
    disk = xx * xx + yy * yy <= (radius * antialias) ** 2
    # the disk's 0/1 image rescaled to bytes as `bytescale` does: 255 inside, 0 outside (0 all over
    # when it covers the whole image)
    inside = 0 if disk.all() else 255
    return lanczos(np.where(disk, inside, 0).astype(np.uint8), resolution).astype(np.float64) / 255
