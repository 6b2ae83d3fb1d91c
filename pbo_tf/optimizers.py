"""Adam as the PBO reference implementation applies it, and the linear learning-rate schedule.

The reference (optax.adam) updates a parameter with

    m̂ = m / (1 − β1^t),  v̂ = v / (1 − β2^t),  θ ← θ − lr · m̂ / (√v̂ + ε),   ε = 1e-8,

that is, ε is added after the bias correction. Keras (the new-style `tf_keras.optimizers.Adam` and the fused
`tf_keras.optimizers.legacy.Adam`, TensorFlow's ``ResourceApplyAdam`` kernel) computes

    θ ← θ − lr · √(1 − β2^t) / (1 − β1^t) · m / (√v + ε),      ε = 1e-7 by default,

which is the same update with ``ε / √(1 − β2^t)`` in place of ε after the bias correction. The two differ
where ``√v̂`` is not large against ε, i.e. while the gradients are tiny, which is the case of a PBO
initialised with a std of 5e-7 (appendix Tables 1-2). `make_adam` gives either placement, with the
new-style optimizer or the fused kernel.
"""

from __future__ import annotations

import gin
import tensorflow as tf
import tf_keras

EPSILON_PLACEMENTS = ("reference", "keras")


def linear_schedule(
    start: float, end: float, steps: int
) -> tf_keras.optimizers.schedules.LearningRateSchedule:
    """Learning rate annealed linearly from ``start`` to ``end`` over ``steps`` optimizer steps, then flat."""
    return tf_keras.optimizers.schedules.PolynomialDecay(
        initial_learning_rate=start, decay_steps=max(int(steps), 1), end_learning_rate=end, power=1.0
    )


class ReferenceAdam(tf_keras.optimizers.Adam):
    """New-style Keras Adam with ε added after the bias correction (optax's update, see the module docstring).

    Keras' ``adaptive_epsilon`` option scales ε by ``√(1 − β2^t)`` inside `update_step`, for dense and
    `tf.IndexedSlices` gradients alike; this class turns it on and defaults ε to the reference's 1e-8. Its
    variables (``iterations``, the ``m`` and ``v`` moments) are those of `tf_keras.optimizers.Adam`.
    """

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8, name="Adam", **kwargs):
        super().__init__(
            learning_rate=learning_rate,
            beta_1=beta_1,
            beta_2=beta_2,
            epsilon=epsilon,
            adaptive_epsilon=True,
            name=name,
            **kwargs,
        )


class FusedReferenceAdam(tf_keras.optimizers.legacy.Adam):
    """TensorFlow's fused ``ResourceApplyAdam`` kernel with ε added after the bias correction.

    The kernel adds its ``epsilon`` input to ``√v`` before the bias correction; passing ``ε · √(1 − β2^t)``
    makes its update ``lr · m̂ / (√v̂ + ε)`` exactly. `_prepare_local` scales the epsilon of the per-step
    coefficients, which the dense (fused) and the sparse update both read. Slots (``m``, ``v``) and
    ``iterations`` are those of `tf_keras.optimizers.legacy.Adam`.
    """

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8, name="Adam", **kwargs):
        super().__init__(
            learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, name=name, **kwargs
        )

    def _prepare_local(self, var_device, var_dtype, apply_state):
        super()._prepare_local(var_device, var_dtype, apply_state)
        coefficients = apply_state[(var_device, var_dtype)]
        coefficients["epsilon"] = coefficients["epsilon"] * tf.sqrt(1.0 - coefficients["beta_2_power"])


def make_adam(
    learning_rate, *, epsilon: float = 1e-8, epsilon_placement: str = "reference", fused: bool = False
):
    """Adam with ε placed as the reference implementation places it (default) or as Keras does.

    With ``epsilon_placement="keras"`` the ε in the bias-corrected update is ``ε / √(1 − β2^t)``: 31.6 ε at
    step 1, 10 ε at step 10 and 1.26 ε at step 1000, so on gradients of 1e-9 Keras' default (ε = 1e-7) makes
    a first step 288 times smaller than the reference's (ε = 1e-8, ``"reference"``), as
    ``tests/test_optimizers.py`` measures.

    Args:
      learning_rate: a positive float, or a `tf_keras` learning-rate schedule (e.g. `linear_schedule`)
        evaluated at the optimizer's step count (0 at the first update).
      epsilon: ε (the reference's is 1e-8; Keras' default 1e-7).
      epsilon_placement: ``"reference"``: ``lr · m̂ / (√v̂ + ε)`` (optax); ``"keras"``:
        ``lr · √(1 − β2^t) / (1 − β1^t) · m / (√v + ε)``.
      fused: True gives TensorFlow's fused ``ResourceApplyAdam`` kernel (`tf_keras.optimizers.legacy.Adam`:
        one pass over each variable and its two moments, the faster update outside XLA); False the
        new-style `tf_keras.optimizers.Adam`. Their checkpoints differ: a run resumes with the kind it started
        with.

    Returns:
      The optimizer: `ReferenceAdam` / `FusedReferenceAdam` for the reference placement, the plain Keras
      classes for the Keras placement.

    Raises:
      ValueError: for a non-positive learning rate or ε, or an unknown placement.
    """
    if epsilon_placement not in EPSILON_PLACEMENTS:
        raise ValueError(
            f"epsilon_placement must be one of {list(EPSILON_PLACEMENTS)}, got {epsilon_placement!r}"
        )
    if not float(epsilon) > 0.0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if not callable(learning_rate) and not float(learning_rate) > 0.0:
        raise ValueError(f"learning_rate must be > 0 or a LearningRateSchedule, got {learning_rate}")
    epsilon = float(epsilon)
    if epsilon_placement == "reference":
        kind = FusedReferenceAdam if fused else ReferenceAdam
        return kind(learning_rate=learning_rate, epsilon=epsilon)
    if fused:
        return tf_keras.optimizers.legacy.Adam(learning_rate=learning_rate, epsilon=epsilon)
    return tf_keras.optimizers.Adam(learning_rate=learning_rate, epsilon=epsilon)


