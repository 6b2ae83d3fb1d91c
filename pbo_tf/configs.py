"""The hyper-parameters of each PBO algorithm, one small config per algorithm (Acme's ``DQNConfig``).

`ProFQIConfig` (offline, `pbo_tf.trainers.ProFQITrainer`) and `ProDQNConfig` (online,
`pbo_tf.agents.ProDQNAgent`) share their fields' names and meanings (`PBOConfig`): K, the refresh schedule,
|W| and its batch, the iterations evaluated past K, the learning-rate schedule's length, compilation and the
options of the PBO loss and of Eq. (4)'s fixed-point term. A run's `pbo_tf.schedule.Schedule` is derived
from its config (`PBOConfig.schedule`). The configs are plain frozen dataclasses: the builders
(`pbo_tf.trainers.builders`, `pbo_tf.agents.builders`) bind them to gin as ``ProFQIConfig`` and
``ProDQNConfig``, so one macro (``REFRESHES``, ``W_SIZE``, ...) binds the same field offline and online.

The steps between two refreshes keep their unit in their name: offline ``passes_per_refresh`` counts full
passes over the dataset (each ``|D| / batch_size × |W| / w_batch_size`` Adam steps), online
``train_steps_per_refresh`` counts training steps (one replay batch, ``ceil(|W| / w_batch_size)`` Adam steps).
"""

from __future__ import annotations

import dataclasses

from pbo_tf.losses import PBOLoss
from pbo_tf.schedule import Schedule


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


