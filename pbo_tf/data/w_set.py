"""The set W of Algorithm 1 and the start ω₀ of the curve, with the option of Q-functions that differ.

The paper's W (`pbo_tf.q.QFamily.initial_params`) draws every MLP member with a zero last layer, so every
``Q_ω`` of W is ``Q ≡ 0``: the k = 1 targets are the same for every ω ∈ W and nothing in the PBO loss asks
the operator to tell its inputs apart. ``last_layer_std > 0`` draws the last layer (kernel and bias) of
every member from N(0, last_layer_std²) instead, so the members are different Q-functions; the hidden
layers are the paper's draws either way.

ω₀, where `PBO.iterate` starts the curve, is ``"paper"``: the seed's initial network with its zero last
layer (FQI's and DQN's ω₀, `initial_params(1, seed)[0]`), or ``"w0"``: W[0] as drawn (the same vector when
``last_layer_std == 0``).
"""

from __future__ import annotations

import numpy as np

OMEGA0_CHOICES = ("paper", "w0")


def draw_w_set(q_family, n: int, seed: int, last_layer_std: float = 0.0, omega0: str = "paper"):
    """The set W ``[n, d]`` and ω₀ ``[d]`` of a seed (see the module docstring).

    Args:
      q_family: the Q family (``last_layer_std > 0`` needs a `pbo_tf.q.FlatMLPQ`).
      n: size of W (>= 1).
      seed: the run's seed.
      last_layer_std: std of the normal draw of every member's last layer; 0 = the paper's zero last layer.
      omega0: ``"paper"`` or ``"w0"``.

    Returns:
      ``(w_set [n, d] float32, omega0 [d] float32)``.

    Raises:
      ValueError: a bad size, std or ω₀ choice, or a last-layer std for a family without a last layer.
    """
    from pbo_tf.q import FlatMLPQ

    if int(n) < 1:
        raise ValueError(f"the set W needs at least one vector, got n={n}")
    if not np.isfinite(last_layer_std) or float(last_layer_std) < 0:
        raise ValueError(f"last_layer_std must be a finite number >= 0, got {last_layer_std}")
    if omega0 not in OMEGA0_CHOICES:
        raise ValueError(f"unknown omega0 {omega0!r}; known: {list(OMEGA0_CHOICES)}")
    w = np.array(q_family.initial_params(int(n), int(seed)), dtype=np.float32)
    paper_omega0 = w[0].copy()
    if float(last_layer_std) > 0:
        if not isinstance(q_family, FlatMLPQ):
            raise ValueError(
                f"last_layer_std needs an MLP Q family (its last layer), not {type(q_family).__name__}"
            )
        size = last_layer_size(q_family)
        rng = np.random.default_rng([int(seed), 0x57])  # its own stream: the hidden draws stay the paper's
        w[:, -size:] = rng.normal(0.0, float(last_layer_std), size=(int(n), size)).astype(np.float32)
    return w, (paper_omega0 if omega0 == "paper" else w[0].copy())


def last_layer_size(q_family) -> int:
    """Entries of the flat vector that hold the MLP's last layer (kernel and bias): its last ones."""
    n_in, n_out = q_family.layer_shapes[-1]
    return n_in * n_out + n_out
