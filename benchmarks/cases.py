"""What the benchmark and the XLA export both measure: the problem shapes, their analytic costs and the
library objects built at those shapes.

The shapes are the paper's: car-on-hill ProFQI (K = 9, d = 151, |W| = 30, 500 transitions, deep PBO
[2, 2, 2, 2]) and Lunar Lander ProDQN (K = 10, d = 1261, |W| = 30 with 15 rows per step, 500 transitions,
deep PBO [2, 2, 2, 2]), on synthetic transitions. Everything here goes through the library's public API.
"""

from __future__ import annotations

import numpy as np


# --------------------------------------------------------------------------------------- analytic costs
def mlp_flops(sizes, rows):
    """FLOPs of a dense MLP of layer ``sizes`` on ``rows`` rows (multiply-adds count 2)."""
    return sum(2 * rows * i * o for i, o in zip(sizes[:-1], sizes[1:], strict=True))


def mlp_params(sizes):
    """Weights and biases of a dense MLP of layer ``sizes``."""
    return sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:], strict=True))


def step_flops(K, n_w, d, pbo_sizes, q_sizes, batch, n_actions):
    """FLOPs of one ProFQI/ProDQN gradient step as the reference implementation does the work: prediction
    chain forward + backward (≈ 3× forward), the target chain forward (K − 1 applications) and the Q
    evaluations."""
    pbo = mlp_flops(pbo_sizes, n_w)
    q = mlp_flops(q_sizes, 1)
    return 3 * K * pbo + (K - 1) * pbo + K * n_w * batch * n_actions * q + 3 * K * n_w * batch * q


def step_weight_bytes(K, pbo_sizes, bytes_per_value=4):
    """Bytes one ProFQI/ProDQN gradient step moves over the operator's weights when they do not fit in the
    last-level cache (Lunar Lander: 102 MB of fp32). Each of the K prediction-chain applications reads the
    weights forward and again backward (the input's gradient); `DeepPBO.chain`'s backward pass then writes
    each weight gradient once, from one product over all K applications; Adam reads weights, gradient and
    both moments and writes weights and moments. So 2K + 8 passes; the activations (15 rows) are small
    beside the weights."""
    return (2 * K + 8) * mlp_params(pbo_sizes) * bytes_per_value


CAR_ON_HILL_PROFQI_FLOPS = step_flops(9, 30, 151, [151] + [302] * 4 + [151], [3, 30, 1], 500, 2)
LUNAR_LANDER_PRODQN_FLOPS = step_flops(10, 15, 1261, [1261] + [2522] * 4 + [1261], [9, 30, 30, 1], 500, 4)
LUNAR_LANDER_PRODQN_WEIGHT_BYTES = step_weight_bytes(10, [1261] + [2522] * 4 + [1261])


# ------------------------------------------------------------------------------------------ the objects
def synthetic_transitions(rng, n, state_low, state_high, n_actions):
    """``n`` random transitions in the box ``[state_low, state_high]``: small moves, rewards 0 / ±1 and 5%
    terminal, enough to give the losses the real shapes and non-trivial values."""
    from pbo_tf.data.transitions import Transitions

    states = rng.uniform(state_low, state_high, size=(n, len(state_low)))
    nxt = states + rng.normal(0, 0.05, states.shape) * (np.asarray(state_high) - np.asarray(state_low))
    return Transitions.from_arrays(
        states, rng.integers(0, n_actions, n), rng.choice([0.0, 1.0, -1.0], n, p=[0.9, 0.05, 0.05]),
        np.clip(nxt, state_low, state_high), rng.random(n) < 0.05,
    )  # fmt: skip


def car_on_hill_data(seed, n=500):
    """Synthetic car-on-hill transitions (position in [-1, 1], speed in [-3, 3], two actions)."""
    return synthetic_transitions(np.random.default_rng(seed), n, [-1, -3], [1, 3], 2)


def car_on_hill_q():
    """The car-on-hill Q family: state 2, one hidden layer of 30, actions ±1 (d = 151)."""
    from pbo_tf.q import FlatMLPQ

    return FlatMLPQ(2, [30], [-1.0, 1.0])


def car_on_hill_pbo(compute_dtype=None):
    """The car-on-hill deep PBO [2, 2, 2, 2] at the paper's initialisation."""
    from pbo_tf.operators import DeepPBO

    return DeepPBO(151, hidden_multiples=[2, 2, 2, 2], init_std=5e-7, compute_dtype=compute_dtype)


