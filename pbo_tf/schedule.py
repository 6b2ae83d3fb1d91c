"""`Schedule`: K and the refresh schedule of one run, computed once by the runner and handed to its algorithm.

Each algorithm's config (`pbo_tf.configs`) derives its run's `Schedule` (DQN's refreshes are its K target
updates); the offline runner (`pbo_tf.experiments.runner.Experiment`), the online one
(`pbo_tf.experiments.online.OnlineExperiment`) and the algorithm's builder read K, the refreshes and the
curve's length from it and nowhere else.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Schedule:
    """K and the refresh schedule of one run.

    Attributes:
      K: Bellman iterations (FQI iterations, terms of the PBO loss, DQN target updates).
      extra_iterations: the curve evaluates k = 0 .. K + extra_iterations (operators only: FQI and DQN have
        no iterate beyond K).
      refreshes: target refreshes (None for FQI and the oracle, which have none).
      steps_per_refresh: training steps between two refreshes (online), or Adam steps (offline, where the
        trainer completes its schedule once it knows the dataset's size: `with_steps_per_refresh`); None
        until known.
    """

    K: int
    extra_iterations: int = 0
    refreshes: int | None = None
    steps_per_refresh: int | None = None

    def __post_init__(self):
        checks = {"K": (self.K, 1), "extra_iterations": (self.extra_iterations, 0)}
        checks.update(refreshes=(self.refreshes, 1), steps_per_refresh=(self.steps_per_refresh, 1))
        for key, (value, low) in checks.items():
            if value is None and key in ("refreshes", "steps_per_refresh"):
                continue
            if isinstance(value, bool) or int(value) != value or int(value) < low:
                raise ValueError(f"{key} must be an integer >= {low}, got {value!r}")
            object.__setattr__(self, key, int(value))

    @property
    def n_curve_points(self) -> int:
        """The curve's entries, k = 0 .. K + extra_iterations."""
        return self.K + 1 + self.extra_iterations

    @property
    def total_steps(self) -> int:
        """``refreshes × steps_per_refresh``: the run's training steps (online) or Adam steps (offline); the
        one place this product is computed."""
        if self.refreshes is None or self.steps_per_refresh is None:
            raise ValueError("this schedule has no refreshes and steps per refresh (FQI, the oracle)")
        return self.refreshes * self.steps_per_refresh

    def with_steps_per_refresh(self, steps_per_refresh: int) -> Schedule:
        """This schedule with ``steps_per_refresh`` set (an offline trainer's, once it knows its dataset)."""
        return dataclasses.replace(self, steps_per_refresh=steps_per_refresh)