@dataclasses.dataclass(frozen=True)
class PBOConfig:
    """The fields ProFQI and ProDQN share (see the module docstring).

    Attributes:
      K: Bellman iterations in the loss (and PBO applications of ProDQN's policy).
      refreshes: target refreshes ``φ̄ ← φ`` (the paper's #epochs E, Algorithm 1's outer loop).
      w_size: size of the set W.
      w_batch_size: rows of W per Adam step (None: all of W). Offline it must divide ``w_size``; online the
        last batch is smaller when it does not (as the reference's loader).
      extra_iterations: the curve evaluates k = 0 .. K + extra_iterations.
      lr_schedule_counts_w_batches: the learning rate anneals over every Adam step of the run; False (the
        reference's count) anneals over the steps between refreshes, ignoring the W batches, so with
        several W batches the rate reaches its end value early and stays there.
      jit_compile: XLA compilation (ProFQI: False, True or ``"round"``; ProDQN: False or True).
      normalisation, stop_gradient_between, fixed_point_term, fixed_point_weight, fixed_point_balance: the
        loss's options (`pbo_tf.losses.PBOLoss`).
      fixed_point_iterations, fixed_point_radius, fixed_point_from, fixed_point_at, fixed_point_warmup: where
        Eq. (4)'s term is taken (`pbo_tf.learner.PBOLearner`).
    """

    K: int
    refreshes: int
    w_size: int = 1
    w_batch_size: int | None = None
    extra_iterations: int = 10
    lr_schedule_counts_w_batches: bool = False
    jit_compile: bool | str = False
    normalisation: str = "mean"
    stop_gradient_between: bool = False
    fixed_point_term: bool = False
    fixed_point_weight: float = 1.0
    fixed_point_balance: bool = False
    fixed_point_iterations: int = 0
    fixed_point_radius: float | None = None
    fixed_point_from: str = "omega0"
    fixed_point_at: str = "last"
    fixed_point_warmup: float = 0.0

    #: The field of the steps between two refreshes (`passes_per_refresh` or `train_steps_per_refresh`).
    steps_field = ""
    #: The values ``jit_compile`` may take.
    jit_modes = (False, True)

    def __post_init__(self):
        name = type(self).__name__
        ints = {"K": 1, "refreshes": 1, "w_size": 1, "extra_iterations": 0, "fixed_point_iterations": 0}
        ints[self.steps_field] = 1
        for field, low in ints.items():
            object.__setattr__(self, field, _check_int(f"{name}.{field}", getattr(self, field), low))
        if self.w_batch_size is not None:
            size = _check_int(f"{name}.w_batch_size", self.w_batch_size, 1)
            if size > self.w_size:
                raise ValueError(f"{name}.w_batch_size must lie in [1, w_size={self.w_size}], got {size}")
            object.__setattr__(self, "w_batch_size", size)
        if not any(self.jit_compile is mode or self.jit_compile == mode for mode in self.jit_modes) or (
            isinstance(self.jit_compile, (int, float)) and not isinstance(self.jit_compile, bool)
        ):
            raise ValueError(f"{name}.jit_compile must be one of {self.jit_modes}, got {self.jit_compile!r}")
        self.loss(gamma=0.5)  # the loss's options, checked (one line naming the option)

    @property
    def steps_per_refresh(self) -> int:
        """The steps between two refreshes, in the config's unit (passes over D or training steps)."""
        return getattr(self, self.steps_field)

    @property
    def w_batches(self) -> int:
        """Adam steps per W pass: ``ceil(w_size / w_batch_size)``."""
        return -(-self.w_size // (self.w_batch_size or self.w_size))

    def schedule(self) -> Schedule:
        """The run's `Schedule`: K, the curve's length and the refresh schedule."""
        return Schedule(
            K=self.K,
            extra_iterations=self.extra_iterations,
            refreshes=self.refreshes,
            steps_per_refresh=self.steps_per_refresh,
        )

    def loss(self, gamma: float) -> PBOLoss:
        """The loss object of these options at discount ``gamma``."""
        return PBOLoss(
            gamma=gamma,
            normalisation=self.normalisation,
            stop_gradient_between=self.stop_gradient_between,
            fixed_point_term=self.fixed_point_term,
            fixed_point_weight=self.fixed_point_weight,
            fixed_point_balance=self.fixed_point_balance,
        )

    def fixed_point_options(self) -> dict:
        """The `pbo_tf.learner.PBOLearner` arguments of Eq. (4)'s term."""
        return {
            "fixed_point_iterations": self.fixed_point_iterations,
            "fixed_point_radius": self.fixed_point_radius,
            "fixed_point_from": self.fixed_point_from,
            "fixed_point_at": self.fixed_point_at,
            "fixed_point_warmup": self.fixed_point_warmup,
        }


@dataclasses.dataclass(frozen=True)
class ProFQIConfig(PBOConfig):
    """ProFQI's config (paper Algorithm 1 offline, `pbo_tf.trainers.ProFQITrainer`): `PBOConfig`'s fields and

    Attributes:
      passes_per_refresh: full shuffled passes over the dataset between two refreshes (the paper's
        #training steps); each makes one Adam step per batch of W per batch of D.
      batch_size: transitions per gradient step.
      cache_targets: compute the target chain's Bellman targets on the whole dataset once per refresh (True)
        or the chain and the batch's targets at every step (False); the same loss.
      omega0_chain_rows: 0 (default): the W batches hold W's rows only. n > 0: at every refresh ω₀'s chain
        points ``Λ̄^j(ω₀)``, j = 1..n, of that refresh's target operator join every W batch, so Eq. (3)'s
        terms are also taken along ω₀'s own chain, up to ``Λ̄^{n+K−1}(ω₀)`` (`pbo_tf.learner.PBOLearner`).
      monitor_every: refreshes between two calls of the operator monitor.
      checkpoint_every_s, progress_every_s: seconds between checkpoints and between progress lines.
    """

    passes_per_refresh: int = 1
    batch_size: int = 1
    cache_targets: bool = True
    omega0_chain_rows: int = 0
    monitor_every: int = 10
    checkpoint_every_s: float = 60.0
    progress_every_s: float = 10.0

    steps_field = "passes_per_refresh"
    jit_modes = (False, True, "round")

    def __post_init__(self):
        super().__post_init__()
        for field in ("batch_size", "monitor_every"):
            object.__setattr__(self, field, _check_int(f"ProFQIConfig.{field}", getattr(self, field), 1))
        rows = _check_int("ProFQIConfig.omega0_chain_rows", self.omega0_chain_rows, 0)
        object.__setattr__(self, "omega0_chain_rows", rows)
        if self.w_batch_size is not None and self.w_size % self.w_batch_size:
            raise ValueError(
                f"ProFQIConfig.w_batch_size={self.w_batch_size} must divide the size of W "
                f"(w_size={self.w_size})"
            )


@dataclasses.dataclass(frozen=True)
class ProDQNConfig(PBOConfig):
    """ProDQN's config (paper Algorithm 1 online, `pbo_tf.agents.ProDQNAgent`): `PBOConfig`'s fields and

    Attributes:
      train_steps_per_refresh: training steps between two target refreshes (the paper's #training steps).
      target_update_tau: Polyak factor of the refresh (1 = the paper's hard copy).
      cache_target_chain: with hard refreshes, keep the target chain of all of W in a variable between two
        refreshes instead of applying ``φ̄`` K − 1 times per Adam step (the same loss).
      cache_omega_k: the policies' network keeps ``Λ_φ^k(ω_0)`` in a variable, refreshed after every
        training step, so acting does not apply the PBO k times per environment step.
      gradient_clipping: clip the gradients' global norm to this value at every Adam step (None: no clipping).
    """

    train_steps_per_refresh: int = 1
    target_update_tau: float = 1.0
    cache_target_chain: bool = False
    cache_omega_k: bool = True
    gradient_clipping: float | None = None

    steps_field = "train_steps_per_refresh"

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 < float(self.target_update_tau) <= 1.0:
            raise ValueError(
                f"ProDQNConfig.target_update_tau must lie in (0, 1], got {self.target_update_tau}"
            )
        if self.fixed_point_warmup:
            raise ValueError(
                "ProDQNConfig.fixed_point_warmup must be 0: the warm-up counts offline refreshes"
            )

    @property
    def total_train_steps(self) -> int:
        """``refreshes × train_steps_per_refresh``."""
        return self.refreshes * self.train_steps_per_refresh

    @property
    def lr_schedule_steps(self) -> int:
        """The Adam steps the learning rate anneals over (see ``lr_schedule_counts_w_batches``)."""
        return self.total_train_steps * (self.w_batches if self.lr_schedule_counts_w_batches else 1)
