"""ProDQN on TF-Agents: the loss against a hand computation, Algorithm 1's order of a training step (W
batches, target refreshes), the networks against the Q families, learning in a driver loop, XLA,
PolicySaver and checkpoint round trips."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from agent_test_data import pairs
from tf_agents.environments import tf_py_environment
from tf_agents.policies import policy_saver
from tf_agents.replay_buffers.tf_uniform_replay_buffer import TFUniformReplayBuffer
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.utils import common

import pbo_tf.agents.replay as replay_module
import pbo_tf.learner as learner_module
import pbo_tf.losses as losses_module
from pbo_tf.agents import FlatQNetwork, PBOQNetwork, linear_epsilon
from pbo_tf.envs import chain_walk
from pbo_tf.envs.tf_agents_adapter import to_tf_agents
from pbo_tf.loss_terms import BellmanTerm, FixedPointTerm
from pbo_tf.operators import DeepPBO, LinearPBO, TabularPBO
from pbo_tf.optimizers import AnnealedAdam, make_adam, optimizer_variables
from pbo_tf.q import FlatMLPQ, TableQ
from tests.builders import prodqn_agent as _prodqn

FIRST, MID, LAST = (int(t) for t in (ts.StepType.FIRST, ts.StepType.MID, ts.StepType.LAST))
GAMMA = 0.9


def _table_specs(n_states, n_actions):
    obs = tensor_spec.BoundedTensorSpec((), tf.int32, 0, n_states - 1, name="observation")
    act = tensor_spec.BoundedTensorSpec((), tf.int32, 0, n_actions - 1, name="action")
    return ts.time_step_spec(obs), act


# (step_type, next_step_type, s, a, r, next discount, s'): an ordinary step, a termination, a truncation
# (bootstraps), and an episode boundary (LAST -> FIRST: not a transition, must be ignored).
ROWS = [
    (FIRST, MID, 0, 1, 1.0, 1.0, 1),
    (MID, LAST, 1, 0, 0.5, 0.0, 2),
    (MID, LAST, 2, 1, -0.3, 1.0, 0),
    (LAST, FIRST, 2, 1, 7.0, 1.0, 0),
]


def _set_linear(pbo, W, b):
    pbo.ensure_built()
    pbo.dense.kernel.assign(np.asarray(W, np.float32).T)
    pbo.dense.bias.assign(np.asarray(b, np.float32))


def _linear_agent(rng, **kwargs):
    q = TableQ(3, 2)
    tss, act = _table_specs(3, 2)
    pbo = LinearPBO(q.d)
    W_on, b_on = 0.4 * rng.normal(size=(q.d, q.d)), rng.normal(size=q.d)
    _set_linear(pbo, W_on, b_on)
    params = rng.normal(size=(2, q.d)).astype(np.float32)
    kwargs.setdefault("optimizer", tf_keras.optimizers.SGD(0.0))
    agent = _prodqn(
        tss,
        act,
        q,
        pbo,
        params,
        K=2,
        gamma=GAMMA,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
        **kwargs,
    )
    return agent, (W_on, b_on), params


def _per_k(info, K=2) -> np.ndarray:
    """Eq. (3)'s per-k residuals of a `LossInfo` (its metrics ``bellman/k1 .. kK``)."""
    return np.array([float(info.extra.metrics[f"bellman/k{k + 1}"]) for k in range(K)])


def _fixed_point(**options) -> tuple:
    """The loss terms of Eq. (3) and Eq. (4)'s term with ``options``."""
    return (BellmanTerm(), FixedPointTerm(**options))


def _expected_loss(params, online, target, rows, K, gamma):
    """Eq. 3 by hand: for each k, the mean over ω and the valid transitions of the squared residual."""
    valid = [r for r in rows if r[0] != LAST]
    per_k = np.zeros(K)
    for w in params:
        target_chain = [w]
        for _ in range(K - 1):
            target_chain.append(target[0] @ target_chain[-1] + target[1])
        predicted, current = [], w
        for _ in range(K):
            current = online[0] @ current + online[1]
            predicted.append(current)
        for k in range(K):
            t_table = target_chain[k].reshape(3, 2)
            p_table = predicted[k].reshape(3, 2)
            for _, _, s, a, r, disc, s2 in valid:
                y = r + gamma * disc * t_table[s2].max()
                per_k[k] += (y - p_table[s, a]) ** 2
    per_k /= len(params) * len(valid)
    return per_k


def test_loss_matches_hand_computation_with_target_pbo_and_boundaries():
    rng = np.random.default_rng(0)
    agent, online, params = _linear_agent(rng)
    # A target operator different from the online one: the target side must use φ̄, the prediction φ.
    W_tg, b_tg = 0.3 * rng.normal(size=(6, 6)), rng.normal(size=6)
    _set_linear(agent.target_pbo, W_tg, b_tg)
    experience = pairs(ROWS)
    info = agent.loss(experience)
    per_k = _expected_loss(params, online, (W_tg, b_tg), ROWS, K=2, gamma=GAMMA)
    np.testing.assert_allclose(_per_k(info), per_k, rtol=1e-5)
    np.testing.assert_allclose(info.loss.numpy(), per_k.mean(), rtol=1e-5)
    np.testing.assert_allclose(float(info.extra.metrics["bellman"]), per_k.mean(), rtol=1e-5)
    assert int(info.extra.valid_transitions) == 3
    assert "fixed_point" not in info.extra.metrics
    np.testing.assert_allclose(float(info.extra.epsilon), 1.0)  # linear ε at train step 0

    # The reference normalisation divides the sum over k by K + 1.
    ref, _, _ = _linear_agent(np.random.default_rng(0), loss_terms=(BellmanTerm(normalisation="reference"),))
    _set_linear(ref.target_pbo, W_tg, b_tg)
    np.testing.assert_allclose(ref.loss(experience).loss.numpy(), per_k.sum() / 3, rtol=1e-5)

    # Eq. 4's fixed-point term, with ω* = (I − W)⁻¹ b of the online operator, added undivided.
    fp, _, _ = _linear_agent(np.random.default_rng(0), loss_terms=_fixed_point())
    _set_linear(fp.target_pbo, W_tg, b_tg)
    star = np.linalg.solve(np.eye(6) - online[0], online[1]).reshape(3, 2)
    valid = [r for r in ROWS if r[0] != LAST]
    fp_term = np.mean([(r + GAMMA * d * star[s2].max() - star[s, a]) ** 2 for _, _, s, a, r, d, s2 in valid])
    fp_info = fp.loss(experience)
    np.testing.assert_allclose(float(fp_info.extra.metrics["fixed_point"]), fp_term, rtol=1e-4)
    np.testing.assert_allclose(fp_info.loss.numpy(), per_k.mean() + fp_term, rtol=1e-4)


