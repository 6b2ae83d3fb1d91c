"""Multi-head Q family of the iterated baselines (i-FQI, i-DQN): K + 1 Q-functions in one parameter vector.

Head ``k`` of ``MultiHeadQ(base, n_heads)`` is a member ``Q_{ω_k}`` of the ``base`` family, and the flat
vector is the heads' vectors side by side, ``θ = [ω_0, ω_1, ..., ω_{H−1}]`` (``d = H · base.d``), so any
head extracts as a ``base`` vector (`head_params`) that every evaluator, plot and report takes unchanged.
The iterated loss (`pbo_tf.losses.iterated_bellman_loss`) trains head k on the Bellman target of head k − 1
under a frozen copy; head 0 gets no loss term, so it stays ``Q_0``.

As a `QFamily`, the family evaluates its **last** head: the greedy and ε-greedy policies of i-DQN act on it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from pbo_tf.q.base import QFamily


class MultiHeadQ(QFamily):
    """``n_heads`` members of ``base`` in one flat vector ``[n_w, n_heads · base.d]`` (head-major).

    Args:
      base: the Q family of every head (`FlatMLPQ` for the deep problems, `TableQ` on chain-walk).
      n_heads: the number of heads, K + 1 for K Bellman iterations.

    Raises:
      ValueError: ``n_heads < 2`` (an iterated method needs head 0 and at least one trained head).
    """

    def __init__(self, base: QFamily, n_heads: int, **kwargs):
        super().__init__(action_values=base.action_values, **kwargs)
        if int(n_heads) < 2:
            raise ValueError(f"n_heads must be >= 2 (head 0 and K >= 1 trained heads), got {n_heads}")
        self.base = base
        self.n_heads = int(n_heads)
        self._d = self.n_heads * int(base.d)
        for name in ("state_dim", "hidden"):  # what evaluators read off an MLP family
            if hasattr(base, name):
                setattr(self, name, getattr(base, name))

    @property
    def d(self) -> int:
        return self._d

    # ------------------------------------------------------------------------------------ the heads
    def heads(self, params) -> tf.Tensor:
        """``[n_w, d] → [n_w, n_heads, base.d]``."""
        params = self._check(params)
        return tf.reshape(params, [-1, self.n_heads, self.base.d])

    def head_params(self, params, k: int) -> tf.Tensor:
        """Head ``k``'s ``base`` vectors ``[n_w, base.d]``."""
        if not 0 <= int(k) < self.n_heads:
            raise ValueError(f"head {k} does not exist: the family has heads 0..{self.n_heads - 1}")
        return self.heads(params)[:, int(k)]

    def stack_heads(self, head_params) -> np.ndarray:
        """The inverse of `heads`: ``[n_w, n_heads, base.d] → [n_w, d]`` (NumPy)."""
        head_params = np.asarray(head_params, np.float32)
        if head_params.ndim != 3 or head_params.shape[1:] != (self.n_heads, self.base.d):
            raise ValueError(
                f"head parameters must be [n_w, {self.n_heads}, {self.base.d}], got {list(head_params.shape)}"
            )
        return head_params.reshape(len(head_params), self.d)

    def _flat_heads(self, params) -> tf.Tensor:
        return tf.reshape(self.heads(params), [-1, self.base.d])  # [n_w · H, base.d], head-minor

    def q_all_heads(self, params, states) -> tf.Tensor:
        """Every head on every action: ``[n_w, d] × [B, ...] → [n_w, n_heads, B, |A|]``."""
        q = self.base.q_all(self._flat_heads(params), states)
        return tf.reshape(q, [-1, self.n_heads, tf.shape(q)[1], self.n_actions])

    def q_sa_heads(self, params, states, actions) -> tf.Tensor:
        """Every head on the given actions: ``[n_w, d] × [B, ...] × [B] → [n_w, n_heads, B]``."""
        q = self.base.q_sa(self._flat_heads(params), states, actions)
        return tf.reshape(q, [-1, self.n_heads, tf.shape(q)[1]])

    def bellman_targets_heads(self, params, rewards, next_states, dones, gamma: float) -> tf.Tensor:
        """``r + γ (1 − done) max_a' Q_{ω_k}(s', a')`` for every head k: ``[n_w, n_heads, B]``."""
        targets = self.base.bellman_targets(self._flat_heads(params), rewards, next_states, dones, gamma)
        return tf.reshape(targets, [-1, self.n_heads, tf.shape(targets)[1]])

    # ------------------------------------------------------------------- QFamily: the last head
    def q_all(self, params, states):
        """The last head's ``[n_w, B, |A|]`` (the policy's head)."""
        return self.base.q_all(self.head_params(params, self.n_heads - 1), states)

    def q_sa(self, params, states, actions):
        """The last head's ``[n_w, B]``."""
        return self.base.q_sa(self.head_params(params, self.n_heads - 1), states, actions)

    def q_all_paired(self, params, states):
        """The last head's ``[n, B, |A|]``, one batch of states per parameter vector."""
        return self.base.q_all_paired(self.head_params(params, self.n_heads - 1), states)

    # --------------------------------------------------------------------------------- parameters
    def initial_params(self, n: int, seed: int) -> np.ndarray:
        """``n`` vectors of ``n_heads`` independent ``base`` initialisations each; head 0 of the first is
        the seed's ``base`` start, ``base.initial_params(1, seed)[0]`` (FQI's and DQN's ``ω_0``)."""
        heads = np.asarray(self.base.initial_params(n * self.n_heads, seed), np.float32)
        return heads.reshape(n, self.d)

    def get_config(self):
        return {"base": self.base.get_config(), "n_heads": self.n_heads, "name": self.name}
