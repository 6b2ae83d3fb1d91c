"""The set W of Algorithm 1 and the start ω₀ of the curve, with the option of Q-functions that differ.

The paper's W (`pbo_tf.q.QFamily.initial_params`) draws every MLP member with a zero last layer, so every
``Q_ω`` of W is ``Q ≡ 0``: the k = 1 targets are the same for every ω ∈ W and nothing in the PBO loss asks
the operator to tell its inputs apart. ``last_layer_std > 0`` draws the last layer (kernel and bias) of
every member from N(0, last_layer_std²) instead, so the members are different Q-functions; the hidden
layers are the paper's draws either way.

ω₀, where `PBO.iterate` starts the curve, is ``"paper"``: the seed's initial network with its zero last
layer (FQI's and DQN's ω₀, `initial_params(1, seed)[0]`), or ``"w0"``: W[0] as drawn (the same vector when
``last_layer_std == 0``).

`mix_in_iterates` replaces W's last members with noisy copies of trained parameters (FQI's iterates on the
seed's dataset, `pbo_tf.experiments.runner.Experiment`), so that W also holds Q-functions near the ones the
Bellman iterations go through: the PBO loss then trains the operator where its own iterates go, not only
around the untrained draws.
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


def iterate_choice(n_iterates: int, members: int) -> np.ndarray:
    """Which of ``n_iterates`` iterates each of ``members`` new members copies: evenly spread,
    ``floor(i · n_iterates / members)``, so every iterate is used when ``members >= n_iterates``."""
    return (np.arange(int(members)) * int(n_iterates)) // int(members)


def mix_in_iterates(w_set, iterates, members: int, noise: float, seed: int) -> np.ndarray:
    """W with its last ``members`` rows replaced by noisy copies of ``iterates``.

    Member ``i`` copies ``iterates[iterate_choice(n, members)[i]]`` and adds independent N(0, σ²) noise to
    every coordinate, σ = ``noise`` × the copied iterate's root mean square (so the noise scales with the
    parameters, whatever their size). W[0] is never replaced (it may be ω₀, ``omega0="w0"``).

    Args:
      w_set: the drawn W ``[n, d]`` (`draw_w_set`).
      iterates: trained parameters ``[m, d]`` (e.g. FQI's ω_1 .. ω_K), finite.
      members: how many of W's last rows to replace, ``0 <= members < n``.
      noise: the noise's std relative to each iterate's root mean square, finite and >= 0.
      seed: the run's seed (the noise has its own stream).

    Returns:
      ``[n, d]`` float32: a new array; ``w_set`` is not modified.

    Raises:
      ValueError: a bad size, noise or iterate array.
    """
    w = np.array(w_set, dtype=np.float32)
    iterates = np.asarray(iterates, dtype=np.float32)
    n = w.shape[0]
    if not 0 <= int(members) < n:
        raise ValueError(
            f"the FQI members of W must number 0 .. |W| - 1 = {n - 1} (W[0] stays), got {members}"
        )
    if not np.isfinite(noise) or float(noise) < 0:
        raise ValueError(f"the FQI members' relative noise must be a finite number >= 0, got {noise}")
    if iterates.ndim != 2 or iterates.shape[0] < 1 or iterates.shape[1] != w.shape[1]:
        raise ValueError(
            f"the iterates to mix into W must be [m >= 1, {w.shape[1]}], got {list(iterates.shape)}"
        )
    if not np.all(np.isfinite(iterates)):
        raise ValueError("the iterates to mix into W are not all finite")
    members = int(members)
    if members == 0:
        return w
    copies = iterates[iterate_choice(len(iterates), members)].astype(np.float64)
    rms = np.sqrt(np.mean(copies**2, axis=1, keepdims=True))
    rng = np.random.default_rng([int(seed), 0xF01])  # its own stream: W's draws stay the same
    w[n - members :] = (copies + rng.normal(size=copies.shape) * float(noise) * rms).astype(np.float32)
    return w
