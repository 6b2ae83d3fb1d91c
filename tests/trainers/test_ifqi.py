"""i-FQI: the iterated loss by hand, its heads against value iteration on the dataset's empirical MDP and
against FQI, the reference's loop order, exact resume, and its one-line errors."""

import numpy as np
import pytest
import tensorflow as tf

from pbo_tf.data.transitions import Transitions
from pbo_tf.envs.chain_walk.mdp import collect_dataset
from pbo_tf.losses import iterated_bellman_loss
from pbo_tf.optimizers import AnnealedAdam, linear_schedule, make_adam
from pbo_tf.q import TableQ
from pbo_tf.q.multi_head import MultiHeadQ
from tests.builders import fqi_trainer, ifqi_trainer

GAMMA = 0.9


def _empirical_value_iteration(data: Transitions, q0: np.ndarray, K: int, n: int = 20) -> list[np.ndarray]:
    """``Q_k = R̂ + γ P̂ max_a Q_{k−1}``, k = 1..K, on the counts of ``data`` (every (s, a) is in it)."""
    s, a, r, s2 = (np.asarray(x) for x in (data.state, data.action, data.reward, data.next_state))
    counts, p, reward = np.zeros((n, 2)), np.zeros((n, 2, n)), np.zeros((n, 2))
    np.add.at(counts, (s, a), 1)
    np.add.at(p, (s, a, s2), 1)
    np.add.at(reward, (s, a), r)
    p, reward = p / counts[..., None], reward / counts
    qs, q = [], q0.reshape(n, 2)
    for _ in range(K):
        q = reward + GAMMA * p @ q.max(axis=1)
        qs.append(q)
    return qs


def _trainer(data, K=3, **kwargs):
    q = TableQ(20, 2)
    args = dict(
        q_family=q, dataset=data.to_dataset(), initial_params=MultiHeadQ(q, K + 1).initial_params(1, 0)[0],
        K=K, gamma=GAMMA, refreshes=40, passes_per_refresh=20, batch_size=20,
        optimizer=AnnealedAdam(lr_start=0.1, lr_end=1e-4), seed=0, log=None, jit_compile="round",
    )  # fmt: skip
    args.update(kwargs)
    return ifqi_trainer(**args)


def test_the_loss_by_hand_on_a_two_state_table():
    multi = MultiHeadQ(TableQ(2, 2), 3)  # heads 0, 1, 2 of Q(s, a) = table[2 s + a]
    heads = np.array([[0.0, 1.0, 2.0, 0.0], [1.0, 0.0, 0.0, 3.0], [0.5, 0.5, 1.0, 1.0]], np.float32)
    frozen = np.array([[1.0, 0.0, 0.0, 4.0], [2.0, 2.0, -1.0, 0.0], [9.0, 9.0, 9.0, 9.0]], np.float32)
    batch = {
        "state": np.array([0, 1]),
        "action": np.array([1, 1]),
        "reward": np.array([1.0, -1.0], np.float32),
        "next_state": np.array([1, 0]),
        "done": np.array([0.0, 1.0], np.float32),
    }
    loss = iterated_bellman_loss(
        multi, heads.reshape(1, -1), batch, 0.5, target_params=frozen.reshape(1, -1)
    ).numpy()
    # frozen head 0 at s' = 1: max(0, 4) = 4 -> target 1 + 0.5·4 = 3; the second transition is terminal: -1.
    # frozen head 1 at s' = 1: max(-1, 0) = 0 -> target 1; terminal: -1. (frozen head 2 has no term.)
    # head 1 predicts Q(0, 1) = 0, Q(1, 1) = 3; head 2 predicts 0.5, 1.
    hand = np.mean([(3 - 0) ** 2, (-1 - 3) ** 2, (1 - 0.5) ** 2, (-1 - 1) ** 2])
    assert loss == pytest.approx(hand, rel=1e-6)
    # the gradient never reaches head 0
    params = tf.Variable(heads.reshape(1, -1))
    with tf.GradientTape() as tape:
        value = iterated_bellman_loss(multi, params, batch, 0.5, target_params=frozen.reshape(1, -1))
    grad = tape.gradient(value, params).numpy().reshape(3, 4)
    np.testing.assert_array_equal(grad[0], 0.0)
    assert np.abs(grad[1:]).sum() > 0


