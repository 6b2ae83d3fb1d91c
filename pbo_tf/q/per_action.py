"""MLP Q family with one output per action: input ``s``, ReLU (or leaky) hidden layers, ``|A|`` outputs.

DQN's own network (Mnih et al. 2015; TF-Agents' ``QNetwork``, CleanRL's ``QNetwork``, SB3's ``QNetwork``):
``Q_ω(s, ·) = MLP_ω(s) ∈ R^{|A|}``, the hidden features shared by every action and one output unit per
action, where `pbo_tf.q.FlatMLPQ` feeds the action as an input and has one output. The flat layout,
the initialisation (Glorot-uniform hidden kernels, zero biases, zero last layer, so ``Q_{ω_0} ≡ 0``) and
the optional input scaling are `FlatMLPQ`'s; only the first layer's input (``state_dim``) and the last
layer's width (``|A|``) differ.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from pbo_tf.q.base import QFamily
from pbo_tf.q.mlp import FlatMLPQ


class PerActionMLPQ(FlatMLPQ):
    """``Q_ω(s, a) = MLP_ω(s)[a]``: the state in, one output per action.

    Args:
      state_dim: size of the (flat) state.
      hidden: hidden layer widths, e.g. ``[120, 84]`` (d = (4·120 + 120) + (120·84 + 84) + (84·2 + 2) for
        CartPole-v1).
      n_actions: number of discrete actions ``|A|`` (actions ``0 .. |A| − 1``).
      state_shift, state_scale: the input scaling of `FlatMLPQ` (the network sees
        ``(s − state_shift) · state_scale``).
      negative_slope: `FlatMLPQ`'s leaky hidden units (0: ReLU).

    Raises:
      ValueError: ``n_actions < 1``, empty or non-positive ``hidden``, a bad shift or scale or
        ``negative_slope``.
    """

    def __init__(
        self,
        state_dim: int,
        hidden: Sequence[int],
        n_actions: int,
        state_shift=None,
        state_scale=None,
        negative_slope: float = 0.0,
        **kwargs,
    ):
        if int(n_actions) < 1:
            raise ValueError(f"n_actions must be >= 1, got {n_actions}")
        action_values = np.arange(int(n_actions), dtype=np.float32)  # the indices: greedy action = argmax
        super().__init__(state_dim, hidden, action_values, state_shift, state_scale, negative_slope, **kwargs)

    @property
    def input_width(self) -> int:
        """The first layer's input: the state alone."""
        return self.state_dim

    @property
    def output_width(self) -> int:
        """The last layer's units: one per action."""
        return self.n_actions

    def _forward(self, layers, h):
        """The MLP on ``h [n_w or 1, B, state_dim]`` (already scaled): ``[n_w, B, |A|]``."""
        for idx, (kernel, bias) in enumerate(layers):
            h = tf.matmul(h, kernel) + bias[:, None, :]
            if idx < len(layers) - 1:
                h = self.activation(h)
        return h

    def q_all(self, params, states):
        """``[n_w, d] × [B, state_dim] → [n_w, B, |A|]``."""
        states = self.scale_states(tf.reshape(tf.cast(states, tf.float32), [-1, self.state_dim]))
        return self._forward(self.unflatten(params), states[None])  # [1, B, s] broadcast over n_w

    def q_all_paired(self, params, states):
        """``[n, d] × [n, B, state_dim] → [n, B, |A|]``, one batch of states per parameter vector."""
        return self._forward(self.unflatten(params), self.scale_states(states))

    def q_sa(self, params, states, actions):
        """``[n_w, d] × [B, state_dim] × [B] (int) → [n_w, B]``: `q_all` at the given actions."""
        return QFamily.q_sa(self, params, states, actions)

    def get_config(self):
        config = super().get_config()
        del config["action_values"]
        return {**config, "n_actions": self.n_actions}
