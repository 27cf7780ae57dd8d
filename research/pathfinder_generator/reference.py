"""Run the original Pathfinder generator (drewlinsley/pathfinder, `snakes2.py` + `snakes.py`, its
2019 version) from a checkout and record what it draws, image by image.

    python reference.py --dir CHECKOUT --resolution 32 --start 0 --stop 500 --out ref.npz

The original targets Python 2-era NumPy/SciPy: before importing it, this process aliases the
removed `np.float` / `np.round_` and installs a stand-in `scipy.misc` with the old `imresize`
(min-max byte scaling, then a PIL resize) and `imsave`, and a no-op `matplotlib.pyplot`. It needs
OpenCV (`cv2`). Image i is drawn after seeding NumPy's global generator and `random` with i, so
the same index gives the same image; `--legacy-check` style comparisons can rely on that.

Recorded per image: the final uint8 image (what `imsave` would write), each target snake's float
layer, the distractors' float layer, the marker centres, the label, the number of distractor
snakes placed and every accepted turn (radians) of the targets and the placed distractors.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import sys
import tempfile
import types

import numpy as np
from PIL import Image


def _bytescale(arr: np.ndarray) -> np.ndarray:
    """The old `scipy.misc.bytescale`: uint8 passes through, anything else is min-max scaled."""
    data = np.asarray(arr)
    if data.dtype == np.uint8:
        return data
    lo, hi = float(data.min()), float(data.max())
    scale = 255.0 / ((hi - lo) or 1.0)
    return ((data - lo) * scale).clip(0, 255).__add__(0.5).astype(np.uint8)


def _imresize(arr, size, interp="bilinear", mode=None):
    modes = {"nearest": Image.NEAREST, "lanczos": Image.LANCZOS, "bilinear": Image.BILINEAR,
             "bicubic": Image.BICUBIC, "cubic": Image.BICUBIC}
    img = Image.fromarray(_bytescale(arr))
    return np.asarray(img.resize((size[1], size[0]), resample=modes[interp]))


def install_shims(captured: list) -> None:
    """Make the original importable on current NumPy without SciPy's removed helpers."""
    if "float" not in np.__dict__:
        np.float = float
    if "round_" not in np.__dict__:
        np.round_ = np.round
    scipy = types.ModuleType("scipy")
    misc = types.ModuleType("scipy.misc")
    misc.imresize = _imresize
    misc.imsave = lambda path, arr: captured.append(_bytescale(arr))
    scipy.misc, scipy.ndimage = misc, types.ModuleType("scipy.ndimage")
    mpl = types.ModuleType("matplotlib")
    plt = types.ModuleType("matplotlib.pyplot")
    mpl.pyplot = plt
    sys.modules.update({"scipy": scipy, "scipy.misc": misc, "scipy.ndimage": scipy.ndimage,
                        "matplotlib": mpl, "matplotlib.pyplot": plt})


def wrapper_args(params: dict, out_dir: str) -> types.SimpleNamespace:
    """The original wrapper's arguments for one of our parameter sets (`PathfinderParams.to_dict`)."""
    r = params["resolution"]
    return types.SimpleNamespace(
        contour_path=out_dir, batch_id=0, n_images=1, window_size=[r, r],
        padding=params["padding"], antialias_scale=params["antialias"],
        seed_distance=params["seed_distance"], marker_radius=params["marker_radius"],
        contour_length=params["contour_length"], distractor_length=params["distractor_length"],
        num_distractor_snakes=params["num_distractors"],
        snake_contrast_list=[params["snake_contrast"]], use_single_paddles=False,
        max_distractor_contour_retrial=params["distractor_retries"],
        max_paddle_retrial=params["paddle_retries"], continuity=params["continuity"],
        paddle_length=params["paddle_length"], paddle_thickness=params["paddle_thickness"],
        paddle_margin_list=list(params["margins"]), paddle_contrast_list=[params["paddle_contrast"]],
        segmentation_task=False, segmentation_task_double_circle=False, pause_display=False,
        save_images=True, save_metadata=False)


def _turn(a: float, b: float) -> float:
    d = abs(a - b)
    return float(min(d, 2 * np.pi - d))


def run(checkout: str, params: dict, indices: range) -> dict[str, np.ndarray]:
    captured: list[np.ndarray] = []
    install_shims(captured)
    sys.path.insert(0, checkout)
    import snakes  # noqa: E402  (the original's modules, from the checkout)
    import snakes2  # noqa: E402

    state: dict = {}
    extend, make_snake = snakes.extend_snake, snakes.make_snake
    many, two, circle = snakes.make_many_snakes, snakes2.two_snakes, snakes2.draw_circle

    def extend_rec(*a, **k):
        out = extend(*a, **k)
        if out[-1]:
            state["buffer"].append(_turn(a[1], out[4]))
        return out

    def make_snake_rec(*a, **k):
        state["buffer"] = []
        out = make_snake(*a, **k)
        if out[-1]:
            state["placed"] += 1
            state["turns"] += state["buffer"]
        return out

    def many_rec(image, mask, *a, **k):  # the distractors drawn on their own layer
        state["placed"] = 0
        layer, mask = many(np.zeros_like(image), mask, *a, **k)
        state["distractors"] = layer
        return np.maximum(image, layer), mask

    def two_rec(*a, **k):
        state["buffer"] = []
        out = two(*a, **k)
        if out[-1]:
            state["targets"] = [np.array(x) for x in out[0]]
            state["tips"] = (out[2], out[3])
            state["turns"] = list(state["buffer"])
        return out

    def circle_rec(window, coordinate, radius, aa):
        state["markers"].append(tuple(int(c) for c in coordinate))
        return circle(window, coordinate, radius, aa)

    snakes.extend_snake, snakes.make_snake, snakes.make_many_snakes = extend_rec, make_snake_rec, many_rec
    snakes2.two_snakes, snakes2.draw_circle = two_rec, circle_rec

    rec: dict[str, list] = {k: [] for k in ("images", "labels", "targets", "distractors", "markers",
                                            "placed", "turns", "turn_counts")}
    with tempfile.TemporaryDirectory() as tmp:
        args = wrapper_args(params, tmp)
        for i in indices:
            np.random.seed(i)
            random.seed(i)
            state.update(markers=[], placed=0, distractors=None)
            captured.clear()
            with contextlib.redirect_stdout(io.StringIO()):
                snakes2.from_wrapper(args)
            origins, terminals = state["tips"]
            m1, m2 = state["markers"]
            a = [tuple(map(int, t)) for t in origins].index(m1)
            b = [tuple(map(int, t)) for t in terminals].index(m2)
            rec["images"].append(captured[-1])
            rec["labels"].append(int(a == b))
            rec["targets"].append(np.stack(state["targets"]).astype(np.float32))
            dist = state["distractors"]
            rec["distractors"].append((np.zeros_like(captured[-1], np.float32) if dist is None
                                       else dist.astype(np.float32)))
            rec["markers"].append([m1, m2])
            rec["placed"].append(state["placed"])
            rec["turns"] += state["turns"]
            rec["turn_counts"].append(len(state["turns"]))
    return {k: np.asarray(v) for k, v in rec.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="checkout of the original generator")
    ap.add_argument("--params", required=True, help="JSON of PathfinderParams.to_dict()")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--stop", type=int, required=True)
    ap.add_argument("--out", required=True, help=".npz to write")
    a = ap.parse_args(argv)
    rec = run(a.dir, json.loads(a.params), range(a.start, a.stop))
    np.savez_compressed(a.out, **rec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