def test_the_fixed_point_term_at_the_target_iterates_by_hand():
    """``FixedPointTerm.iterations = N``: the term is taken at ``ω̄ = Λ̄^N(ω_0)`` (ω_0 = W[0]), one Bellman
    iteration asked of the online operator there, ``mean (r + γ d max Q_ω̄(s') − Q_{Λ(ω̄)}(s, a))²``; the
    estimate follows the target at each refresh."""
    rng = np.random.default_rng(1)
    agent, online, params = _linear_agent(
        rng, loss_terms=_fixed_point(iterations=3), train_steps_per_refresh=1,
        optimizer=tf_keras.optimizers.SGD(0.05),
    )  # fmt: skip
    W, b = online  # the target is a copy of the online operator at construction
    estimate = params[0]
    for _ in range(3):
        estimate = W @ estimate + b
    table, applied = estimate.reshape(3, 2), (W @ estimate + b).reshape(3, 2)
    valid = [r for r in ROWS if r[0] != LAST]
    term = np.mean([(r + GAMMA * d * table[s2].max() - applied[s, a]) ** 2 for _, _, s, a, r, d, s2 in valid])
    info = agent.loss(pairs(ROWS))
    np.testing.assert_allclose(float(info.extra.metrics["fixed_point"]), term, rtol=1e-4)
    per_k = _expected_loss(params, online, online, ROWS, K=2, gamma=GAMMA)
    np.testing.assert_allclose(info.loss.numpy(), per_k.mean() + term, rtol=1e-4)
    agent.train(pairs(ROWS))  # one step, then the refresh: φ̄ ← φ and ω̄ ← Λ̄³(ω_0)
    moved = agent.target_pbo.iterate(tf.constant(params[:1]), 3)[-1].numpy()
    assert np.abs(moved[0] - estimate).max() > 1e-4
    np.testing.assert_allclose(agent.learner.fixed_point_estimate.value.numpy(), moved, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="FixedPointTerm.iterations must be an integer >= 0, got -2"):
        _linear_agent(np.random.default_rng(1), loss_terms=_fixed_point(iterations=-2))


def test_fixed_point_radius_takes_the_term_at_the_last_target_iterate_inside_the_ball():
    """``FixedPointTerm.radius = r``: ω̄ is the last iterate of ``Λ̄^k(ω_0)`` (k ≤ N) before the first one
    longer than ``r · max ‖ω‖`` over W, found here by hand with numpy; a bad radius is a one-line error."""
    rng = np.random.default_rng(3)
    agent, (W, b), params = _linear_agent(rng, loss_terms=_fixed_point(iterations=6))
    chain = [params[0]]
    for _ in range(6):
        chain.append(W @ chain[-1] + b)
    norms = np.linalg.norm(chain, axis=1)
    largest = np.linalg.norm(params, axis=1).max()
    bound = 0.5 * (norms[2] + norms[3]) if norms[3] > norms[2] else norms.max() + 1.0
    radius = float(bound / largest)
    bounded, _, _ = _linear_agent(
        np.random.default_rng(3), loss_terms=_fixed_point(iterations=6, radius=radius)
    )
    estimate = bounded.learner.fixed_point_estimate
    np.testing.assert_allclose(estimate.max_norm, bound, rtol=1e-6)
    inside = norms <= estimate.max_norm
    n = 6 if inside.all() else max(int(np.argmin(inside)) - 1, 0)
    assert int(estimate.iterations_used.numpy()) == n
    np.testing.assert_allclose(estimate.read().numpy()[0], chain[n], rtol=1e-5, atol=1e-6)
    assert n < 6  # this seed's chain grows past the ball (the case the bound is for)
    with pytest.raises(ValueError, match="FixedPointTerm.radius must be a positive number or None, got 0"):
        _linear_agent(np.random.default_rng(3), loss_terms=_fixed_point(iterations=6, radius=0))


def test_a_training_step_with_sgd_moves_phi_by_minus_eta_times_the_gradient_of_the_loss():
    """ProDQN's update is the optimizer's step on ∇φ L: with SGD(η), φ ← φ − η ∇φ L, where ∇φ L is the
    central finite difference of the hand-computed loss (Eq. 3, `_expected_loss`) in the online operator's
    (W, b), the target φ̄ held fixed (semi-gradient). A scaled or partial gradient fails here even where Adam,
    invariant to the gradient's scale, would hide it."""
    eta = 0.01
    agent, _, params = _linear_agent(np.random.default_rng(5), optimizer=tf_keras.optimizers.SGD(eta))
    W0 = agent.pbo.dense.kernel.numpy().T.astype(np.float64)  # the float32 weights the agent starts from
    b0 = agent.pbo.dense.bias.numpy().astype(np.float64)
    params = params.astype(np.float64)

    def loss(W, b):
        return _expected_loss(params, (W, b), (W0, b0), ROWS, K=2, gamma=GAMMA).mean()

    h = 1e-5
    grad_W, grad_b = np.zeros_like(W0), np.zeros_like(b0)
    for index in np.ndindex(W0.shape):
        step = np.zeros_like(W0)
        step[index] = h
        grad_W[index] = (loss(W0 + step, b0) - loss(W0 - step, b0)) / (2 * h)
    for i in range(len(b0)):
        step = np.zeros_like(b0)
        step[i] = h
        grad_b[i] = (loss(W0, b0 + step) - loss(W0, b0 - step)) / (2 * h)
    assert np.abs(grad_W).max() > 0.1 and np.abs(grad_b).max() > 0.1  # a step that moves φ

    info = agent.train(pairs(ROWS))
    assert float(info.loss) == pytest.approx(loss(W0, b0), rel=1e-5)
    W1, b1 = agent.pbo.dense.kernel.numpy().T, agent.pbo.dense.bias.numpy()
    scale = max(np.abs(grad_W).max(), np.abs(grad_b).max())
    np.testing.assert_allclose((W0 - W1) / eta, grad_W, rtol=1e-3, atol=1e-3 * scale)
    np.testing.assert_allclose((b0 - b1) / eta, grad_b, rtol=1e-3, atol=1e-3 * scale)


