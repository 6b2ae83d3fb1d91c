"""The operator factory of every experiment: `make_pbo` builds the PBO ``Λ_φ`` of a gin config, `WSampler`
draws a seed's set W and ω₀.

The offline runner (`pbo_tf.experiments.runner.Experiment`: ProFQI and the oracle) and the online ProDQN
builder (`pbo_tf.agents.builders.ProDQN`) both build their operator here, so ``make_pbo.*`` bindings mean
the same in every gin file (``make_pbo.kind = 'deep'``, ``make_pbo.hidden_multiples = [2, 2, 2, 2]``). This
module binds gin at the edge of the operators; the package ``pbo_tf.operators`` does not import it.
"""

from __future__ import annotations

import gin
import numpy as np

from pbo_tf.data.w_set import OMEGA0_CHOICES, draw_w_set, mix_in_iterates
from pbo_tf.operators.deep import DeepPBO
from pbo_tf.operators.linear import LinearPBO

PBO_KINDS = ("linear", "deep", "structured", "oracle")
#: `DeepPBO`'s options and their defaults (the paper's operator); the other kinds refuse anything else.
DEEP_OPTIONS = {
    "activation": "relu",
    "kernel_init": "truncated_normal",
    "residual": False,
    "standardise": False,
}


@gin.configurable
class WSampler:
    """Draws a seed's set W ``[n, d]`` and ω₀ ``[d]`` (`pbo_tf.data.w_set.draw_w_set`) with gin's bindings
    (``WSampler.last_layer_std``, ``WSampler.omega0``); the defaults are the paper's W and ω₀.

    ``fqi_members > 0`` asks the offline runner (`pbo_tf.experiments.runner.Experiment`) to run FQI on the
    seed's dataset first (K iterations from the paper's ω₀, with the gin file's ``FQIConfig`` bindings) and
    to replace W's last ``fqi_members`` members with copies of its iterates ω_1 .. ω_K plus noise of
    relative std ``fqi_noise`` (`mix_in_iterates`): W then also holds Q-functions near those the Bellman
    iterations go through. Online runs have no dataset before training and refuse it. On car-on-hill's
    operator study (``study_fixed_point_fqi_w``: 9 of 30 members, noise 0.1, on top of the recommended
    configuration) J at K was higher and J past K lower than without it (results/operator_study); the
    shipped gin files leave it at 0.

    Raises:
      ValueError: a negative std, an unknown ω₀ choice, a negative member count or a bad noise, at
        construction.
    """

    def __init__(
        self, last_layer_std: float = 0.0, omega0: str = "paper", fqi_members: int = 0, fqi_noise: float = 0.1
    ):
        if not np.isfinite(last_layer_std) or float(last_layer_std) < 0:
            raise ValueError(f"WSampler.last_layer_std must be a finite number >= 0, got {last_layer_std}")
        if omega0 not in OMEGA0_CHOICES:
            raise ValueError(f"unknown WSampler.omega0 {omega0!r}; known: {list(OMEGA0_CHOICES)}")
        if int(fqi_members) != fqi_members or int(fqi_members) < 0:
            raise ValueError(f"WSampler.fqi_members must be an integer >= 0, got {fqi_members}")
        if not np.isfinite(fqi_noise) or float(fqi_noise) < 0:
            raise ValueError(f"WSampler.fqi_noise must be a finite number >= 0, got {fqi_noise}")
        self.last_layer_std, self.omega0 = float(last_layer_std), omega0
        self.fqi_members, self.fqi_noise = int(fqi_members), float(fqi_noise)

    def __call__(self, q_family, n: int, seed: int):
        """``(W [n, d], ω₀ [d])`` of ``seed``, as drawn (without FQI members: see `mix_in`)."""
        return draw_w_set(q_family, n, seed, last_layer_std=self.last_layer_std, omega0=self.omega0)

    def mix_in(self, w_set, iterates, seed: int):
        """W with its last ``fqi_members`` members replaced by noisy copies of ``iterates``
        (`pbo_tf.data.w_set.mix_in_iterates`); W itself when ``fqi_members == 0``."""
        return mix_in_iterates(w_set, iterates, self.fqi_members, self.fqi_noise, seed)

    def config(self) -> dict:
        """What ``metrics.json`` records of the sampler (the FQI members only when there are some)."""
        out = {"w_last_layer_std": self.last_layer_std, "omega0": self.omega0}
        if self.fqi_members:
            out.update(w_fqi_members=self.fqi_members, w_fqi_noise=self.fqi_noise)
        return out


