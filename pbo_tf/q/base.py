"""The functional Q-family interface: Q values from a batch of flat parameter vectors.

A Q family is the function space ``{Q_ω : ω ∈ R^d}`` of the paper (Sec. 3). Every method takes a batch
of flat parameter vectors ``params`` of shape ``[n_w, d]`` and a batch of inputs of size ``B`` and
returns one value per (parameter vector, input) pair: ``[n_w, B]`` (or ``[n_w, B, |A|]`` over the
discrete action set). The same code path serves the loss (``n_w`` = a batch of the set W, or K·n_w
for all the iterates of a PBO chain at once) and the policy (``n_w = 1``).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras


class ShapeMismatchError(ValueError):
    """Raised when a parameter batch does not have the size ``d`` its Q family or operator expects."""


def check_params(params: tf.Tensor, d: int, owner: str) -> tf.Tensor:
    """Checks that ``params`` is ``[n_w, d]`` (static shape) and returns it as float32.

    Raises:
      ShapeMismatchError: naming both shapes, when the rank or the last dimension is wrong.
    """
    params = tf.convert_to_tensor(params, dtype=tf.float32)
    shape = params.shape
    if shape.rank is not None and (shape.rank != 2 or (shape[-1] is not None and shape[-1] != d)):
        raise ShapeMismatchError(f"{owner} expects parameters of shape [n_w, {d}], got {shape.as_list()}")
    return params


def first_argmax(values: tf.Tensor) -> tf.Tensor:
    """Index of the maximum along the last axis, the *first* one on ties (as the reference does)."""
    n = tf.shape(values)[-1]
    is_max = values >= tf.reduce_max(values, axis=-1, keepdims=True)
    indices = tf.broadcast_to(tf.range(n), tf.shape(values))
    return tf.reduce_min(tf.where(is_max, indices, n), axis=-1)


class QFamily(tf_keras.layers.Layer):
    """Base class of the functional Q families (no trainable weights of its own).

    Subclasses implement `q_all` and `initial_params`; they may override `q_sa` when evaluating a
    single action is cheaper than evaluating all of them.

    Args:
      action_values: the discrete action set used for ``max_a`` and greedy policies, ``[|A|]`` or
        ``[|A|, action_dim]``; what a subclass feeds its function for action ``i`` is ``action_values[i]``.
    """

    def __init__(self, action_values, **kwargs):
        super().__init__(trainable=False, **kwargs)
        action_values = np.asarray(action_values, dtype=np.float32)
        if action_values.ndim == 1:
            action_values = action_values[:, None]
        if action_values.ndim != 2 or action_values.shape[0] < 1:
            raise ValueError(f"action_values must be [|A|] or [|A|, action_dim], got {action_values.shape}")
        self._action_values = action_values

    # ------------------------------------------------------------------------------------ properties
    @property
    def d(self) -> int:
        """Size of the flat parameter vector."""
        raise NotImplementedError

    @property
    def n_actions(self) -> int:
        return int(self._action_values.shape[0])

    @property
    def action_values(self) -> np.ndarray:
        """``[|A|, action_dim]`` float32 action set."""
        return self._action_values

    # -------------------------------------------------------------------------------------- evaluation
    def q_all(self, params: tf.Tensor, states: tf.Tensor) -> tf.Tensor:
        """Q values of every discrete action: ``[n_w, d] × [B, ...] → [n_w, B, |A|]``."""
        raise NotImplementedError

    def q_sa(self, params: tf.Tensor, states: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
        """Q values of the given actions: ``[n_w, d] × [B, ...] × [B] → [n_w, B]``.

        ``actions`` are int indices into `action_values` (families with continuous inputs may also accept
        float action values).
        """
        q = self.q_all(params, states)
        actions = tf.cast(actions, tf.int32)
        onehot = tf.one_hot(actions, self.n_actions, dtype=q.dtype)
        return tf.reduce_sum(q * onehot[None], axis=-1)

    def q_all_paired(self, params: tf.Tensor, states: tf.Tensor) -> tf.Tensor:
        """Q values of every action with a batch of states *per* parameter vector:
        ``[n, d] × [n, B, ...] → [n, B, |A|]`` (row i of ``params`` sees only ``states[i]``).

        Used by rollouts that follow n greedy policies at once. The default maps `q_all` over the pairs;
        families override it with a batched evaluation.
        """
        return tf.map_fn(
            lambda pair: self.q_all(pair[0][None], pair[1])[0],
            (params, states),
            fn_output_signature=tf.float32,
        )

    def greedy_actions_paired(self, params: tf.Tensor, states: tf.Tensor) -> tf.Tensor:
        """Greedy action indices ``[n, B]`` (int32, first action on ties) of `q_all_paired`."""
        return tf.cast(first_argmax(self.q_all_paired(params, states)), tf.int32)

    def call(self, params, states, actions=None):
        """``Q(params, states)`` → ``[n_w, B, |A|]``; ``Q(params, states, actions)`` → ``[n_w, B]``."""
        if actions is None:
            return self.q_all(params, states)
        return self.q_sa(params, states, actions)

    def max_q(self, params: tf.Tensor, states: tf.Tensor) -> tf.Tensor:
        """``max_a Q_ω(s, a)`` over the discrete action set: ``[n_w, B]``."""
        return tf.reduce_max(self.q_all(params, states), axis=-1)

    def greedy_actions(self, params: tf.Tensor, states: tf.Tensor) -> tf.Tensor:
        """Greedy action indices ``[n_w, B]`` (int32), first action on ties."""
        return tf.cast(first_argmax(self.q_all(params, states)), tf.int32)

    def bellman_targets(
        self,
        params: tf.Tensor,
        rewards: tf.Tensor,
        next_states: tf.Tensor,
        dones: tf.Tensor,
        gamma: float,
    ) -> tf.Tensor:
        """Empirical optimal Bellman targets ``r + γ (1 − done) max_a' Q_ω(s', a')``: ``[n_w, B]``."""
        next_max = self.max_q(params, next_states)
        rewards = tf.cast(rewards, tf.float32)
        dones = tf.cast(dones, tf.float32)
        return rewards[None, :] + gamma * (1.0 - dones)[None, :] * next_max

    # --------------------------------------------------------------------------------- parameters
    def initial_params(self, n: int, seed: int) -> np.ndarray:
        """The set W of Algorithm 1: ``n`` initial parameter vectors ``[n, d]`` (float32), seeded."""
        raise NotImplementedError

    def _check(self, params):
        return check_params(params, self.d, type(self).__name__)


def zero_and_truncated_normal(n: int, d: int, seed: int, stddev: float = 1.0) -> np.ndarray:
    """W for linear families: ``W[0] = 0`` and the others truncated-normal(0, stddev) (±2 std)."""
    init = tf_keras.initializers.TruncatedNormal(mean=0.0, stddev=stddev, seed=seed)
    w = np.array(init((n, d)), dtype=np.float32)
    w[0] = 0.0
    return w
