"""Pathfinder / Path-X / Path-256 (Linsley et al. 2018, as used by LRA): a seeded generator that
draws what the original generator draws, its on-disk formats and a loader.

- `params`: one parameter set per resolution (`pathfinder_params`);
- `snakes`: growing target and distractor snakes on an occupancy mask (the geometry);
- `grow`: the growth loop of one image, compiled with numba;
- `render`: paddles and markers drawn at 2x and Lanczos-downsampled, byte rescaling;
- `generator`: one image from (params, seed, index);
- `formats`: `.npy` shards or the released `imgs/`/`metadata/` layout, `generator.json`;
- `dataset`: reading either layout, deterministic splits;
- `cli`: `fa-data pathfinder`.
"""
from fa_train.data.lra.pathfinder.cli import register_cli, write_montage
from fa_train.data.lra.pathfinder.dataset import (PathfinderImages, find_level, load_pathfinder,
                                                  split_indices)
from fa_train.data.lra.pathfinder.formats import generate_pathfinder, level_dir
from fa_train.data.lra.pathfinder.generator import (GENERATOR_VERSION, draw_sample,
                                                    generate_image, generate_images)
from fa_train.data.lra.pathfinder.params import (DIFFICULTIES, PRESETS, RESOLUTIONS, PathfinderParams,
                                                 pathfinder_params)

__all__ = ["DIFFICULTIES", "GENERATOR_VERSION", "PRESETS", "RESOLUTIONS", "PathfinderImages", "PathfinderParams",
           "draw_sample", "find_level", "generate_image", "generate_images",
           "generate_pathfinder", "level_dir", "load_pathfinder", "pathfinder_params", "register_cli",
           "split_indices", "write_montage"]
