"""PBOs with the structure of the exact operator: tabular (ProFQI_chain), LQR (ProFQI_LQR), and oracles.

* Finite MDP (paper Sec. 5.1, Eq. 6): ``Λ(Q) = R + γ P max_a Q(·, a)``. `TabularPBO` learns
  ``R̂ ∈ R^{N|A|}`` and ``P̂ ∈ R^{N|A|×N}``; with the true R and P it *is* the Bellman operator.
* LQR (Sec. 5.2, Eq. 7): ``Λ(G, I) = (Q + A² c, S + A B c)``, ``c = G − I²/M``. `LQRPBO` learns the
  slope ``(A², AB)`` and the bias ``(Q, S)`` directly (learning A and B themselves would start at a saddle
  point when they are initialised near zero).

`oracle_*` build the same layers frozen at the true model: the "PBO" reference curve of the paper.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras

from pbo_tf.operators.base import PBO, initializer_seeds


def _initializer(value, init_std: float, seed: int | None):
    if value is None:
        return tf_keras.initializers.TruncatedNormal(stddev=init_std, seed=seed)
    return tf_keras.initializers.Constant(np.asarray(value, dtype=np.float32))


class TabularPBO(PBO):
    """``Λ(ω) = R̂ + γ P̂ max_a Q_ω(·, a)`` for the tabular family (``ω`` = the ``N×|A|`` table, row-major).

    Args:
      n_states: N.
      n_actions: |A|.
      gamma: discount factor (known).
      init_std: std of the truncated-normal initialisation of R̂ and P̂.
      reward: optional fixed initial value of R̂ ``[N·|A|]``.
      transitions: optional fixed initial value of P̂ ``[N·|A|, N]``.
      trainable: False for the oracle.
      seed: seed of the truncated-normal initialisation (`pbo_tf.operators.base.initializer_seeds`); None
        draws from the global generator.
    """

    def __init__(
        self,
        n_states: int,
        n_actions: int,
        gamma: float,
        init_std: float = 5e-6,
        reward=None,
        transitions=None,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(n_states * n_actions, **kwargs)
        reward_seed, transitions_seed = initializer_seeds(seed, 2)
        self.n_states, self.n_actions, self.gamma = int(n_states), int(n_actions), float(gamma)
        self.init_std = float(init_std)
        self.reward = self.add_weight(
            name="reward",
            shape=[self.d],
            initializer=_initializer(reward, init_std, reward_seed),
            trainable=self.trainable,
        )
        self.transitions = self.add_weight(
            name="transitions",
            shape=[self.d, self.n_states],
            initializer=_initializer(transitions, init_std, transitions_seed),
            trainable=self.trainable,
        )

    def apply(self, params):
        v = tf.reduce_max(tf.reshape(params, [-1, self.n_states, self.n_actions]), axis=-1)  # [n_w, N]
        return self.reward[None, :] + self.gamma * tf.matmul(v, self.transitions, transpose_b=True)

    def get_config(self):
        return {
            "n_states": self.n_states,
            "n_actions": self.n_actions,
            "gamma": self.gamma,
            "name": self.name,
        }


class LQRPBO(PBO):
    """``Λ(G, I) = bias + slope · (G − I²/M)`` with ``slope ≈ (A², AB)`` and ``bias ≈ (Q, S)`` learned.

    Args:
      M: the Q family's fixed coefficient of a².
      init_std: std of the truncated-normal initialisation of slope and bias.
      slope: optional fixed initial slope ``[2]``; bias: optional fixed initial bias ``[2]``.
      trainable: False for the oracle.
      seed: seed of the truncated-normal initialisation (`pbo_tf.operators.base.initializer_seeds`); None
        draws from the global generator.
    """

    def __init__(
        self, M: float, init_std: float = 5e-6, slope=None, bias=None, seed: int | None = None, **kwargs
    ):
        super().__init__(2, **kwargs)
        slope_seed, bias_seed = initializer_seeds(seed, 2)
        self.M = float(M)
        self.init_std = float(init_std)
        self.slope = self.add_weight(
            name="slope",
            shape=[2],
            initializer=_initializer(slope, init_std, slope_seed),
            trainable=self.trainable,
        )
        self.bias = self.add_weight(
            name="bias",
            shape=[2],
            initializer=_initializer(bias, init_std, bias_seed),
            trainable=self.trainable,
        )

    def apply(self, params):
        c = params[:, 0] - tf.square(params[:, 1]) / self.M  # [n_w]
        return self.bias[None, :] + c[:, None] * self.slope[None, :]

    def get_config(self):
        return {"M": self.M, "init_std": self.init_std, "name": self.name}


def oracle_tabular_pbo(
    reward: np.ndarray, transitions: np.ndarray, n_actions: int, gamma: float
) -> TabularPBO:
    """The exact Bellman operator of a finite MDP as a frozen PBO.

    Args: ``reward [N|A|]``, ``transitions [N|A|, N]``, ``n_actions``, ``gamma``.
    """
    n_states = transitions.shape[1]
    return TabularPBO(
        n_states, n_actions, gamma, reward=reward, transitions=transitions, trainable=False, name="oracle_pbo"
    )


def oracle_lqr_pbo(A: float, B: float, Q: float, S: float, M: float) -> LQRPBO:
    """The paper's closed-form LQR PBO with the true constants, frozen."""
    return LQRPBO(M, slope=[A * A, A * B], bias=[Q, S], trainable=False, name="oracle_pbo")


def build_structured(
    q_family, *, problem, init_std: float = 5e-6, seed: int | None = None, name: str | None = None
) -> PBO:
    """The ``structured`` kind of `pbo_tf.operators.registry`: the problem's closed-form operator shape
    with learned coefficients, ``problem.structured_pbo(q_family, init_std, name=..., seed=...)`` (tabular
    on chain-walk, LQR on LQR); `NotImplementedError` where the problem has none."""
    kwargs = {"name": name} if name else {}
    if seed is not None:
        kwargs["seed"] = int(seed)
    return problem.structured_pbo(q_family, init_std, **kwargs)


def build_oracle(q_family, *, problem) -> PBO:
    """The ``oracle`` kind of `pbo_tf.operators.registry`: the problem's exact operator, frozen
    (``problem.oracle_pbo(q_family)``); `NotImplementedError` where the problem has none."""
    return problem.oracle_pbo(q_family)