def _finite_difference_gradient(loss, W, b, h=1e-5):
    """Central finite differences of ``loss(W, b)`` in every entry of W and b (float64)."""
    grad_W, grad_b = np.zeros_like(W), np.zeros_like(b)
    for index in np.ndindex(W.shape):
        step = np.zeros_like(W)
        step[index] = h
        grad_W[index] = (loss(W + step, b) - loss(W - step, b)) / (2 * h)
    for i in range(len(b)):
        step = np.zeros_like(b)
        step[i] = h
        grad_b[i] = (loss(W, b + step) - loss(W, b - step)) / (2 * h)
    return grad_W, grad_b


def test_an_annealed_adam_takes_adam_steps_at_the_learning_rates_of_its_schedule():
    """``optimizer=AnnealedAdam(0.05, 0.01)`` with ``lr_schedule_steps=2``: the agent's Adam anneals its
    rate over 2 Adam steps, so its two training steps are Adam written out by hand (ε = 1e-8 after the bias
    correction) at rates 0.05 and 0.03, on the finite-difference gradients of the hand-computed loss
    (`_expected_loss`); the target is φ at the start of each step (refreshed after every step)."""
    lr_start, lr_end, b1, b2, eps = 0.05, 0.01, 0.9, 0.999, 1e-8
    agent, _, params = _linear_agent(
        np.random.default_rng(5), optimizer=AnnealedAdam(lr_start, lr_end), lr_schedule_steps=2
    )
    assert agent.lr_schedule is not None and float(agent.lr_schedule(1)) == pytest.approx(0.03)
    params = params.astype(np.float64)
    m = v = None
    for t, lr in ((1, lr_start), (2, 0.5 * (lr_start + lr_end))):
        W0 = agent.pbo.dense.kernel.numpy().T.astype(np.float64)
        b0 = agent.pbo.dense.bias.numpy().astype(np.float64)
        np.testing.assert_array_equal(agent.target_pbo.dense.kernel.numpy(), agent.pbo.dense.kernel.numpy())
        grads = _finite_difference_gradient(
            lambda W, b, W0=W0, b0=b0: _expected_loss(params, (W, b), (W0, b0), ROWS, 2, GAMMA).mean(), W0, b0
        )
        g = np.concatenate([x.ravel() for x in grads])
        m = (1 - b1) * g if m is None else b1 * m + (1 - b1) * g
        v = (1 - b2) * g**2 if v is None else b2 * v + (1 - b2) * g**2
        step = lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        agent.train(pairs(ROWS))
        W1 = agent.pbo.dense.kernel.numpy().T.astype(np.float64)
        b1_ = agent.pbo.dense.bias.numpy().astype(np.float64)
        moved = np.concatenate([(W0 - W1).ravel(), b0 - b1_])
        np.testing.assert_allclose(moved, step, rtol=1e-3, atol=1e-3 * lr)
        assert int(agent.optimizer.iterations.numpy()) == t
    assert np.abs(moved).max() > 0.02  # the second step moved φ by about its rate, 0.03, not 0.05


def test_the_agent_refuses_an_optimizer_of_another_kind_in_one_line():
    """A wrong kind is a `TypeError` whose message (gin adds the configurable's name on a second line)
    names what was expected and what was given."""
    tss, act = _table_specs(3, 2)
    q, W = TableQ(3, 2), np.zeros((4, 6), np.float32)
    for wrong, name in ((AnnealedAdam()(10), "tuple"), ("adam", "str")):
        with pytest.raises(TypeError) as error:
            _prodqn(tss, act, q, LinearPBO(6), W, 2, GAMMA, wrong)
        assert str(error.value).splitlines()[0] == (
            f"optimizer must be an AnnealedAdam or a tf_keras optimizer, got {name}"
        )
    # an AnnealedAdam anneals over the config's training steps (ProDQNConfig.lr_schedule_steps)
    annealed = _prodqn(
        tss, act, q, LinearPBO(6), W, 2, GAMMA, AnnealedAdam(), refreshes=3, train_steps_per_refresh=2
    )
    assert annealed.config.lr_schedule_steps == 6 and annealed.lr_schedule.decay_steps == 6
    agent = _prodqn(tss, act, q, LinearPBO(6), W, 2, GAMMA, tf_keras.optimizers.SGD(0.1))
    assert isinstance(agent.optimizer, tf_keras.optimizers.SGD) and agent.lr_schedule is None


