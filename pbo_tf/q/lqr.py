"""Quadratic Q family for the 1-D LQR: ``Q_ω(s, a) = G s² + 2 I s a + M a²``, ``ω = (G, I)``, M fixed."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from pbo_tf.q.base import QFamily, zero_and_truncated_normal


class LQRQ(QFamily):
    """The paper's LQR family (Sec. 5.2), ``d = 2``.

    The max over actions runs over a discrete set (default: 200 actions on a linspace over [−8, 8], as in
    the paper: the algorithms are not told that the max has a closed form).

    Args:
      M: the fixed coefficient of ``a²`` (must be negative so that the max exists).
      action_values: the discrete action set for ``max_a``.
    """

    def __init__(self, M: float, action_values=None, **kwargs):
        if action_values is None:
            action_values = np.linspace(-8.0, 8.0, 200)
        super().__init__(action_values=action_values, **kwargs)
        if not M < 0:
            raise ValueError(f"LQR Q family needs M < 0 for max_a Q to exist, got M={M}")
        self.M = float(M)

    @property
    def d(self) -> int:
        return 2

    def _quadratic(self, params, states, actions):
        """``states [B]``, ``actions [B, …]`` broadcastable; returns ``[n_w, B, …]``."""
        params = self._check(params)
        g = params[:, 0]
        i = params[:, 1]
        extra = actions.shape.rank - 1
        g = tf.reshape(g, [-1, 1] + [1] * extra)
        i = tf.reshape(i, [-1, 1] + [1] * extra)
        s = tf.reshape(states, [1, -1] + [1] * extra)
        a = actions[None]
        return g * tf.square(s) + 2.0 * i * s * a + self.M * tf.square(a)

    def q_all(self, params, states):
        """``[n_w, 2] × [B] or [B, 1] → [n_w, B, |A|]``."""
        states = tf.reshape(tf.cast(states, tf.float32), [-1])
        actions = tf.broadcast_to(
            tf.constant(self.action_values[:, 0])[None, :], [tf.shape(states)[0], self.n_actions]
        )
        return self._quadratic(params, states, actions)

    def q_sa(self, params, states, actions):
        """Accepts float action values ``[B]`` (or int indices into `action_values`)."""
        states = tf.reshape(tf.cast(states, tf.float32), [-1])
        actions = tf.convert_to_tensor(actions)
        if actions.dtype.is_integer:
            actions = tf.gather(tf.constant(self.action_values[:, 0]), actions)
        actions = tf.reshape(tf.cast(actions, tf.float32), [-1])
        return self._quadratic(params, states, actions)

    def initial_params(self, n: int, seed: int) -> np.ndarray:
        return zero_and_truncated_normal(n, self.d, seed)

    def get_config(self):
        return {"M": self.M, "action_values": self.action_values[:, 0].tolist(), "name": self.name}