def operator_config(pbo) -> dict:
    """What ``metrics.json`` records of an operator: its class and its `get_config` without the name."""
    return {"kind": type(pbo).__name__, **{k: v for k, v in pbo.get_config().items() if k != "name"}}


@gin.configurable
def make_pbo(
    problem,
    q_family,
    kind: str = gin.REQUIRED,
    init_std: float = 5e-6,
    hidden_multiples=None,
    hidden_units=None,
    name: str | None = None,
    compute_dtype: str | None = None,
    activation: str = "relu",
    kernel_init: str = "truncated_normal",
    residual: bool = False,
    standardise: bool = False,
    w_set=None,
    seed: int | None = None,
):
    """Builds the operator of kind ``linear``, ``deep``, ``structured`` (the problem's closed-form shape
    with learned coefficients: tabular on chain-walk, LQR on LQR) or ``oracle`` (the true operator).
    ``compute_dtype="bfloat16"`` gives the deep PBO mixed precision (`DeepPBO`); ``activation``,
    ``kernel_init``, ``residual`` and ``standardise`` are the deep PBO's options (`DeepPBO`), whose
    defaults are the paper's operator.

    Args:
      problem: the offline problem (``structured`` and ``oracle`` call its ``structured_pbo(q_family,
        init_std, name=...)`` and ``oracle_pbo(q_family)``, which raise `NotImplementedError` where it has
        no such operator), or None (online runs: ``linear`` and ``deep`` only).
      q_family: the Q family whose parameters ``ω`` (``[d]``) the operator maps.
      kind, init_std, hidden_multiples, hidden_units, compute_dtype, activation, kernel_init, residual,
        standardise: the operator (see `DeepPBO`).
      name: the operator's name.
      w_set: the set W ``[n_W, d]``; a standardised deep PBO takes its mean and std from it
        (`DeepPBO.adapt`). None leaves the standardisation to a checkpoint that restores it.
      seed: seed of the operator's random initialisation (`pbo_tf.operators.base.initializer_seeds`): the
        same seed gives the same weights whatever the global random state. None (the runners' default)
        draws from TensorFlow's global generator, which they seed with
        ``tf_keras.utils.set_random_seed(seed)`` before building. The oracle has nothing to draw.

    Raises:
      ValueError: an unknown kind, or one the problem does not have.
    """
    d = q_family.d
    kw = {"name": name} if name else {}
    if kind != "oracle" and seed is not None:
        kw["seed"] = int(seed)
    options = {"activation": activation, "kernel_init": kernel_init, "residual": residual}
    options["standardise"] = standardise
    if kind != "deep":
        changed = sorted(k for k, v in options.items() if v != DEEP_OPTIONS[k])
        if changed:
            raise ValueError(f"make_pbo.{changed[0]} is an option of the deep PBO, not of kind={kind!r}")
    if kind == "linear":
        return LinearPBO(d, init_std=init_std, **kw)
    if kind == "deep":
        pbo = DeepPBO(
            d,
            hidden_multiples=hidden_multiples,
            hidden_units=hidden_units,
            init_std=init_std,
            compute_dtype=compute_dtype,
            **options,
            **kw,
        )
        if standardise and w_set is not None:
            pbo.adapt(w_set)
        return pbo
    if kind in ("structured", "oracle") and problem is None:
        raise ValueError(
            f"kind={kind!r} needs an offline problem; the kinds of online runs: ['linear', 'deep']"
        )
    try:
        if kind == "structured":
            return problem.structured_pbo(q_family, init_std, **kw)
        if kind == "oracle":
            return problem.oracle_pbo(q_family)
    except NotImplementedError as e:
        raise ValueError(f"kind={kind!r}: {e}; the kinds every problem has: ['linear', 'deep']") from e
    raise ValueError(f"unknown PBO kind {kind!r}; known kinds: {list(PBO_KINDS)}")