def test_hard_target_refresh_every_period_and_the_order_of_w_is_seeded():
    rng = np.random.default_rng(1)
    agent, _, _ = _linear_agent(rng, optimizer=tf_keras.optimizers.Adam(0.05), train_steps_per_refresh=3)
    experience = pairs(ROWS)
    train = common.function(agent.train)

    def weights(pbo):
        return [w.numpy().copy() for w in pbo.weights]

    initial = weights(agent.pbo)
    for a, b in zip(weights(agent.target_pbo), initial, strict=True):
        np.testing.assert_array_equal(a, b)  # φ̄ = φ at construction
    last_sync = initial
    for step in range(1, 8):
        train(experience)
        online = weights(agent.pbo)
        assert not np.allclose(online[0], last_sync[0]), "the PBO did not change"
        if step % 3 == 0:
            last_sync = online
        for a, b in zip(weights(agent.target_pbo), last_sync, strict=True):
            np.testing.assert_array_equal(a, b)
    assert int(agent.train_step_counter.numpy()) == 7
    assert int(agent.optimizer.iterations.numpy()) == 7  # all of W in one batch: one Adam step per call

    # The order of W: a stateless shuffle of (seed, training step); same seed, same order. Batches of 4 of
    # the 10 rows: 4, 4 and the last 2 (as the reference's loader), one Adam step each.
    big = rng.normal(size=(10, 6)).astype(np.float32)
    tss, act = _table_specs(3, 2)

    def make(seed):
        opt = tf_keras.optimizers.SGD(0.0)
        counter = tf.Variable(0, dtype=tf.int64)
        return _prodqn(
            tss,
            act,
            TableQ(3, 2),
            LinearPBO(6),
            big,
            2,
            GAMMA,
            opt,
            w_batch_size=4,
            seed=seed,
            train_step_counter=counter,
        )

    a1, a2, a3 = make(5), make(5), make(6)
    assert a1.adam_steps_per_train_step == 3
    draws = [a1.w_order(t).numpy() for t in range(5)]
    for t, draw in enumerate(draws):
        assert sorted(draw.tolist()) == list(range(10))
        np.testing.assert_array_equal(draw, a2.w_order(t).numpy())
        batches = [b.numpy().tolist() for b in a1.w_batches(t)]
        assert batches == [draw[:4].tolist(), draw[4:8].tolist(), draw[8:].tolist()]
    assert len({tuple(d) for d in draws}) > 1
    assert any(not np.array_equal(d, a3.w_order(t).numpy()) for t, d in enumerate(draws))
    np.testing.assert_array_equal(a1.loss(experience).extra.w_indices.numpy(), draws[0])


def _rows_with_reward_offset(offset):
    return [(st, nst, s, a, r + offset, d, s2) for st, nst, s, a, r, d, s2 in ROWS]


def _algorithm_1_agent(cache_target_chain):
    """|W| = 4 in W batches of 2 (2 Adam steps per training step), a refresh every 2 training steps."""
    rng = np.random.default_rng(11)
    q = TableQ(3, 2)
    tss, act = _table_specs(3, 2)
    pbo = LinearPBO(q.d)
    _set_linear(pbo, 0.3 * rng.normal(size=(q.d, q.d)), rng.normal(size=q.d))
    return _prodqn(
        tss, act, q, pbo, rng.normal(size=(4, q.d)).astype(np.float32), K=2, gamma=GAMMA,
        optimizer=make_adam(0.05), w_batch_size=2, seed=3, train_steps_per_refresh=2,
        cache_target_chain=cache_target_chain, train_step_counter=tf.Variable(0, dtype=tf.int64),
    )  # fmt: skip


