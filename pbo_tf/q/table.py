"""Tabular Q family: ``ω`` is the ``N × |A|`` table flattened row-major (chain-walk, ``d = 40``)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from pbo_tf.q.base import QFamily, zero_and_truncated_normal


class TableQ(QFamily):
    """``Q_ω(s, a) = ω[s·|A| + a]`` for integer states ``s ∈ {0..N−1}``.

    Args:
      n_states: number of states ``N``.
      n_actions: number of actions ``|A|``.
    """

    def __init__(self, n_states: int, n_actions: int, **kwargs):
        super().__init__(action_values=np.arange(n_actions, dtype=np.float32), **kwargs)
        if n_states < 1:
            raise ValueError(f"n_states must be positive, got {n_states}")
        self.n_states = int(n_states)

    @property
    def d(self) -> int:
        return self.n_states * self.n_actions

    def as_table(self, params: tf.Tensor) -> tf.Tensor:
        """``[n_w, d] → [n_w, N, |A|]``."""
        params = self._check(params)
        return tf.reshape(params, [-1, self.n_states, self.n_actions])

    def q_all(self, params, states):
        """``[n_w, d] × [B] (int) → [n_w, B, |A|]``."""
        table = self.as_table(params)
        states = tf.reshape(tf.cast(states, tf.int32), [-1])
        return tf.gather(table, states, axis=1)

    def initial_params(self, n: int, seed: int) -> np.ndarray:
        return zero_and_truncated_normal(n, self.d, seed)

    def get_config(self):
        return {"n_states": self.n_states, "n_actions": self.n_actions, "name": self.name}
