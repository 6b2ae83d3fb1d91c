"""The hyper-parameters of each algorithm, one small config per algorithm (Acme's ``DQNConfig``).

Offline: `FQIConfig`, `IFQIConfig`, `ProFQIConfig` and `OracleConfig` (nothing trained); online:
`DQNConfig`, `IDQNConfig` and `ProDQNConfig`. A quantity has the same field name and meaning in every config
that has it: K, the refreshes, the iterations evaluated past K (``extra_iterations``), the batch size and
compilation (``jit_compile``). The two PBO configs share `PBOConfig`: |W| and its batch, the learning-rate
schedule's length and the terms of the PBO loss (`pbo_tf.loss_terms`). A run's
`pbo_tf.schedule.Schedule` is derived from its config (``config.schedule()``). The configs are plain frozen
dataclasses that check their fields (a one-line `ValueError` naming the field); the builders
(`pbo_tf.trainers.builders`, `pbo_tf.agents.builders`) bind them to gin under their class names, so one
macro (``K``, ``REFRESHES``, ``W_SIZE``, ...) binds the same field offline and online.

The steps between two refreshes keep their unit in their name: offline ``passes_per_refresh`` counts full
passes over the dataset (each ``|D| / batch_size × |W| / w_batch_size`` Adam steps), online
``train_steps_per_refresh`` counts training steps (one replay batch, ``ceil(|W| / w_batch_size)`` Adam steps).
"""

from __future__ import annotations

import dataclasses

