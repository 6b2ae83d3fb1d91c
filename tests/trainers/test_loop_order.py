"""ProFQI runs Algorithm 1's loops in the paper's order: ``refreshes`` target refreshes (the paper's
"#epochs" E), each followed by ``passes_per_refresh`` full passes over D (its "#training steps").

A tiny chain-walk problem, counted by hand: |D| = 40 in batches of 20 (2 batches per pass), |W| = 4 in
batches of 2 (2 W batches), 2 passes per refresh → 2 × 2 × 2 = 8 Adam steps between two refreshes, and
3 refreshes → 24 steps in all.
"""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.configs import ProFQIConfig
from pbo_tf.data.transitions import Transitions
from pbo_tf.envs import chain_walk
from pbo_tf.operators import LinearPBO
from pbo_tf.optimizers import AnnealedAdam
from pbo_tf.q import TableQ
from pbo_tf.trainers.profqi import ProFQITrainer

REFRESHES, PASSES, N, BATCH, N_W, W_BATCH = 3, 2, 40, 20, 4, 2
STEPS_PER_REFRESH = PASSES * (N_W // W_BATCH) * (N // BATCH)


class RecordingTrainer(ProFQITrainer):
    """Records, at every gradient step, the target weights it saw, the online weights before its update,
    and the rows of W and D it used."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seen: list[tuple] = []

    def _gradient_step(self, w_batch, batch, chain_batch, targets_batch):
        def record(target_w, online_w, w, states, actions):
            self.seen.append((target_w.numpy(), online_w.numpy(), w.numpy(), states.numpy(), actions.numpy()))
            return 0

        tf.py_function(
            record,
            [self.target_pbo.weights[0], self.pbo.weights[0], w_batch, batch["state"], batch["action"]],
            tf.int32,
        )
        return super()._gradient_step(w_batch, batch, chain_batch, targets_batch)


def _trainer(**overrides):
    q = TableQ(20, 2)
    full = chain_walk.collect_dataset(0)
    data = Transitions.from_arrays(
        full.state[:N], full.action[:N], full.reward[:N], full.next_state[:N], full.done[:N]
    )
    tf.keras.utils.set_random_seed(0)
    kwargs = dict(
        refreshes=REFRESHES, passes_per_refresh=PASSES, batch_size=BATCH, w_batch_size=W_BATCH,
        optimizer=AnnealedAdam(lr_start=1e-2, lr_end=1e-4), seed=5, log=None, cache_targets=False,
    )  # fmt: skip
    kwargs.update(overrides)
    params = q.initial_params(N_W, 0)
    kwargs.update(
        pbo=LinearPBO(40, init_std=1e-2), target_pbo=LinearPBO(40), q_family=q, dataset=data.to_dataset(),
        w_set=params, K=2, gamma=0.9,
    )  # fmt: skip
    fields = {f.name for f in dataclasses.fields(ProFQIConfig)}  # the schedule's knobs are the config's
    config = ProFQIConfig(w_size=N_W, **{k: kwargs.pop(k) for k in list(kwargs) if k in fields})
    return RecordingTrainer(config=config, **kwargs), data, params


def test_profqi_refreshes_the_target_every_passes_per_refresh_passes():
    trainer, data, params = _trainer()
    trainer.train()
    seen = trainer.seen
    assert trainer.steps_per_refresh == STEPS_PER_REFRESH == 8
    assert len(seen) == trainer.total_steps == REFRESHES * STEPS_PER_REFRESH == 24
    assert int(trainer.optimizer.iterations.numpy()) == 24
    assert trainer.rounds_done == REFRESHES

    targets = np.stack([s[0] for s in seen])
    onlines = np.stack([s[1] for s in seen])
    # The target changes exactly at the first step of each refresh, and only there.
    changed = [i for i in range(1, len(seen)) if not np.array_equal(targets[i], targets[i - 1])]
    assert changed == [STEPS_PER_REFRESH * r for r in range(1, REFRESHES)]
    for r in range(REFRESHES):
        first = r * STEPS_PER_REFRESH
        # Every step of refresh r sees φ as it was when refresh r began: φ̄ ← φ, then the steps.
        for i in range(first, first + STEPS_PER_REFRESH):
            np.testing.assert_array_equal(targets[i], onlines[first])
        # ... and φ moves within the refresh, so the target really is frozen, not tracking φ.
        assert not np.array_equal(onlines[first + STEPS_PER_REFRESH - 1], onlines[first])

    # Within each pass, the W batches partition W and, for each, the D batches partition D.
    for p in range(REFRESHES * PASSES):
        steps = seen[p * 4 : (p + 1) * 4]  # 2 W batches × 2 D batches, W batch outermost
        for wb in range(2):
            np.testing.assert_array_equal(steps[2 * wb][2], steps[2 * wb + 1][2])  # same W batch
            pairs = np.concatenate(
                [np.c_[s[3].reshape(len(s[4]), -1)[:, 0], s[4]] for s in steps[2 * wb : 2 * wb + 2]]
            )
            want = np.c_[data.state.reshape(N, -1)[:, 0], data.action]
            assert sorted(map(tuple, pairs)) == sorted(map(tuple, want))
        w_rows = np.concatenate([steps[0][2], steps[2][2]])
        assert sorted(map(tuple, w_rows)) == sorted(map(tuple, params))


@pytest.mark.parametrize("counts_w_batches, schedule_steps", [(False, 12), (True, 24)])
def test_learning_rate_schedule_length(counts_w_batches, schedule_steps):
    """The reference counts refreshes × passes × batches of D (3 × 2 × 2 = 12 Adam steps), ignoring the
    2 batches of W: the rate reaches ``lr_end`` half way and stays; the option counts every Adam step."""
    trainer, _, _ = _trainer(lr_schedule_counts_w_batches=counts_w_batches)
    assert trainer.lr_schedule_steps == schedule_steps
    schedule = trainer.lr_schedule
    assert float(schedule(0)) == pytest.approx(1e-2)
    assert float(schedule(schedule_steps // 2)) == pytest.approx((1e-2 + 1e-4) / 2)
    assert float(schedule(schedule_steps)) == pytest.approx(1e-4)
    assert float(schedule(24)) == pytest.approx(1e-4)
    # The optimizer follows it: after one refresh (Adam steps 0..7) its last rate is the schedule's at 7.
    trainer.train(max_rounds=1)
    want = 1e-2 + (1e-4 - 1e-2) * 7 / schedule_steps
    assert float(trainer.optimizer.learning_rate.numpy()) == pytest.approx(want, rel=1e-5)


def test_checkpoints_follow_the_time_interval_and_the_end(tmp_path):
    """With a long interval only the end of `train` checkpoints; with 0 s every refresh does."""
    trainer, _, _ = _trainer(checkpoint_dir=str(tmp_path / "long"), checkpoint_every_s=1e6)
    trainer.train()
    assert (
        tf.train.get_checkpoint_state(str(tmp_path / "long"))
        .all_model_checkpoint_paths[-1]
        .endswith(f"-{REFRESHES}")
    )
    assert len(tf.train.get_checkpoint_state(str(tmp_path / "long")).all_model_checkpoint_paths) == 1
    trainer, _, _ = _trainer(checkpoint_dir=str(tmp_path / "every"), checkpoint_every_s=0.0)
    trainer.train(max_rounds=2)
    state = tf.train.get_checkpoint_state(str(tmp_path / "every"))
    assert [p.rsplit("-", 1)[1] for p in state.all_model_checkpoint_paths] == ["1", "2"]