@pytest.mark.parametrize("cache_target_chain", [False, True], ids=["chain_per_step", "cached_chain"])
def test_training_steps_follow_algorithm_1(monkeypatch, cache_target_chain):
    """3 refreshes × 2 training steps, |W| = 4 in W batches of 2, run eagerly with every Adam step's loss
    inputs recorded: 12 Adam steps; both of a training step see its replay batch; their W rows partition
    W; every step's target is φ̄ = φ at the last refresh (construction, then after training steps 2 and
    4); the policies' Λ^K(ω_0) is refreshed once per training step, after its Adam steps."""
    refreshes, per_refresh = 3, 2
    agent = _algorithm_1_agent(cache_target_chain)
    seen = []
    real_loss = learner_module.combine_terms  # the learner adds its terms up on each step's context

    def recording_loss(terms, context):
        loss, metrics = real_loss(terms, context)
        seen.append(
            {
                "reward": context.batch["reward"].numpy(),
                "w_batch": context.params.numpy(),
                "chain": context.target_params.numpy(),
                "target": [w.numpy() for w in agent.target_pbo.weights],
                "phi": [w.numpy() for w in agent.pbo.weights],
                "loss": float(loss),
            }
        )
        return loss, metrics

    monkeypatch.setattr(learner_module, "combine_terms", recording_loss)
    refresh_calls = []
    real_refresh = agent.q_network.refresh
    monkeypatch.setattr(agent.q_network, "refresh", lambda: refresh_calls.append(len(seen)) or real_refresh())

    def weights(pbo):
        return [w.numpy().copy() for w in pbo.weights]

    phi_after = [weights(agent.pbo)]  # φ after 0, 1, ... training steps
    target_after = [weights(agent.target_pbo)]
    infos = []
    for t in range(refreshes * per_refresh):
        infos.append(agent.train(pairs(_rows_with_reward_offset(10.0 * t))))
        phi_after.append(weights(agent.pbo))
        target_after.append(weights(agent.target_pbo))

    assert int(agent.optimizer.iterations.numpy()) == refreshes * per_refresh * 2 == len(seen)
    assert int(agent.train_step_counter.numpy()) == refreshes * per_refresh
    # φ̄ changes after training steps 2, 4 (and 6, the end): the refreshes of epochs 2 and 3 (the first was
    # at construction).
    changed = [t for t in range(1, 7) if not np.array_equal(target_after[t][0], target_after[t - 1][0])]
    assert changed == [2, 4, 6]
    np.testing.assert_array_equal(target_after[0][0], phi_after[0][0])
    params = agent.params.numpy()
    for t in range(6):
        last_refresh = 2 * (t // 2)  # φ̄ of training step t is φ after training step 2 ⌊t / 2⌋
        order = infos[t].extra.w_indices.numpy()
        steps = seen[2 * t : 2 * t + 2]
        want_reward = np.array(
            [r for st, _, _, _, r, _, _ in _rows_with_reward_offset(10.0 * t) if st != LAST]
        )
        rows = []
        for i, step in enumerate(steps):
            np.testing.assert_allclose(step["reward"], want_reward, rtol=1e-6)  # this step's replay batch
            for got, want in zip(step["target"], phi_after[last_refresh], strict=True):
                np.testing.assert_array_equal(got, want)
            # the target chain Λ̄^{k−1}(ω), k = 1, 2, of the step's rows, from φ̄ by hand
            kernel, bias = phi_after[last_refresh]
            np.testing.assert_allclose(step["chain"][0], step["w_batch"], rtol=1e-6)
            np.testing.assert_allclose(
                step["chain"][1], step["w_batch"] @ kernel + bias, rtol=1e-5, atol=1e-6
            )
            batch_rows = [int(np.flatnonzero((params == w).all(axis=1))[0]) for w in step["w_batch"]]
            assert batch_rows == order[2 * i : 2 * i + 2].tolist()
            rows += batch_rows
        assert sorted(rows) == [0, 1, 2, 3]  # the two W batches partition W
        # the first Adam step starts from φ of the previous training step, the second from its update
        np.testing.assert_array_equal(steps[0]["phi"][0], phi_after[t][0])
        assert not np.array_equal(steps[1]["phi"][0], steps[0]["phi"][0])
        np.testing.assert_allclose(float(infos[t].extra.valid_transitions), 3)
        np.testing.assert_allclose(float(infos[t].loss), np.mean([x["loss"] for x in steps]), rtol=1e-6)
    assert len({tuple(info.extra.w_indices.numpy()) for info in infos}) > 1  # reshuffled per training step
    assert refresh_calls == [2 * (t + 1) for t in range(6)]  # once per training step, after its Adam steps
    omega_k = agent.pbo.iterate(agent.params[:1], agent.K)[agent.K]
    np.testing.assert_allclose(agent.q_network.omega_k().numpy(), omega_k.numpy(), rtol=1e-5, atol=1e-6)

    # The same training steps compiled (graph and XLA) run the Adam steps in the same order.
    monkeypatch.undo()
    for jit in (False, True):
        compiled = _algorithm_1_agent(cache_target_chain)
        train = common.function(compiled.train, jit_compile=jit)
        for t in range(6):
            info = train(pairs(_rows_with_reward_offset(10.0 * t)))
            np.testing.assert_allclose(float(info.loss), float(infos[t].loss), rtol=1e-4)
        assert int(compiled.optimizer.iterations.numpy()) == 12
        for got, want in zip(weights(compiled.pbo), phi_after[-1], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        for got, want in zip(weights(compiled.target_pbo), target_after[-1], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_the_loss_is_the_mean_over_the_w_batches():
    """`loss` (no update) = the mean of `pbo_loss` over the training step's W batches (`train`'s loss, the
    mean over its Adam steps, is checked in `test_training_steps_follow_algorithm_1`)."""
    agent = _algorithm_1_agent(cache_target_chain=False)
    experience = pairs(ROWS)
    batch, _ = replay_module.experience_to_batch(agent._as_transition(experience))
    valid = [r[0] != LAST for r in ROWS]
    batch = {key: tf.boolean_mask(value, valid) for key, value in batch.items()}
    parts = []
    for rows in agent.w_batches(0):
        w = tf.gather(agent.params, rows)
        chain = losses_module.target_chain(agent.target_pbo, w, agent.K)
        q_family = agent.q_network.q_family
        parts.append(losses_module.pbo_loss(agent.pbo, q_family, w, batch, chain, gamma=GAMMA))
    info = agent.loss(experience)
    np.testing.assert_allclose(float(info.loss), np.mean([float(p[0]) for p in parts]), rtol=1e-6)
    want_per_k = np.mean([p[1].per_k.numpy() for p in parts], axis=0)
    np.testing.assert_allclose(_per_k(info), want_per_k, rtol=1e-6)
    assert abs(float(parts[0][0]) - float(parts[1][0])) > 1e-3 * float(info.loss)  # the batches differ


def test_polyak_target_update():
    agent, _, _ = _linear_agent(
        np.random.default_rng(2), optimizer=tf_keras.optimizers.Adam(0.05), target_update_tau=0.25
    )
    experience = pairs(ROWS)
    target = [w.numpy().copy() for w in agent.target_pbo.weights]
    for _ in range(3):
        agent.train(experience)
        online = [w.numpy() for w in agent.pbo.weights]
        target = [0.25 * o + 0.75 * t for o, t in zip(online, target, strict=True)]
        for got, want in zip(agent.target_pbo.weights, target, strict=True):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-7)
        assert not np.allclose(target[0], online[0])
    # The policies' cached Λ^K(ω_0) was refreshed after the last update.
    states = tf.range(3, dtype=tf.int32)
    omega_k = agent.pbo.iterate(agent.params[:1], agent.K)[agent.K]
    np.testing.assert_allclose(
        agent.q_network(states)[0].numpy(),
        agent.q_network.q_family.q_all(omega_k, states)[0].numpy(),
        rtol=1e-5,
    )


def test_networks_equal_the_q_family_and_apply_k_changes_without_retracing():
    rng = np.random.default_rng(3)
    q = FlatMLPQ(3, [5], [-1.0, 0.0, 1.0])
    spec = tensor_spec.TensorSpec((3,), tf.float32)
    omega = rng.normal(size=q.d).astype(np.float32)
    obs = rng.normal(size=(4, 3)).astype(np.float32)

    net = FlatQNetwork(spec, q, initial_params=omega)
    net.create_variables()
    expected = q.q_all(omega[None], obs)[0].numpy()
    np.testing.assert_allclose(net(obs)[0].numpy(), expected, rtol=1e-5, atol=1e-6)
    seq = np.stack([obs, obs[::-1]], axis=1)  # [B, T, 3] outer dimensions are kept
    np.testing.assert_allclose(net(seq)[0].numpy()[:, 0], expected, rtol=1e-5, atol=1e-6)
    # Default initialisation = W[0] of the seed; a copy owns its own ω.
    seeded = FlatQNetwork(spec, q, seed=4)
    np.testing.assert_array_equal(seeded.omega.numpy(), q.initial_params(3, 4)[0])
    twin = net.copy(name="Twin")
    twin.create_variables()
    twin.omega.assign(np.zeros(q.d, np.float32))
    np.testing.assert_array_equal(net.omega.numpy(), omega)
    assert twin.omega is not net.omega

    pbo = DeepPBO(q.d, hidden_multiples=[1], init_std=0.05)
    pnet = PBOQNetwork(spec, q, pbo, omega_0=omega, apply_k=2)
    pnet.create_variables()
    assert {v.ref() for v in pnet.trainable_variables} == {v.ref() for v in pbo.trainable_variables}
    refs = {v.ref() for v in pnet.variables}
    assert pnet.apply_k.ref() in refs and pnet.omega_0.ref() in refs
    greedy_q = common.function(lambda o: pnet(o)[0])  # no autograph: apply_k is read by a tf.while_loop
    chain = pbo.iterate(omega[None], 12).numpy()[:, 0]  # Λ^k(ω_0), k = 0..12
    for k in (2, 0, 1, 5, 12):
        pnet.set_apply_k(k)
        want = q.q_all(chain[k][None], obs)[0].numpy()
        np.testing.assert_allclose(greedy_q(obs).numpy(), want, rtol=1e-4, atol=1e-6)
    assert greedy_q.experimental_get_tracing_count() == 1
    assert not np.allclose(chain[12], chain[1])  # the check above compares genuinely different Q's
    copy = pnet.copy(name="PBOCopy")
    copy.create_variables()
    assert copy.pbo is not pbo and int(copy.apply_k.numpy()) == 12
    np.testing.assert_allclose(copy(obs)[0].numpy(), pnet(obs)[0].numpy(), rtol=1e-5, atol=1e-6)

    # The cached variant reads Λ^k(ω_0) from a variable that set_apply_k and refresh recompute.
    cached = PBOQNetwork(spec, q, pbo, omega_0=omega, apply_k=3, cache_omega_k=True)
    cached.create_variables()
    np.testing.assert_allclose(cached(obs)[0].numpy(), q.q_all(chain[3][None], obs)[0].numpy(), rtol=1e-4)
    cached.set_apply_k(5)
    np.testing.assert_allclose(cached(obs)[0].numpy(), q.q_all(chain[5][None], obs)[0].numpy(), rtol=1e-4)
    kernel = pbo.output_layer.kernel
    kernel.assign(2.0 * kernel)  # φ changes: stale until refreshed
    np.testing.assert_allclose(cached(obs)[0].numpy(), q.q_all(chain[5][None], obs)[0].numpy(), rtol=1e-4)
    cached.refresh()
    new_5 = pbo.iterate(omega[None], 5)[5]
    np.testing.assert_allclose(cached(obs)[0].numpy(), q.q_all(new_5, obs)[0].numpy(), rtol=1e-4, atol=1e-6)
    assert not np.allclose(new_5.numpy()[0], chain[5])


def _chain_tf_env(n_states, seed):
    env = chain_walk.ChainWalkEnv(n_states=n_states)
    return tf_py_environment.TFPyEnvironment(to_tf_agents(env, seed=seed, max_episode_steps=20))


def _q_table(agent, n_states, k):
    agent.q_network.set_apply_k(k)
    return agent.q_network(tf.range(n_states, dtype=tf.int32))[0].numpy()


def _value_iteration(n_states, k):
    """``Γ^k Q_0`` with ``Q_0 = 0`` on the exact chain-walk model, ``[N, 2]``."""
    P, R = chain_walk.transition_model(n_states)
    q = np.zeros(2 * n_states)
    for _ in range(k):
        q = R + GAMMA * P @ q.reshape(n_states, 2).max(axis=1)
    return q.reshape(n_states, 2)


def _rms(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def test_driver_loop_learns_the_chain_walk(run_online):
    """ε-greedy collection with a driver, a uniform replay buffer and common.function(agent.train)."""
    tf.random.set_seed(0)
    n_states, K, steps = 7, 4, 200
    tf_env = _chain_tf_env(n_states, seed=0)
    q = TableQ(n_states, 2)
    pbo = TabularPBO(n_states, 2, GAMMA)
    counter = tf.Variable(0, dtype=tf.int64)
    lr = tf_keras.optimizers.schedules.PolynomialDecay(5e-2, steps, 5e-3)
    agent = _prodqn(
        tf_env.time_step_spec(),
        tf_env.action_spec(),
        q,
        pbo,
        q.initial_params(8, seed=0),
        K=K,
        gamma=GAMMA,
        optimizer=tf_keras.optimizers.Adam(lr),
        w_batch_size=4,
        train_steps_per_refresh=5,
        epsilon_decay_train_steps=steps // 2,
        train_step_counter=counter,
    )
    agent.initialize()
    q_star, gamma_k = chain_walk.optimal_q(n_states, gamma=GAMMA), _value_iteration(n_states, K)
    before = _q_table(agent, n_states, K)
    losses, _ = run_online(tf_env, agent, steps)
    assert np.isfinite(losses).all()
    assert np.mean(losses[-20:]) < 0.1 * np.mean(losses[:20])
    np.testing.assert_allclose(float(agent.epsilon()), 0.01, rtol=1e-5)  # ε reached its floor
    after = {k: _q_table(agent, n_states, k) for k in (K, 2 * K, 3 * K)}
    # K applications of the learned operator mimic K exact Bellman iterations from ω_0 = 0 ...
    assert _rms(after[K], gamma_k) < 0.25 * _rms(before, gamma_k), (before, after[K], gamma_k)
    # ... and applying it beyond K keeps moving towards Q* (RMS ≈ 8.3 at ω_0 = 0; exact iterations would
    # shrink the error by γ^K ≈ 0.66 per K applications; measured 0.75 and 0.76 here).
    errors = [_rms(after[k], q_star) for k in (K, 2 * K, 3 * K)]
    assert errors[1] < 0.85 * errors[0] and errors[2] < 0.85 * errors[1], errors
    near_ends = [1, n_states - 2]  # greedy moves towards the closer end (inner states differ by little)
    np.testing.assert_array_equal(after[2 * K][near_ends].argmax(axis=1), [0, 1])


def _mlp_agent(tss, act, seed, **kwargs):
    q = FlatMLPQ(tss.observation.shape[0], [8], np.arange(act.maximum + 1, dtype=np.float32))
    pbo = DeepPBO(q.d, hidden_multiples=[1], init_std=1e-3)
    return _prodqn(
        tss,
        act,
        q,
        pbo,
        q.initial_params(4, seed),
        K=3,
        gamma=0.99,
        optimizer=tf_keras.optimizers.Adam(1e-3),
        w_batch_size=2,
        seed=seed,
        train_steps_per_refresh=4,
        train_step_counter=tf.Variable(0, dtype=tf.int64),
        **kwargs,
    )


def _cartpole_run(run_online):
    """ProDQN (MLP Q, deep PBO) on gymnasium CartPole-v1: 100 collection-only iterations, 5 train steps."""
    tf_env = tf_py_environment.TFPyEnvironment(to_tf_agents("CartPole-v1", seed=0))
    agent = _mlp_agent(tf_env.time_step_spec(), tf_env.action_spec(), seed=0)
    agent.initialize()
    losses, buffer = run_online(tf_env, agent, steps=5, batch_size=32)
    assert np.isfinite(losses).all()
    return tf_env, agent, buffer


def test_policy_saver_round_trip(tmp_path):
    tf_env = tf_py_environment.TFPyEnvironment(to_tf_agents("CartPole-v1", seed=0))
    agent = _mlp_agent(tf_env.time_step_spec(), tf_env.action_spec(), seed=0)
    rng = np.random.default_rng(5)
    bias = agent.pbo.output_layer.bias
    bias.assign(rng.normal(size=bias.shape).astype(np.float32))  # a PBO with a visible effect
    agent.q_network.set_apply_k(5)  # beyond K: the exported policy keeps the variable's value
    policy_saver.PolicySaver(agent.policy, batch_size=None).save(str(tmp_path / "policy"))
    loaded = tf.saved_model.load(str(tmp_path / "policy"))
    obs = rng.normal(scale=2.0, size=(64, 4)).astype(np.float32)
    step = ts.restart(tf.constant(obs), batch_size=64)
    live = agent.policy.action(step).action.numpy()
    np.testing.assert_array_equal(loaded.action(step).action.numpy(), live)
    omega_5 = agent.pbo.iterate(agent.params[:1], 5)[5]
    q_values = agent.q_network.q_family.q_all(omega_5, obs)[0].numpy()
    np.testing.assert_array_equal(live, q_values.argmax(axis=1))
    assert len(set(live.tolist())) == 2  # the comparison covers both actions


def test_checkpoint_restores_agent_and_replay_buffer(tmp_path, run_online):
    tf_env, agent, buffer = _cartpole_run(run_online)
    checkpointer = common.Checkpointer(
        str(tmp_path / "ckpt"), agent=agent, replay_buffer=buffer, global_step=agent.train_step_counter
    )
    checkpointer.save(agent.train_step_counter)

    # Same configuration (W and the seed of its batches come from it), fresh random PBO weights.
    fresh = _mlp_agent(tf_env.time_step_spec(), tf_env.action_spec(), seed=0)
    fresh_buffer = TFUniformReplayBuffer(fresh.collect_data_spec, batch_size=1, max_length=4000)
    assert not np.allclose(fresh.pbo.weights[0].numpy(), agent.pbo.weights[0].numpy())
    common.Checkpointer(
        str(tmp_path / "ckpt"), agent=fresh, replay_buffer=fresh_buffer, global_step=fresh.train_step_counter
    ).initialize_or_restore().assert_existing_objects_matched()
    for a, b in [
        (agent.pbo.weights, fresh.pbo.weights),
        (agent.target_pbo.weights, fresh.target_pbo.weights),
        (agent.q_network.variables, fresh.q_network.variables),
        (agent.optimizer.variables, fresh.optimizer.variables),
    ]:
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert int(fresh.train_step_counter.numpy()) == int(agent.train_step_counter.numpy()) == 5
    tf.nest.map_structure(np.testing.assert_array_equal, fresh_buffer.gather_all(), buffer.gather_all())
    assert int(fresh_buffer.num_frames()) == int(buffer.num_frames()) >= 210
    # Training on from the restored state is the same step: same W batch, same Adam state, same update.
    experience, _ = buffer.get_next(sample_batch_size=32, num_steps=2)
    expected, restored = agent.train(experience), fresh.train(experience)
    np.testing.assert_array_equal(expected.extra.w_indices.numpy(), restored.extra.w_indices.numpy())
    np.testing.assert_allclose(restored.loss.numpy(), expected.loss.numpy(), rtol=1e-6)
    for x, y in zip(agent.pbo.weights, fresh.pbo.weights, strict=True):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-6, atol=1e-9)


def test_a_fused_adam_has_its_slots_from_construction_and_restores_them(tmp_path):
    """The legacy (fused) Adam of ``AnnealedAdam(fused=True)`` gets its step count and moments when the
    agent is built, so a checkpoint restores them before the first step; training on from the restored
    state takes the same step."""
    agent, _, _ = _linear_agent(
        np.random.default_rng(2), optimizer=AnnealedAdam(1e-2, 1e-3, fused=True), lr_schedule_steps=4
    )
    assert len(optimizer_variables(agent.optimizer)) == 5  # iterations, m and v of the kernel and the bias
    for _ in range(2):
        agent.train(pairs(ROWS))
    path = tf.train.Checkpoint(agent=agent).save(str(tmp_path / "ckpt"))
    fresh, _, _ = _linear_agent(  # the same W (configuration); other weights, an untouched Adam
        np.random.default_rng(2), optimizer=AnnealedAdam(1e-2, 1e-3, fused=True), lr_schedule_steps=4
    )
    _set_linear(fresh.pbo, np.zeros((6, 6)), np.zeros(6))
    assert not any(v.numpy().any() for v in optimizer_variables(fresh.optimizer))
    tf.train.Checkpoint(agent=fresh).restore(path).assert_existing_objects_matched()
    for a, b in ((agent.optimizer, fresh.optimizer), (agent.pbo, fresh.pbo)):
        a_vars = optimizer_variables(a) if hasattr(a, "apply_gradients") else a.weights
        b_vars = optimizer_variables(b) if hasattr(b, "apply_gradients") else b.weights
        for x, y in zip(a_vars, b_vars, strict=True):
            np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert int(fresh.optimizer.iterations.numpy()) == 2
    agent.train(pairs(ROWS))
    fresh.train(pairs(ROWS))
    for x, y in zip(agent.pbo.weights, fresh.pbo.weights, strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def test_xla_train_step_matches_the_graph_one():
    runs = []
    for jit in (False, True):
        agent, _, _ = _linear_agent(np.random.default_rng(4), optimizer=tf_keras.optimizers.Adam(0.05))
        train = common.function(agent.train, jit_compile=jit)
        runs.append(([float(train(pairs(ROWS)).loss) for _ in range(3)], agent.pbo.weights[0].numpy()))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-5)
    np.testing.assert_allclose(runs[1][1], runs[0][1], rtol=1e-5, atol=1e-6)


def test_linear_epsilon_and_argument_checks():
    step = tf.Variable(0, dtype=tf.int64)
    eps = linear_epsilon(step, 100, 1.0, 0.01)
    for value, want in [(0, 1.0), (50, 0.505), (100, 0.01), (1000, 0.01)]:
        step.assign(value)
        np.testing.assert_allclose(float(eps()), want, rtol=1e-6)
    tss, act = _table_specs(3, 2)
    q, W = TableQ(3, 2), np.zeros((4, 6), np.float32)
    opt = tf_keras.optimizers.SGD(0.1)
    with pytest.raises(ValueError, match="w_batch_size"):
        _prodqn(tss, act, q, LinearPBO(6), W, 2, GAMMA, opt, w_batch_size=5)
    with pytest.raises(ValueError, match="parameters"):
        _prodqn(tss, act, q, LinearPBO(5), W, 2, GAMMA, opt)
    with pytest.raises(ValueError, match="action spec"):
        _prodqn(tss, _table_specs(3, 3)[1], q, LinearPBO(6), W, 2, GAMMA, opt)
    with pytest.raises(ValueError, match="train_steps_per_refresh"):
        _prodqn(tss, act, q, LinearPBO(6), W, 2, GAMMA, opt, train_steps_per_refresh=0)


def test_cached_target_chain_gives_the_same_training_as_the_per_step_chain():
    """Hard target refreshes every 2 training steps, W batches of 3 and 2 of the 5 rows: the cached chain
    (recomputed at each refresh, rows gathered) and the per-step chain give the same losses and weights, in
    graph and XLA."""
    rng = np.random.default_rng(7)
    big = rng.normal(size=(5, 6)).astype(np.float32)
    tss, act = _table_specs(3, 2)
    runs = {}
    for cache, jit in ((False, False), (True, False), (True, True)):
        pbo = LinearPBO(6)
        _set_linear(pbo, 0.4 * np.random.default_rng(8).normal(size=(6, 6)), np.ones(6))
        counter = tf.Variable(0, dtype=tf.int64)
        agent = _prodqn(
            tss, act, TableQ(3, 2), pbo, big, 3, GAMMA, tf_keras.optimizers.Adam(0.05), w_batch_size=3,
            train_steps_per_refresh=2, cache_target_chain=cache, train_step_counter=counter,
        )  # fmt: skip
        assert (agent.learner.cached_chain is not None) == cache
        train = common.function(agent.train, jit_compile=jit)
        losses = [float(train(pairs(ROWS)).loss) for _ in range(6)]
        runs[(cache, jit)] = (losses, agent.pbo.weights[0].numpy())
    reference = runs[(False, False)]
    assert len(set(reference[0])) == 6  # the loss moves, across three target updates
    for key in ((True, False), (True, True)):
        np.testing.assert_allclose(runs[key][0], reference[0], rtol=1e-5)
        np.testing.assert_allclose(runs[key][1], reference[1], rtol=1e-5, atol=1e-6)
    polyak, _, _ = _linear_agent(rng, target_update_tau=0.5, cache_target_chain=True)
    assert polyak.learner.cached_chain is None  # the chain changes every step: nothing to cache


@pytest.mark.parametrize("jit", [False, True])
def test_a_replay_batch_without_a_transition_takes_no_adam_step_and_is_counted(jit):
    """A batch made only of episode-boundary pairs has no transition (its loss would be 0 / 0 = NaN): no
    Adam step, a zero loss flagged ``skipped``, one more skipped batch; the next valid batch trains."""
    agent, _, _ = _linear_agent(np.random.default_rng(0), optimizer=make_adam(1e-2), w_batch_size=1)
    train = common.function(agent.train, jit_compile=jit)
    before = [w.numpy().copy() for w in agent.pbo.weights]
    boundary = [(LAST, FIRST, 2, 1, 7.0, 1.0, 0), (LAST, FIRST, 0, 0, -1.0, 1.0, 1)]
    info = train(pairs(boundary))
    assert bool(info.extra.skipped) and int(info.extra.valid_transitions) == 0
    assert float(info.loss) == 0.0 and np.all(_per_k(info) == 0.0)
    assert int(agent.optimizer.iterations.numpy()) == 0  # no Adam step on either W batch
    for got, want in zip(agent.pbo.weights, before, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)
    assert int(agent.skipped_batches.numpy()) == 1 and int(agent.train_step_counter.numpy()) == 1
    info = train(pairs(ROWS))  # an ordinary batch: 2 Adam steps (one per W batch), finite loss
    assert not bool(info.extra.skipped) and np.isfinite(float(info.loss)) and float(info.loss) > 0
    assert int(agent.optimizer.iterations.numpy()) == 2 and int(agent.skipped_batches.numpy()) == 1
    assert any(not np.array_equal(w.numpy(), b) for w, b in zip(agent.pbo.weights, before, strict=True))
