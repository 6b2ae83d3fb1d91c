"""Bicycle evaluation: balancing time and discounted return of greedy policies over noisy rollouts from
upright (the paper's protocol, appendix "Bicycle"), compiled.

`bicycle_rollouts` runs ``n_policies × n_rollouts`` episodes of the bicycle from one start state inside a
single `tf.function` (XLA by default): a `tf.while_loop` over time steps that stops as soon as every
episode has fallen or ``max_steps`` is reached. The dynamics are `pbo_tf.envs.bicycle.bicycle_step`
evaluated in float64 with ``tensorflow.experimental.numpy`` (the same code as the gymnasium env); the
policies see the states cast to float32.

The displacement noise of step ``t`` is ``noise · (2 u − 1)`` with ``u`` drawn by the stateless ThreeFry
generator from the seed pair ``(seed, t)`` (`rollout_noise`), so a run is reproducible from ``seed`` and
can be replayed step by step outside the compiled loop.

Metrics, per policy (means over its rollouts):

* ``balancing_time_s``: the length of the episode in steps times ``dt = 0.01`` s, i.e. the simulated time
  at which the bicycle fell (the falling step included), or ``max_steps · dt`` (500 s) if it never fell;
* ``discounted_return``: ``Σ_{t=0}^{T−1} γ^t r_t`` over the episode's ``T`` steps (the last reward of a
  fallen episode is −1).

Cost: the loop runs until the last episode falls, so a policy that balances for the whole ``max_steps``
dominates; XLA is faster per step than graph mode on CPU (`benchmarks/benchmark.py --cases=evaluation` times
the compiled rollouts). The time grows linearly with the number of rollouts, so evaluate all policies of a
run in one call (``n_policies`` = seeds × iterations).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow.experimental.numpy as tnp

from pbo_tf.envs.bicycle import mdp as bk

GreedyFn = Callable[[tf.Tensor], tf.Tensor]


@tf.function(jit_compile=True, autograph=False)
def _threefry_noise(key: tf.Tensor, shape: tuple[int, ...], noise: tf.Tensor) -> tf.Tensor:
    # ThreeFry only exists as an XLA kernel, and on CPU it is faster than XLA's Philox.
    u = tf.random.stateless_uniform(shape, seed=key, dtype=tf.float64, alg="threefry")
    return noise * (2.0 * u - 1.0)


def rollout_noise(
    seed: int | tf.Tensor, step: int | tf.Tensor, shape: Sequence[int], noise: float | tf.Tensor
) -> tf.Tensor:
    """The displacement noise `bicycle_rollouts` uses at time step ``step``.

    ``noise · (2 u − 1)`` with ``u`` uniform in ``[0, 1)`` from the stateless ThreeFry generator keyed by
    ``(seed, step)``. The draw always runs as an XLA kernel (ThreeFry has no other), so it is bit-identical
    eagerly, inside a compiled rollout and inside a non-XLA rollout.

    Args:
      seed: the run's integer seed.
      step: the time step ``t`` (0-based).
      shape: the batch shape, ``[n_policies, n_rollouts]``.
      noise: the half-width of the uniform noise.

    Returns:
      float64 tensor of ``shape``, uniform in ``[−noise, noise)``.
    """
    key = tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64)])
    noise = tf.cast(tf.convert_to_tensor(noise, dtype_hint=tf.float64), tf.float64)  # no float32 detour
    return _threefry_noise(key, tuple(int(n) for n in shape), noise)


def lean_controller(
    states: tf.Tensor,
    k_omega: float = 2.0,
    k_omega_dot: float = 0.5,
    k_theta: float = 10.0,
    k_theta_dot: float = 0.3,
    dead_zone: float = 0.5,
) -> tf.Tensor:
    """A hand-made greedy function that keeps the bicycle up: steer into the fall with bang-bang torques.

    The handlebar is driven towards ``θ* = k_omega ω + k_omega_dot ω̇`` (turning towards the side the bicycle
    leans to brings it back up): with ``u = k_theta (θ* − θ) − k_theta_dot θ̇`` the action is the torque
    ``+2`` (index 4) if ``u > dead_zone``, ``−2`` (index 3) if ``u < −dead_zone``, else nothing (index 1).
    With the default gains it kept the bicycle up in all 2 000 noisy 50 000-step episodes of a
    20 × 100 evaluation from upright (a reference "good" policy for tests and benchmarks).

    Args:
      states: float ``[..., 4]`` states ``(ω, ω̇, θ, θ̇)``.
      k_omega, k_omega_dot, k_theta, k_theta_dot, dead_zone: the gains.

    Returns:
      int32 ``[...]`` action indices.
    """
    states = tf.convert_to_tensor(states)
    omega, omega_dot, theta, theta_dot = tf.unstack(states, axis=-1)
    u = k_theta * (k_omega * omega + k_omega_dot * omega_dot - theta) - k_theta_dot * theta_dot
    return tf.where(u > dead_zone, 4, tf.where(u < -dead_zone, 3, 1))


def make_rollout_fn(
    greedy_fn: GreedyFn, n_policies: int, n_rollouts: int = 100, jit_compile: bool = True
) -> Callable[..., dict[str, tf.Tensor]]:
    """Builds the compiled rollout function behind `bicycle_rollouts`, reusable without recompiling.

    Args:
      greedy_fn: TF-traceable map from float32 states ``[n_policies, n_rollouts, 4]`` to integer action
        indices ``[n_policies, n_rollouts]``. It is traced once into the function: tensors it closes over
        are baked in, `tf.Variable` s it reads are read at every call.
      n_policies, n_rollouts: the (static) batch shape.
      jit_compile: compile with XLA.

    Returns:
      A callable ``(seed, start, noise, gamma, max_steps) -> dict`` around one `tf.function` with the
      input signature int64 scalar, float64 ``[4]``, float64 scalar, float64 scalar, int32 scalar (numbers
      and arrays are converted), so calling it with other values neither retraces nor recompiles. The dict
      holds ``steps`` int32 ``[n_policies, n_rollouts]`` (episode lengths), ``discounted_return`` float64
      ``[n_policies, n_rollouts]`` and ``final_state`` float64 ``[n_policies, n_rollouts, 4]`` (the state
      reached at the fall, or after ``max_steps``).
    """
    shape = (int(n_policies), int(n_rollouts))

    def rollout(
        seed: tf.Tensor, start: tf.Tensor, noise: tf.Tensor, gamma: tf.Tensor, max_steps: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        state = tf.broadcast_to(start, shape + (4,))
        alive = tf.ones(shape, tf.bool)
        steps = tf.zeros(shape, tf.int32)
        returns = tf.zeros(shape, tf.float64)

        def cond(t, state, alive, steps, returns):
            return tf.logical_and(t < max_steps, tf.reduce_any(alive))

        def body(t, state, alive, steps, returns):
            action = tf.cast(greedy_fn(tf.cast(state, tf.float32)), tf.int32)
            d_noise = rollout_noise(seed, t, shape, noise)
            next_state, reward, fell = bk.bicycle_step(state, action, d_noise, xp=tnp)
            discount = tf.pow(gamma, tf.cast(t, tf.float64))
            returns = returns + tf.where(alive, discount * reward, tf.zeros_like(reward))
            steps = steps + tf.cast(alive, tf.int32)
            state = tf.where(alive[..., None], next_state, state)  # fallen episodes stay frozen
            alive = tf.logical_and(alive, tf.logical_not(fell))
            return t + 1, state, alive, steps, returns

        _, state, _, steps, returns = tf.while_loop(
            cond, body, (tf.constant(0, tf.int32), state, alive, steps, returns)
        )
        return {"steps": steps, "discounted_return": returns, "final_state": state}

    compiled = tf.function(
        rollout,
        jit_compile=jit_compile,
        autograph=False,
        input_signature=(
            tf.TensorSpec([], tf.int64),
            tf.TensorSpec([4], tf.float64),
            tf.TensorSpec([], tf.float64),
            tf.TensorSpec([], tf.float64),
            tf.TensorSpec([], tf.int32),
        ),
    )

    def call(seed: Any, start: Any, noise: Any, gamma: Any, max_steps: Any) -> dict[str, tf.Tensor]:
        return compiled(
            tf.constant(np.asarray(seed, np.int64)),
            tf.constant(np.asarray(start, np.float64)),
            tf.constant(np.asarray(noise, np.float64)),
            tf.constant(np.asarray(gamma, np.float64)),
            tf.constant(np.asarray(max_steps, np.int32)),
        )

    return call


def bicycle_rollouts(
    greedy_fn: GreedyFn,
    n_policies: int,
    n_rollouts: int = 100,
    max_steps: int = bk.MAX_EPISODE_STEPS,
    gamma: float = bk.GAMMA,
    noise: float = bk.NOISE,
    seed: int = 0,
    start: Sequence[float] = (0.0, 0.0, 0.0, 0.0),
    jit_compile: bool = True,
    return_per_rollout: bool = False,
    rollout: Callable[..., dict[str, tf.Tensor]] | None = None,
) -> dict[str, np.ndarray]:
    """Evaluates ``n_policies`` greedy policies on the bicycle, ``n_rollouts`` noisy episodes each.

    All ``n_policies × n_rollouts`` episodes run together in one compiled `tf.function` (see the module
    docstring for the noise and the metrics). A new function is traced (and compiled) per call; use
    `make_rollout_fn` to evaluate the same ``greedy_fn`` several times without recompiling, and pass it as
    ``rollout``.

    Args:
      greedy_fn: TF-traceable map from float32 states ``[n_policies, n_rollouts, 4]`` to integer action
        indices ``[n_policies, n_rollouts]`` (policy ``i`` acts on row ``i``).
      n_policies: number of policies (rows).
      n_rollouts: episodes per policy (100 in the paper).
      max_steps: episode cut (50 000 steps = 500 s in the paper).
      gamma: discount factor of the return.
      noise: half-width of the displacement noise (0 makes every rollout of a policy identical).
      seed: seed of the noise.
      start: the start state ``(ω, ω̇, θ, θ̇)`` of every episode.
      jit_compile: compile with XLA (faster per step on CPU, see the module docstring).
      return_per_rollout: also return ``steps`` ``[n_policies, n_rollouts]`` and the per-rollout
        ``rollout_discounted_return``.
      rollout: a `make_rollout_fn` function of these sizes to call instead of building one (``greedy_fn``
        and ``jit_compile`` are then its own).

    Returns:
      ``{"balancing_time_s": float64 [n_policies], "discounted_return": float64 [n_policies]}`` (means
      over the rollouts), plus the per-rollout arrays when asked.

    Raises:
      ValueError: non-positive sizes (or ``max_steps >= 2**31``), or a start state that is not 4 finite
        numbers with ``|θ| <= 80°``.
    """
    if n_policies < 1 or n_rollouts < 1 or not 1 <= max_steps < 2**31:
        raise ValueError(
            f"n_policies, n_rollouts and max_steps must be >= 1, got {n_policies}, {n_rollouts}, {max_steps}"
        )
    start_array = np.asarray(start, dtype=np.float64)
    if (
        start_array.shape != (4,)
        or not np.all(np.isfinite(start_array))
        or abs(start_array[2]) > bk.THETA_BOUND
    ):
        raise ValueError(f"start must be 4 finite numbers (ω, ω̇, θ, θ̇) with |θ| <= 80°, got {start!r}")
    fn = rollout or make_rollout_fn(greedy_fn, n_policies, n_rollouts, jit_compile)
    out = fn(seed, start_array, noise, gamma, max_steps)
    steps = out["steps"].numpy()
    returns = out["discounted_return"].numpy()
    result = {
        "balancing_time_s": steps.mean(axis=1) * bk.DT,
        "discounted_return": returns.mean(axis=1),
    }
    if return_per_rollout:
        result["steps"] = steps
        result["rollout_discounted_return"] = returns
    return result


def evaluate_params(
    q_family,
    params,
    n_rollouts: int = 100,
    max_steps: int = bk.MAX_EPISODE_STEPS,
    gamma: float = bk.GAMMA,
    seed: int = 0,
    jit_compile: bool = True,
    cache: dict | None = None,
) -> list[dict]:
    """``balancing_time_s`` and ``discounted_return`` of the greedy policy of every ``Q_{params[i]}``,
    all in one `bicycle_rollouts` (used by the offline and the online experiments).

    ``cache``: a dict kept by the caller between calls (the online env's). The compiled rollouts are built
    once per Q family, number of policies, rollouts and ``jit_compile`` and stored in it, reading the
    parameters from a variable, so evaluating new parameters of the same shape neither retraces nor
    recompiles; the numbers are those of a call without it."""
    params = np.asarray(params, np.float32)
    n_policies, rollout = int(params.shape[0]), None
    if cache is not None:
        key = (id(q_family), params.shape, int(n_rollouts), bool(jit_compile))
        if key not in cache or cache[key][0] is not q_family:
            variable = tf.Variable(tf.zeros(params.shape, tf.float32), trainable=False)
            rollout = make_rollout_fn(
                lambda states: q_family.greedy_actions_paired(variable, states),
                n_policies,
                int(n_rollouts),
                jit_compile,
            )
            cache[key] = (q_family, variable, rollout)  # the family held: its id stays its own
        _, variable, rollout = cache[key]
        variable.assign(params)
    greedy = None  # a cached rollout plays its own policy, on the variable
    if rollout is None:
        constant = tf.constant(params)
        greedy = lambda states: q_family.greedy_actions_paired(constant, states)  # noqa: E731
    out = bicycle_rollouts(
        greedy,
        n_policies,
        n_rollouts=int(n_rollouts),
        max_steps=int(max_steps),
        gamma=gamma,
        seed=int(seed),
        jit_compile=jit_compile,
        rollout=rollout,
    )
    return [
        {"balancing_time_s": float(t), "discounted_return": float(r)}
        for t, r in zip(out["balancing_time_s"], out["discounted_return"], strict=True)
    ]
