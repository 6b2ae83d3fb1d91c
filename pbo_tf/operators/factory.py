"""The operator factory of every experiment: `make_pbo` builds the PBO ``Λ_φ`` of a gin config, `WSampler`
draws a seed's set W and ω₀.

The offline runner (`pbo_tf.experiments.runner.Experiment`: ProFQI and the oracle) and the online ProDQN
builder (`pbo_tf.agents.builders.ProDQN`) both build their operator here, so ``make_pbo.*`` bindings mean
the same in every gin file (``make_pbo.kind = 'deep'``, ``make_pbo.hidden_multiples = [2, 2, 2, 2]``). The
kinds are those of `pbo_tf.operators.registry`, pbo_tf's and those other modules register. This module binds
gin at the edge of the operators; the package ``pbo_tf.operators`` does not import it.
"""

from __future__ import annotations

import gin
import numpy as np

from pbo_tf.data.w_set import OMEGA0_CHOICES, draw_w_set, mix_in_iterates
from pbo_tf.operators import registry
from pbo_tf.operators.conv import build_conv
from pbo_tf.operators.equivariant import build_equivariant

#: The arguments `make_pbo` passes a builder itself, which gin does not bind on the kinds' configurables.
_PASSED = ["q_family", "init_std", "seed", "name"]
# The builders of the kinds ``conv`` and ``equivariant`` (registered by `pbo_tf.operators.registry`, which
# names these two), each with its options on a gin configurable of its own: ``ConvPBO.channels``
# (`pbo_tf.operators.conv.ConvPBO`, the reference's ``--conv``), ``EquivariantPBO.channels``
# (`pbo_tf.operators.equivariant.EquivariantPBO`).
conv_builder = gin.external_configurable(build_conv, name="ConvPBO", module="pbo_tf", denylist=_PASSED)
equivariant_builder = gin.external_configurable(
    build_equivariant, name="EquivariantPBO", module="pbo_tf", denylist=[*_PASSED, "w_set"]
)

# Every kind another package declares through its entry point (`registry.ENTRY_POINT_GROUP`) is registered
# now, so its gin configurables exist before a gin file (a run's config.gin too) binds them.
registry.load_entry_points()

#: The built-in kinds (`pbo_tf.operators.registry.names` lists every registered one).
PBO_KINDS = ("linear", "deep", "structured", "oracle", "conv", "equivariant")
#: `DeepPBO`'s options that `make_pbo` refuses for a kind that does not take them, with their defaults
#: (the paper's operator).
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
    """Builds the operator of the registered kind ``kind`` (`pbo_tf.operators.registry.build`): ``linear``,
    ``deep``, ``structured`` (the problem's closed-form shape with learned coefficients: tabular on
    chain-walk, LQR on LQR), ``oracle`` (the true operator), ``conv`` (the reference's convolutional PBO,
    options ``ConvPBO.*``), ``equivariant`` (the permutation-equivariant PBO of MLP families, options
    ``EquivariantPBO.*``), or a kind another module registers, whose own options are bound on its own gin
    configurable (``MyPBO.rank = 4``).

    ``hidden_multiples``, ``hidden_units``, ``compute_dtype`` (``"bfloat16"``: mixed precision),
    ``activation``, ``kernel_init``, ``residual`` and ``standardise`` are the deep PBO's options
    (`DeepPBO`), whose defaults are the paper's operator; each reaches the kinds that declare it
    (`OperatorKind.options`). The last four, changed from their defaults, are refused for any other kind;
    the sizes are left aside, so a gin file can switch the kind of a deep one (``lqr/profqi_lqr.gin``).

    Args:
      problem: the offline problem (``structured`` and ``oracle`` call its ``structured_pbo(q_family,
        init_std, name=...)`` and ``oracle_pbo(q_family)``, which raise `NotImplementedError` where it has
        no such operator), or None (online runs: the kinds that need no problem).
      q_family: the Q family whose parameters ``ω`` (``[d]``) the operator maps; the operator is built
        with it and may read its structure (`pbo_tf.q.FlatMLPQ.layout`).
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
      ValueError: an unknown kind (naming the registered ones), one the problem does not have, one that
        needs another Q family, or a deep option given to another kind.
    """
    entry = registry.kind(kind)
    given = dict(
        hidden_multiples=hidden_multiples,
        hidden_units=hidden_units,
        compute_dtype=compute_dtype,
        activation=activation,
        kernel_init=kernel_init,
        residual=residual,
        standardise=standardise,
    )
    changed = sorted(k for k, v in DEEP_OPTIONS.items() if v != given[k] and k not in entry.options)
    if changed:
        raise ValueError(f"make_pbo.{changed[0]} is an option of the deep PBO, not of kind={kind!r}")
    options = {k: v for k, v in given.items() if k in entry.options}
    return registry.build(
        kind, q_family, problem=problem, init_std=init_std, seed=seed, name=name, w_set=w_set, **options
    )