def current_learning_rate(optimizer) -> float:
    """The learning rate an optimizer of `make_adam` is at: the rate of its last step (new-style Adam),
    or its schedule at its step count (the fused legacy Adam)."""
    rate = optimizer.learning_rate
    if isinstance(rate, tf_keras.optimizers.schedules.LearningRateSchedule):
        rate = rate(optimizer.iterations)
    return float(tf.convert_to_tensor(rate).numpy())


@gin.configurable
class AnnealedAdam:
    """Adam (`make_adam`) with its learning rate annealed linearly over a run: the optimizer of every
    trainer and agent (gin: ``AnnealedAdam.lr_start = ...``; the builders make it, the runners for the
    agents).
    The trainer or agent calls it with the schedule's length (`resolve_optimizer`): FQI one iteration's
    Adam steps, ProFQI the run's (counted as `pbo_tf.trainers.profqi` says), the agents their
    ``lr_schedule_steps`` argument (the online runs count it as `pbo_tf.agents.builders` says). Each of
    them also takes a plain tf_keras optimizer in its place (`check_optimizer`).

    Args:
      lr_start, lr_end: the learning rate, from ``lr_start`` to ``lr_end`` over the schedule's steps.
      epsilon, epsilon_placement: Adam's ε and where it goes: ``"reference"`` adds it after the bias
        correction (optax, the reference), ``"keras"`` before it.
      fused: TensorFlow's fused Adam kernel: the same update in one pass over each variable, for large
        operators trained outside XLA (Lunar Lander's PBO).
    """

    def __init__(
        self,
        lr_start: float = 1e-3,
        lr_end: float = 1e-5,
        epsilon: float = 1e-8,
        epsilon_placement: str = "reference",
        fused: bool = False,
    ):
        if epsilon_placement not in EPSILON_PLACEMENTS:
            raise ValueError(
                f"epsilon_placement must be one of {list(EPSILON_PLACEMENTS)}, got {epsilon_placement!r}"
            )
        self.lr_start, self.lr_end = float(lr_start), float(lr_end)
        self.epsilon, self.epsilon_placement, self.fused = float(epsilon), epsilon_placement, bool(fused)

    def __call__(self, schedule_steps: int):
        """``(optimizer, learning-rate schedule)`` annealed over ``schedule_steps`` Adam steps."""
        schedule = linear_schedule(self.lr_start, self.lr_end, schedule_steps)
        optimizer = make_adam(
            schedule, epsilon=self.epsilon, epsilon_placement=self.epsilon_placement, fused=self.fused
        )
        return optimizer, schedule


#: The optimizers a trainer or agent steps as given: the new-style and the legacy (fused) Keras classes.
KERAS_OPTIMIZERS = (tf_keras.optimizers.Optimizer, tf_keras.optimizers.legacy.Optimizer)


def check_optimizer(optimizer) -> None:
    """Raises `TypeError` unless ``optimizer`` is an `AnnealedAdam` or a tf_keras optimizer.

    Every trainer and agent takes its ``optimizer`` argument in one of these two forms.
    """
    if not isinstance(optimizer, (AnnealedAdam, *KERAS_OPTIMIZERS)):
        raise TypeError(
            f"optimizer must be an AnnealedAdam or a tf_keras optimizer, got {type(optimizer).__name__}"
        )


def resolve_optimizer(optimizer, schedule_steps: int | None):
    """The optimizer a trainer or agent steps, and its learning-rate schedule.

    Args:
      optimizer: an `AnnealedAdam`, called with ``schedule_steps``, or a tf_keras optimizer, used as given
        (its own learning rate, constant or scheduled).
      schedule_steps: the Adam steps over which an `AnnealedAdam` anneals (the caller's run length); None
        is allowed for a tf_keras optimizer only.

    Returns:
      ``(optimizer, schedule)``: the `AnnealedAdam`'s linear schedule, or None for a tf_keras optimizer.

    Raises:
      TypeError: any other kind of ``optimizer`` (`check_optimizer`).
      ValueError: an `AnnealedAdam` without ``schedule_steps``.
    """
    check_optimizer(optimizer)
    if not isinstance(optimizer, AnnealedAdam):
        return optimizer, None
    if schedule_steps is None:
        raise ValueError("an AnnealedAdam optimizer needs lr_schedule_steps, the Adam steps it anneals over")
    return optimizer(int(schedule_steps))


def build_optimizer(optimizer, variables) -> None:
    """Creates the step count and the moments of a tf_keras optimizer for ``variables`` now, so that a
    checkpoint restores them before the first step (new-style ``build``; the legacy classes' own
    ``_create_all_weights``, which their first step would call)."""
    if isinstance(optimizer, tf_keras.optimizers.legacy.Optimizer):
        optimizer._create_all_weights(list(variables))  # noqa: SLF001 (the legacy class has no public build)
    else:
        optimizer.build(list(variables))


def optimizer_variables(optimizer) -> list[tf.Variable]:
    """The state of a tf_keras optimizer (step count and moments), new-style or legacy."""
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)