def profqi_trainer(q, pbo_factory, data, K, n_w, batch_size, gamma, passes, jit, seed=0, **kwargs):
    """A `ProFQITrainer` of one refresh of ``passes`` passes, silent, at the benchmark's learning rates;
    ``kwargs`` go to the trainer (more refreshes, checkpoint and summary folders)."""
    from pbo_tf.trainers.profqi import ProFQITrainer

    options = dict(refreshes=1, log=None)
    options.update(kwargs)
    return ProFQITrainer(
        pbo_factory(), pbo_factory(), q, data.to_dataset(), len(data), q.initial_params(n_w, seed), K, gamma,
        passes_per_refresh=passes, batch_size=batch_size, w_batch_size=n_w, lr_start=1e-4, lr_end=1e-5,
        seed=seed, jit_compile=jit, **options,
    )  # fmt: skip


def profqi_trainers(q, pbo_factory, datasets, K, n_w, batch_size, gamma, passes, jit):
    """One `profqi_trainer` per dataset, seeded by its position."""
    return [
        profqi_trainer(q, pbo_factory, data, K, n_w, batch_size, gamma, passes, jit, seed=seed)
        for seed, data in enumerate(datasets)
    ]


def fqi_trainer(q, data, batch_size, gamma, epochs, jit, seed=0):
    """A one-iteration `FQITrainer` of ``epochs`` epochs that never stops early (for timing)."""
    from pbo_tf.trainers.fqi import FQITrainer

    return FQITrainer(
        q, data.to_dataset(), len(data), q.initial_params(1, seed)[0], 1, gamma, max_epochs=epochs,
        patience=epochs + 1, batch_size=batch_size, lr_start=1e-3, lr_end=1e-4, seed=seed, log=None,
        jit_compile=jit,
    )  # fmt: skip


def prodqn_agent_train(jit=False, cache=True, compute_dtype=None, fused_adam=True, policy_refresh=False):
    """``(train, experience)``: the compiled ``ProDQNAgent.train`` at the Lunar Lander shape and a fixed
    batch of 500 MID-step transition pairs.

    The defaults are `gin_configs/lunar_lander/prodqn.gin`'s (graph mode, fused Adam, cached target chain).
    ``policy_refresh`` adds what the online loop does after each gradient step: recomputing the policies'
    cached ``Λ^K(ω_0)`` (K one-row applications); without it, ``train`` is the gradient step alone.
    """
    import tensorflow as tf
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import time_step as ts
    from tf_agents.utils import common

    from pbo_tf.agents import ProDQNAgent
    from pbo_tf.operators import DeepPBO
    from pbo_tf.optimizers import make_adam
    from pbo_tf.q import FlatMLPQ

    q = FlatMLPQ(8, [30, 30], [0.0, 1.0, 2.0, 3.0])
    obs = tensor_spec.BoundedTensorSpec([8], tf.float32, -10.0, 10.0)
    action = tensor_spec.BoundedTensorSpec([], tf.int64, 0, 3)
    agent = ProDQNAgent(
        ts.time_step_spec(obs), action, q,
        DeepPBO(q.d, hidden_multiples=[2, 2, 2, 2], compute_dtype=compute_dtype),
        q.initial_params(30, 0), 10, 0.99, make_adam(1e-5, fused=fused_adam), w_batch_size=15,
        target_update_period=3000, cache_target_chain=cache, enable_summaries=False,
        cache_omega_k=policy_refresh, train_step_counter=tf.Variable(0, dtype=tf.int64),
    )  # fmt: skip
    experience = tensor_spec.sample_spec_nest(agent.collect_data_spec, outer_dims=(500, 2), seed=0)
    mid = tf.ones([500, 2], tf.int32)
    # (sample_spec_nest draws an unbounded reward spec from the float32 range: the loss would be inf.)
    reward = tf.random.stateless_uniform([500, 2], seed=[0, 1], minval=-1.0, maxval=1.0)
    experience = experience._replace(  # (a namedtuple's public copy-with-changes method)
        step_type=mid, next_step_type=mid, discount=tf.ones([500, 2]), reward=reward
    )
    return common.function(agent.train, jit_compile=jit), experience
