"""Car-on-hill evaluation (paper Sec. 6.1): greedy rollouts from the 17 × 17 grid, metrics.

* `greedy_rollout_values`: the discounted return ``V^π(s) = Σ_t γ^t r_t`` of 100-step greedy rollouts from
  every start state, for many policies at once (e.g. one per number of PBO applications ``k``), all inside
  one ``tf.function``: a ``tf.while_loop`` over the steps, the dynamics of `pbo_tf.envs.car_on_hill`
  (`step_states` with ``tensorflow.experimental.numpy``) in float64, the policies fed float32 states.
* `car_on_hill_metrics`: per policy, ``J = mean_cells V^π(s)·count(s)`` with the raw dataset counts (the
  reference's weighting), its normalised version ``Σ V^π·count / Σ count``, and the count-weighted errors
  ``√mean(count·(Q* − Q)²)`` (over cells and actions) and ``√mean(count·(V* − V^π)²)``.
* `reference_metrics`: the same ``J`` for ``V*`` and summaries of ``V*`` over the grid.

The metrics are NumPy only; TensorFlow is imported by `greedy_rollout_values` alone.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np

from pbo_tf.envs import car_on_hill as coh

_COMPILED: collections.OrderedDict[tuple, tuple[Callable, Callable]] = collections.OrderedDict()
_MAX_COMPILED = 8


def _compiled_rollout(
    greedy_fn: Callable, horizon: int, gamma: float, n_substeps: int, jit_compile: bool
) -> Callable:
    """The ``tf.function`` for these settings, reused while ``greedy_fn`` is the same object."""
    import tensorflow as tf
    import tensorflow.experimental.numpy as tnp

    key = (id(greedy_fn), horizon, float(gamma), n_substeps, jit_compile)
    entry = _COMPILED.get(key)
    if entry is not None and entry[0] is greedy_fn:
        _COMPILED.move_to_end(key)
        return entry[1]

    @tf.function(jit_compile=jit_compile, autograph=False)
    def rollout(states: tf.Tensor) -> tf.Tensor:
        def cond(t, states, returns, alive, discount):
            return tf.logical_and(t < horizon, tf.reduce_any(alive))

        def body(t, states, returns, alive, discount):
            actions = tf.cast(greedy_fn(tf.cast(states, tf.float32)), tf.int32)
            actions = tf.ensure_shape(actions, states.shape[:-1])
            next_states = coh.step_states(states, actions, tnp, n_substeps)
            reward, terminated = coh.transition_outcome(next_states, tnp)
            returns = returns + tf.where(alive, discount * reward, tf.zeros_like(reward))
            states = tf.where(alive[..., None], next_states, states)  # finished rollouts stay frozen
            alive = tf.logical_and(alive, tf.logical_not(terminated))
            return t + 1, states, returns, alive, discount * tf.constant(gamma, tf.float64)

        returns = tf.zeros(tf.shape(states)[:-1], tf.float64)
        alive = tf.ones(tf.shape(states)[:-1], tf.bool)
        _, _, returns, _, _ = tf.while_loop(
            cond, body, (tf.constant(0), states, returns, alive, tf.constant(1.0, tf.float64))
        )
        return returns

    _COMPILED[key] = (greedy_fn, rollout)
    while len(_COMPILED) > _MAX_COMPILED:
        _COMPILED.popitem(last=False)
    return rollout


def greedy_rollout_values(
    greedy_fn: Callable[[Any], Any],
    starts: np.ndarray,
    n_policies: int,
    horizon: int = coh.HORIZON,
    gamma: float = coh.GAMMA,
    *,
    n_substeps: int = coh.N_SUBSTEPS,
    jit_compile: bool = True,
) -> np.ndarray:
    """Discounted returns of ``n_policies`` greedy policies from every start state, in one ``tf.function``.

    Each rollout runs until termination or ``horizon`` steps; a finished rollout stops accumulating (its
    state is frozen). Rewards are those of `pbo_tf.envs.car_on_hill.transition_outcome`.

    Args:
      greedy_fn: TF-traceable callable mapping float32 states ``[n_policies, N, 2]`` to integer action
        indices ``[n_policies, N]`` (policy ``i`` acts on row ``i``). The compiled graph (slow to trace
        and compile with XLA) is reused when the same object is passed again with the same shapes: e.g. a
        callable reading its parameters from ``tf.Variable``s that are assigned between calls.
      starts: float ``[N, 2]`` start states (e.g. `pbo_tf.envs.car_on_hill.grid_centres`).
      n_policies: number of policies (leading axis given to ``greedy_fn``).
      horizon: maximum number of steps.
      gamma: discount factor.
      n_substeps: RK4 sub-steps per step (the env's default).
      jit_compile: compile the rollout with XLA (``greedy_fn`` must then be XLA-compatible).

    Returns:
      float64 ``[n_policies, N]``: ``Σ_t γ^t r_t``.
    """
    import tensorflow as tf

    starts = np.asarray(starts, dtype=np.float64)
    if starts.ndim != 2 or starts.shape[1] != 2:
        raise ValueError(f"starts must have shape [N, 2], got {starts.shape}")
    if int(n_policies) != n_policies or n_policies < 1:
        raise ValueError(f"n_policies must be a positive integer, got {n_policies!r}")
    if horizon < 0:
        raise ValueError(f"horizon must be >= 0, got {horizon!r}")
    states = np.broadcast_to(starts, (int(n_policies), *starts.shape))
    rollout = _compiled_rollout(greedy_fn, int(horizon), float(gamma), int(n_substeps), bool(jit_compile))
    return rollout(tf.constant(states, tf.float64)).numpy()


def _as_float(x: Any, name: str, ndim: int) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    return arr


def car_on_hill_metrics(
    values: np.ndarray,
    q_values: np.ndarray,
    counts: np.ndarray,
    v_star: np.ndarray,
    q_star: np.ndarray,
) -> list[dict[str, float]]:
    """Per-policy car-on-hill metrics on a grid of ``C`` cells (``C = 289`` for the paper).

    Args:
      values: ``[n_policies, C]`` rollout values ``V^π(s)`` (`greedy_rollout_values`).
      q_values: ``[n_policies, C, 2]`` the policies' ``Q(s, a)`` at the grid states.
      counts: ``[C]`` raw dataset counts per cell (`pbo_tf.envs.car_on_hill.state_counts`).
      v_star, q_star: ``[C]`` and ``[C, 2]`` exact optimum (`pbo_tf.envs.car_on_hill.optimal_values`).

    Returns:
      One dict per policy: ``J`` = mean over cells of ``V^π·count`` (the reference's unnormalised weighting),
      ``J_normalised`` = ``Σ V^π·count / Σ count``, ``q_error`` = ``√mean_{cells, actions} count·(Q* − Q)²``,
      ``v_error`` = ``√mean_cells count·(V* − V^π)²``.
    """
    values = _as_float(values, "values", 2)
    q_values = _as_float(q_values, "q_values", 3)
    counts = _as_float(counts, "counts", 1)
    v_star = _as_float(v_star, "v_star", 1)
    q_star = _as_float(q_star, "q_star", 2)
    n_policies, n_cells = values.shape
    expected = {
        "q_values": ((n_policies, n_cells, 2), q_values.shape),
        "counts": ((n_cells,), counts.shape),
        "v_star": ((n_cells,), v_star.shape),
        "q_star": ((n_cells, 2), q_star.shape),
    }
    for name, (want, got) in expected.items():
        if want != got:
            raise ValueError(f"{name} has shape {got}, expected {want} (values has shape {values.shape})")
    total = counts.sum()
    weighted = values * counts
    j = weighted.mean(axis=1)
    j_normalised = weighted.sum(axis=1) / total if total > 0 else np.full(n_policies, np.nan)
    q_error = np.sqrt(np.mean(counts[:, None] * np.square(q_star - q_values), axis=(1, 2)))
    v_error = np.sqrt(np.mean(counts * np.square(v_star - values), axis=1))
    return [
        {
            "J": float(j[i]),
            "J_normalised": float(j_normalised[i]),
            "q_error": float(q_error[i]),
            "v_error": float(v_error[i]),
        }
        for i in range(n_policies)
    ]


def reference_metrics(v_star: np.ndarray, counts: np.ndarray) -> dict[str, float]:
    """Summaries of the optimum on the grid.

    Returns:
      ``optimal_J`` (``J`` of ``V*``, raw counts), ``optimal_J_normalised``, ``optimal_v_grid_mean``
      (unweighted mean of ``V*`` over the cells) and ``optimal_v_grid_positive_fraction`` (fraction of
      cells with ``V* > 0``, i.e. from which the top is reachable within the horizon).
    """
    v_star = _as_float(v_star, "v_star", 1)
    counts = _as_float(counts, "counts", 1)
    if counts.shape != v_star.shape:
        raise ValueError(f"counts has shape {counts.shape}, expected {v_star.shape} like v_star")
    total = counts.sum()
    return {
        "optimal_J": float(np.mean(v_star * counts)),
        "optimal_J_normalised": float(np.sum(v_star * counts) / total) if total > 0 else float("nan"),
        "optimal_v_grid_mean": float(np.mean(v_star)),
        "optimal_v_grid_positive_fraction": float(np.mean(v_star > 0)),
    }
