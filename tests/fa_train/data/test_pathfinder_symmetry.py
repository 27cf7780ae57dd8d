"""Training images under the square's 8 symmetries (`data.augment=dihedral`)."""
import collections

import numpy as np
import pytest

from fa_train.data.lra import PathfinderDataModule
from fa_train.data.lra.pathfinder.symmetry import SYMMETRIES, apply_symmetry, symmetry_of
from fa_train.errors import UserError


def test_the_eight_symmetries_are_the_square_group():
    img = np.random.default_rng(0).integers(0, 256, (5, 5), dtype=np.uint8)
    out = [apply_symmetry(img, k) for k in range(SYMMETRIES)]
    assert np.array_equal(out[0], img)
    assert len({o.tobytes() for o in out}) == SYMMETRIES          # all different
    for o in out:                                                  # each moves pixels only
        assert np.array_equal(np.sort(o, axis=None), np.sort(img, axis=None))
    wanted = {np.rot90(f, k).tobytes() for f in (img, img[:, ::-1]) for k in range(4)}
    assert {o.tobytes() for o in out} == wanted
    with pytest.raises(ValueError, match="0..7"):
        apply_symmetry(img, 8)


def test_symmetry_is_a_pure_function_spread_evenly():
    ids = range(16000)
    counts = collections.Counter(symmetry_of(0, i) for i in ids)
    assert set(counts) == set(range(SYMMETRIES))
    assert all(abs(c / len(ids) - 1 / SYMMETRIES) < 0.015 for c in counts.values())
    assert [symmetry_of(3, i) for i in ids] == [symmetry_of(3, i) for i in ids]
    assert [symmetry_of(3, i) for i in ids] != [symmetry_of(4, i) for i in ids]
    # the same image in consecutive epochs (ids n apart) does not keep its symmetry
    n = 160000
    assert len({symmetry_of(0, 7 + e * n) for e in range(12)}) >= 5


def _datamodule(tmp_path, **kw):
    dm = PathfinderDataModule(resolution=32, cache_dir=str(tmp_path), n_train=8, n_val=2, n_test=2,
                              batch_size=4, gen_seed=1, seed=5, **kw)
    dm.setup()
    return dm


def _symmetry_found(pixels, image):
    return [k for k in range(SYMMETRIES) if np.array_equal(apply_symmetry(image, k).reshape(-1), pixels)]


def test_dihedral_training_samples_are_the_images_turned_with_their_labels(tmp_path):
    plain, dm = _datamodule(tmp_path), _datamodule(tmp_path, augment="dihedral")
    for split in ("val", "test"):  # evaluation sees the images as drawn
        a, b = next(iter(plain.val_dataloader() if split == "val" else plain.test_dataloader())), \
            next(iter(dm.val_dataloader() if split == "val" else dm.test_dataloader()))
        assert a["input_ids"].equal(b["input_ids"]) and a["labels"].equal(b["labels"])
    train, src = dm.datasets["train"], dm.source
    seen = collections.defaultdict(set)
    loader = dm.train_dataloader()
    for epoch in range(6):
        loader.sampler.set_epoch(epoch)
        for batch in loader:
            for pixels, label in zip(batch["input_ids"].numpy(), batch["labels"].tolist()):
                matches = [j for j in train.index if _symmetry_found(pixels, src[int(j)])]
                assert matches, "a training sample that is no symmetry of any training image"
                j = int(matches[0])
                assert label == int(src.labels[j])
                seen[j].update(_symmetry_found(pixels, src[j]))
    assert set(seen) == {int(j) for j in train.index}                  # every image, every epoch
    assert all(len(ks) >= 2 for ks in seen.values())                   # under changing symmetries


def test_dihedral_resumes_with_the_same_samples(tmp_path):
    dm = _datamodule(tmp_path, augment="dihedral")
    straight = dm.train_dataloader()
    straight.sampler.set_epoch(1)
    batches = [b["input_ids"] for b in straight]
    stopped = dm.train_dataloader()
    stopped.sampler.set_epoch(1)
    it = iter(stopped)
    next(it)
    state = stopped.state_dict()
    resumed = _datamodule(tmp_path, augment="dihedral").train_dataloader()
    resumed.load_state_dict(state)
    assert [b["input_ids"] for b in resumed][0].equal(batches[1])


def test_unknown_augment_is_one_clear_error():
    with pytest.raises(UserError, match=r"data.augment='flip' is invalid: expected one of None, dihedral"):
        PathfinderDataModule(augment="flip")