from pbo_tf.loss_terms import PAPER_TERMS, check_terms
from pbo_tf.schedule import Schedule


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _check_fields(config, ints: dict[str, int], jit_modes: tuple) -> None:
    """Checks (and stores as int) ``config``'s integer fields against their lower bounds and its
    ``jit_compile`` against ``jit_modes``; raises `ValueError` naming the field."""
    name = type(config).__name__
    for field, low in ints.items():
        object.__setattr__(config, field, _check_int(f"{name}.{field}", getattr(config, field), low))
    mode = config.jit_compile
    if not any(mode is m or mode == m for m in jit_modes) or (
        isinstance(mode, (int, float)) and not isinstance(mode, bool)
    ):
        raise ValueError(f"{name}.jit_compile must be one of {jit_modes}, got {mode!r}")


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
      loss_terms: the terms of the PBO loss, in order (`pbo_tf.loss_terms`; default the paper's Eq. 3
        alone, ``[BellmanTerm()]``; ``[@BellmanTerm(), @FixedPointTerm()]`` adds Eq. 4's term).
    """

    K: int
    refreshes: int
    w_size: int = 1
    w_batch_size: int | None = None
    extra_iterations: int = 10
    lr_schedule_counts_w_batches: bool = False
    jit_compile: bool | str = False
    loss_terms: tuple = PAPER_TERMS

    #: The field of the steps between two refreshes (`passes_per_refresh` or `train_steps_per_refresh`).
    steps_field = ""
    #: The values ``jit_compile`` may take.
    jit_modes = (False, True)

    def __post_init__(self):
        ints = {"K": 1, "refreshes": 1, "w_size": 1, "extra_iterations": 0}
        _check_fields(self, {**ints, self.steps_field: 1}, self.jit_modes)
        if self.w_batch_size is not None:
            name = type(self).__name__
            size = _check_int(f"{name}.w_batch_size", self.w_batch_size, 1)
            if size > self.w_size:
                raise ValueError(f"{name}.w_batch_size must lie in [1, w_size={self.w_size}], got {size}")
            object.__setattr__(self, "w_batch_size", size)
        object.__setattr__(
            self, "loss_terms", check_terms(self.loss_terms, f"{type(self).__name__}.loss_terms")
        )

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

    def schedule(self) -> Schedule:
        """The run's `Schedule`: K, the curve's length and the refreshes; the trainer sets its Adam steps per
        refresh once it knows the dataset (`pbo_tf.schedule.Schedule.with_steps_per_refresh`)."""
        return Schedule(K=self.K, extra_iterations=self.extra_iterations, refreshes=self.refreshes)

    def __post_init__(self):
        super().__post_init__()
        for field, low in (("batch_size", 1), ("monitor_every", 1), ("omega0_chain_rows", 0)):
            object.__setattr__(self, field, _check_int(f"ProFQIConfig.{field}", getattr(self, field), low))
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
        if any(getattr(term, "warmup", 0) for term in self.loss_terms):
            raise ValueError(
                "FixedPointTerm.warmup must be 0 for ProDQN: the warm-up counts offline refreshes"
            )

    @property
    def total_train_steps(self) -> int:
        """``refreshes × train_steps_per_refresh``, the run's `Schedule`'s."""
        return self.schedule().total_steps

    @property
    def lr_schedule_steps(self) -> int:
        """The Adam steps the learning rate anneals over (see ``lr_schedule_counts_w_batches``)."""
        return self.total_train_steps * (self.w_batches if self.lr_schedule_counts_w_batches else 1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _FittedConfig:
    """The fields FQI and i-FQI share (every field a keyword).

    Attributes:
      K: Bellman iterations.
      batch_size: transitions per gradient step.
      extra_iterations: the curve has entries k = 0 .. K + extra_iterations (these algorithms have no
        iterate past K: those entries are null), so their tables line up with the operators'.
      jit_compile: False, True (XLA on each gradient step) or ``"round"`` (XLA on each whole round).
      cache_targets: compute each round's Bellman targets once on the whole dataset (True) or on every
        batch (False); the same iterates.
      checkpoint_every_s, progress_every_s: seconds between checkpoints and between progress lines (0:
        after every round).
    """

    K: int
    batch_size: int
    extra_iterations: int = 10
    jit_compile: bool | str = False
    cache_targets: bool = True
    checkpoint_every_s: float = 0.0
    progress_every_s: float = 0.0

    #: The integer fields of the subclass and their lower bounds.
    counts = ()

    def __post_init__(self):
        ints = {"K": 1, "batch_size": 1, "extra_iterations": 0, **dict.fromkeys(self.counts, 1)}
        _check_fields(self, ints, (False, True, "round"))

    def schedule(self) -> Schedule:
        """The run's `Schedule`: K and the curve's length."""
        return Schedule(K=self.K, extra_iterations=self.extra_iterations)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FQIConfig(_FittedConfig):
    """FQI's config (`pbo_tf.trainers.FQITrainer`, and the Q*-fit reference `FitOptimum` that trains like it):
    the shared fields (K fitted Q iterations, batch size, the curve's length, compilation with ``"round"`` an
    iteration with its early stopping, target caching, the checkpoint and progress periods) and

    Attributes:
      max_epochs: maximum epochs (full shuffled passes over the dataset) per iteration.
      patience: epochs without an improvement of the epoch loss before an iteration stops.
    """

    max_epochs: int
    patience: int

    counts = ("max_epochs", "patience")


@dataclasses.dataclass(frozen=True, kw_only=True)
class IFQIConfig(_FittedConfig):
    """i-FQI's config (`pbo_tf.trainers.ifqi.IFQITrainer`, the reference code's iterated offline baseline):
    the shared fields (K Bellman iterations learned at once in K + 1 heads, batch size, the curve's length,
    compilation with ``"round"`` a refresh with all its passes, target caching, the checkpoint and progress
    periods) and

    Attributes:
      refreshes: target refreshes ``θ̄ ← θ``.
      passes_per_refresh: full shuffled passes over the dataset between two refreshes, one Adam step per
        batch; the learning rate anneals over the whole run's steps.
    """

    refreshes: int
    passes_per_refresh: int

    counts = ("refreshes", "passes_per_refresh")

    def schedule(self) -> Schedule:
        """The run's `Schedule`: K, the curve's length and the refreshes; the trainer sets its Adam steps per
        refresh once it knows the dataset (`pbo_tf.schedule.Schedule.with_steps_per_refresh`)."""
        return Schedule(K=self.K, extra_iterations=self.extra_iterations, refreshes=self.refreshes)


@dataclasses.dataclass(frozen=True)
class OracleConfig:
    """The exact projected Bellman operator's config (`pbo_tf.trainers.builders.Oracle`, nothing trained).

    Attributes:
      K: where the curve's "at K" entry is.
      extra_iterations: the curve applies the operator k = 0 .. K + extra_iterations times.
    """

    K: int
    extra_iterations: int = 10
    jit_compile = False

    def __post_init__(self):
        _check_fields(self, {"K": 1, "extra_iterations": 0}, (False,))

    def schedule(self) -> Schedule:
        """The run's `Schedule`: K and the curve's length."""
        return Schedule(K=self.K, extra_iterations=self.extra_iterations)


#: The TD-error losses DQN takes (`DQNConfig.td_loss`; `pbo_tf.agents.dqn` maps them to TF-Agents').
DQN_TD_LOSSES = ("squared", "huber")


def _check_clipping(config) -> None:
    clip = config.gradient_clipping
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or clip <= 0):
        raise ValueError(f"{type(config).__name__}.gradient_clipping must be None or > 0, got {clip!r}")


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """DQN's config (TF-Agents' ``DqnAgent``, `pbo_tf.agents.make_dqn_agent`): K hard target updates, one
    every ``train_steps_per_refresh`` training steps of one gradient step each.

    Attributes:
      K: target updates (DQN's refreshes).
      train_steps_per_refresh: training steps between two target updates (the paper's fitting steps).
      jit_compile: compile ``agent.train`` with XLA (the agent's own summaries are then off).
      target_update_tau: Polyak factor of the target update (1 = the paper's hard copy).
      gradient_clipping: clip the gradients' norm to this value (None: no clipping).
      td_loss: the per-sample loss of the TD error, ``"squared"`` (the paper's regression loss, as
        `pbo_tf.losses.fqi_loss`) or ``"huber"`` (quadratic within 1 of the target, linear beyond:
        TF-Agents' ``DqnAgent`` default, SB3's DQN).
    """

    K: int
    train_steps_per_refresh: int
    jit_compile: bool = False
    target_update_tau: float = 1.0
    gradient_clipping: float | None = None
    td_loss: str = "squared"

    def __post_init__(self):
        _check_fields(self, {"K": 1, "train_steps_per_refresh": 1}, (False, True))
        if not 0.0 < float(self.target_update_tau) <= 1.0:
            raise ValueError(f"DQNConfig.target_update_tau must lie in (0, 1], got {self.target_update_tau}")
        _check_clipping(self)
        if self.td_loss not in DQN_TD_LOSSES:
            raise ValueError(f"DQNConfig.td_loss must be one of {list(DQN_TD_LOSSES)}, got {self.td_loss!r}")

    @property
    def refreshes(self) -> int:
        """DQN's refreshes are its K target updates."""
        return self.K

    def schedule(self) -> Schedule:
        """The run's `Schedule`: K target updates, ``train_steps_per_refresh`` training steps apart."""
        return Schedule(K=self.K, refreshes=self.K, steps_per_refresh=self.train_steps_per_refresh)


@dataclasses.dataclass(frozen=True)
class IDQNConfig:
    """i-DQN's config (`pbo_tf.agents.idqn.IDQNAgent`, the reference code's iterated online baseline).

    Attributes:
      K: Bellman iterations learned at once (K + 1 heads).
      refreshes: target refreshes ``θ̄ ← θ``.
      train_steps_per_refresh: training steps (one Adam step each) between two refreshes.
      jit_compile: compile ``agent.train`` with XLA.
      gradient_clipping: clip the gradients' global norm to this value (None: no clipping).
    """

    K: int
    refreshes: int
    train_steps_per_refresh: int
    jit_compile: bool = False
    gradient_clipping: float | None = None

    def __post_init__(self):
        _check_fields(self, {"K": 1, "refreshes": 1, "train_steps_per_refresh": 1}, (False, True))
        _check_clipping(self)

    def schedule(self) -> Schedule:
        """The run's `Schedule`: K heads, ``refreshes`` refreshes ``train_steps_per_refresh`` steps apart."""
        return Schedule(K=self.K, refreshes=self.refreshes, steps_per_refresh=self.train_steps_per_refresh)
