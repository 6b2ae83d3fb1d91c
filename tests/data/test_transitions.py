"""Transition datasets: storage round trip, corrupt files, seeded batch order; corrupt checkpoints."""

import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.data.transitions import (
    CorruptDatasetError,
    Transitions,
    materialise,
    seeded_permutation,
    shuffled_batch_indices,
)
from pbo_tf.envs import chain_walk
from pbo_tf.operators import LinearPBO
from pbo_tf.optimizers import AnnealedAdam
from pbo_tf.q import TableQ
from tests.builders import profqi_trainer as _profqi


def test_save_load_round_trip_and_tf_data(tmp_path):
    data = chain_walk.collect_dataset(3)
    path = str(tmp_path / "d.npz")
    data.save(path)
    back = Transitions.load(path)
    for name in ("state", "action", "reward", "next_state", "done"):
        np.testing.assert_array_equal(getattr(back, name), getattr(data, name))
    tensors = materialise(back.to_dataset())
    np.testing.assert_array_equal(tensors["next_state"].numpy(), data.next_state)
    assert [p.name for p in tmp_path.iterdir()] == ["d.npz"]  # no temp file left behind


def test_corrupt_or_incomplete_datasets_are_named(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file at all")
    with pytest.raises(CorruptDatasetError, match="bad.npz"):
        Transitions.load(str(bad))
    partial = tmp_path / "partial.npz"
    np.savez(partial, state=np.zeros(3), action=np.zeros(3))
    with pytest.raises(CorruptDatasetError, match=r"missing the fields \['reward', 'next_state', 'done'\]"):
        Transitions.load(str(partial))
    ragged = tmp_path / "ragged.npz"
    np.savez(
        ragged,
        state=np.zeros(3),
        action=np.zeros(3),
        reward=np.zeros(2),
        next_state=np.zeros(3),
        done=np.zeros(3),
    )
    with pytest.raises(CorruptDatasetError, match="leading dimension"):
        Transitions.load(str(ragged))
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        Transitions.load(str(tmp_path / "nope.npz"))


def test_batch_order_is_a_seeded_permutation():
    a = shuffled_batch_indices(400, 20, 7).numpy()
    assert a.shape == (20, 20)
    assert sorted(a.reshape(-1).tolist()) == list(range(400))  # every transition exactly once
    np.testing.assert_array_equal(a, shuffled_batch_indices(400, 20, tf.constant(7, tf.int64)).numpy())
    assert not np.array_equal(a, shuffled_batch_indices(400, 20, 8).numpy())
    assert shuffled_batch_indices(410, 20, 7).shape == (20, 20)  # last partial batch dropped


def test_seeded_permutation_is_a_permutation_and_the_same_under_xla():
    for size in (1, 2, 3, 17, 64, 65, 5500, 70_000):
        for seed in (0, 1, 2**40 + 3):
            p = seeded_permutation(size, seed).numpy()
            assert p.dtype == np.int32
            np.testing.assert_array_equal(np.sort(p), np.arange(size))
    xla = tf.function(lambda s: seeded_permutation(5500, s), jit_compile=True)
    np.testing.assert_array_equal(xla(tf.constant(5, tf.int64)).numpy(), seeded_permutation(5500, 5).numpy())
    with pytest.raises(ValueError, match="size"):
        seeded_permutation(0, 1)


def test_seeded_permutation_is_close_to_uniform():
    """Positions of each element over 3000 consecutive seeds: a chi-square test against the uniform
    distribution (df = 81 for a 10×10 table; the 0.999 quantile is 126), and no seed-to-seed repetition."""
    n, seeds = 10, 3000
    perms = tf.function(
        lambda: tf.map_fn(
            lambda s: seeded_permutation(n, s), tf.range(seeds, dtype=tf.int64), fn_output_signature=tf.int32
        )
    )().numpy()
    counts = np.zeros((n, n))
    for p in perms:
        counts[p, np.arange(n)] += 1
    chi2 = float(((counts - seeds / n) ** 2 / (seeds / n)).sum())
    assert chi2 < 126.0, chi2
    assert np.mean(perms[1:, 0] == perms[:-1, 0]) < 0.15  # consecutive seeds are unrelated (1/n expected)


def test_corrupt_checkpoint_is_reported(tmp_path):
    q = TableQ(20, 2)
    data = chain_walk.collect_dataset(0)

    def trainer():
        return _profqi(
            pbo=LinearPBO(40), target_pbo=LinearPBO(40), q_family=q, dataset=data.to_dataset(),
            w_set=q.initial_params(5, 0), K=2, gamma=0.9, passes_per_refresh=1, refreshes=2, batch_size=200,
            w_batch_size=5, optimizer=AnnealedAdam(lr_start=1e-3, lr_end=1e-4), seed=0,
            checkpoint_dir=str(tmp_path), log=None,
        )  # fmt: skip

    trainer().train(max_rounds=1)
    for f in tmp_path.glob("ckpt-1.data-*"):
        f.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="corrupt or does not match"):
        trainer()


def test_a_dataset_records_its_environment_and_is_never_unpickled(tmp_path):
    data = chain_walk.collect_dataset(0)
    path = str(tmp_path / "d.npz")
    data.save(path, env="chain_walk")
    assert len(Transitions.load(path, env="chain_walk")) == len(data)
    with pytest.raises(CorruptDatasetError, match="collected on chain_walk, not lqr"):
        Transitions.load(path, env="lqr")
    with open(path, "wb") as f:  # an object array would need unpickling: refused
        np.savez(f, **{**data.as_dict(), "state": np.array([{"s": 1}] * len(data), dtype=object)})
    with pytest.raises(CorruptDatasetError, match="never does"):
        Transitions.load(path)