def test_heads_reach_value_iteration_on_the_empirical_mdp_and_fqi():
    data = collect_dataset(0)
    trainer = _trainer(data)
    start = trainer.iterates()
    trainer.train()
    heads = trainer.iterates()
    np.testing.assert_array_equal(heads[0], start[0])  # head 0 gets no term: Q_0 = 0 stays
    exact = _empirical_value_iteration(data, heads[0], 3)
    for k in range(1, 4):
        np.testing.assert_allclose(heads[k].reshape(20, 2), exact[k - 1], atol=1e-2)
    assert np.abs(exact[2]).max() > 2.0  # the test checks values of the size of Q_3, not zeros
    fqi = fqi_trainer(
        q_family=TableQ(20, 2), dataset=data.to_dataset(), initial_params=heads[0], K=3, gamma=GAMMA,
        max_epochs=400, patience=400, batch_size=20, optimizer=AnnealedAdam(1e-2, 1e-5), seed=0, log=None,
    )  # fmt: skip
    fqi.train()
    np.testing.assert_allclose(heads, fqi.iterates.numpy(), atol=1e-2)


def test_the_loop_order_is_the_references_and_resume_is_exact(tmp_path):
    data = collect_dataset(1)
    args = dict(refreshes=4, passes_per_refresh=3, batch_size=100, jit_compile=False)
    whole = _trainer(data, **args)
    losses = whole.train()
    assert len(losses) == 4 * 3  # one mean loss per pass, 3 passes per refresh
    assert whole.optimizer.iterations.numpy() == 4 * 3 * 4  # one Adam step per batch, 4 batches per pass
    # annealed linearly over the run's 48 Adam steps: the last step (index 47) ran at 0.1 + (1e-4 - 0.1)·47/48
    assert whole.learning_rate() == pytest.approx(0.1 + (1e-4 - 0.1) * 47 / 48, rel=1e-5)
    first = _trainer(data, checkpoint_dir=str(tmp_path), **args)
    first.train(max_rounds=2)
    resumed = _trainer(data, checkpoint_dir=str(tmp_path), **args)
    assert resumed.rounds_done == 2
    resumed.train()
    np.testing.assert_array_equal(resumed.iterates(), whole.iterates())


def test_bad_counts_and_head_counts_are_one_line_errors():
    data = collect_dataset(0)
    with pytest.raises(ValueError, match="K"):
        _trainer(data, K=0, initial_params=np.zeros(40))
    with pytest.raises(ValueError, match=r"initial_params must hold K \+ 1 = 4 heads of 40 parameters"):
        _trainer(data, initial_params=np.zeros(3 * 40))
    for field in ("refreshes", "passes_per_refresh"):
        with pytest.raises(ValueError, match=rf"^IFQIConfig\.{field} must be an integer >= 1, got 0$"):
            _trainer(data, **{field: 0})


def test_a_keras_optimizer_is_stepped_as_given_and_any_other_kind_is_a_one_line_type_error():
    """The Adam an `AnnealedAdam` makes for the run (48 Adam steps), given as a tf_keras optimizer, trains
    the heads bit for bit as the `AnnealedAdam` does."""
    data = collect_dataset(1)
    args = dict(refreshes=4, passes_per_refresh=3, batch_size=100, jit_compile=False)
    annealed = _trainer(data, **args)
    keras = _trainer(data, optimizer=make_adam(linear_schedule(0.1, 1e-4, 4 * 3 * 4)), **args)
    before = annealed.iterates()
    np.testing.assert_array_equal(keras.train(), annealed.train())
    assert np.abs(annealed.iterates() - before).max() > 1e-2  # training moved the heads
    np.testing.assert_array_equal(keras.iterates(), annealed.iterates())
    for wrong, name in ((AnnealedAdam()(10), "tuple"), ("adam", "str")):
        with pytest.raises(
            TypeError, match=f"^optimizer must be an AnnealedAdam or a tf_keras optimizer, got {name}$"
        ):
            _trainer(data, optimizer=wrong)
