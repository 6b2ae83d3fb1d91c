"""`AlgorithmBuilder`: what every algorithm's builder does, offline and online.

A run is a runner (`pbo_tf.experiments.runner.Experiment` offline,
`pbo_tf.experiments.online.OnlineExperiment` online) plus one gin-bound builder: ``@FQI``, ``@IFQI``,
``@ProFQI``, ``@Oracle`` (`pbo_tf.trainers.builders`) or ``@DQN``, ``@IDQN``, ``@ProDQN``
(`pbo_tf.agents.builders`). The runner only runs the lifecycle
(`pbo_tf.experiments.lifecycle.RunLifecycle`); the builder owns everything about its algorithm, in the same
place offline and online:

* its config and the run's `pbo_tf.schedule.Schedule` (``builder.schedule``: K, the refreshes, the curve's
  length), derived once from the config;
* the set W and ω₀ of a seed (`draw_w`, with `pbo_tf.operators.factory.WSampler`);
* Adam (``builder.adam``, the gin-bound `pbo_tf.optimizers.AnnealedAdam`), which the trainer or agent
  anneals over its own Adam steps;
* the operator's monitor (`make_monitor`) and its activity after training (`operator_activity`), on the W
  the seed trained on and on fresh vectors (`pbo_tf.evaluation.operator_activity`);
* the budget record of ``metrics.json`` (`budget`);
* the trainer or agent itself (``build``, whose arguments differ offline and online: a dataset there, the
  environment's specs here).

Where each algorithm lives: its config in `pbo_tf.configs`, its builder in ``pbo_tf/trainers/builders.py``
(offline) or ``pbo_tf/agents/builders.py`` (online), its training code in ``pbo_tf/trainers/<name>.py`` or
``pbo_tf/agents/<name>.py`` (docs/architecture.md has the table).
"""

from __future__ import annotations

import numpy as np

from pbo_tf.evaluation.operator_activity import activity_monitor, operator_activity, seed_sets
from pbo_tf.evaluation.unit_alignment import unit_alignment
from pbo_tf.operators.factory import WSampler
from pbo_tf.optimizers import AnnealedAdam
from pbo_tf.schedule import Schedule


class AlgorithmBuilder:
    """The builder protocol shared by the offline and the online builders (see the module docstring).

    Args:
      config: the algorithm's config (`pbo_tf.configs`), already gin-configured.
    """

    #: the algorithm's name (``metrics.json["algorithm"]`` unless the run sets a label)
    name: str = ""
    #: the algorithm trains an operator on the set W (offline, W's FQI members are then mixed in)
    uses_w: bool = False

    def __init__(self, config):
        self.config = config
        self.schedule: Schedule = config.schedule()  # the one place the run's schedule is derived
        self.adam = AnnealedAdam()
        self.w_sampler = WSampler()
        self._w_sets: dict[int, np.ndarray] = {}

    @property
    def w_size(self) -> int:
        """The size of the set W: the config's where the algorithm trains on W, else 1 (W[0] is ω₀)."""
        return int(getattr(self.config, "w_size", 1))

    def _draw(self, q_family, n: int, seed: int) -> np.ndarray:
        return self.w_sampler(q_family, n, seed)[0]

    def draw_w(self, q_family, seed: int, fqi_iterates: np.ndarray | None = None):
        """The seed's set W ``[w_size, d]`` and ω₀ ``[d]`` (`WSampler`); with ``fqi_iterates`` (offline, W's
        FQI members) W's last members are noisy copies of them. The builder keeps the W it returns for the
        operator's monitor and activity."""
        w_set, omega0 = self.w_sampler(q_family, max(self.w_size, 1), seed)
        if fqi_iterates is not None:
            w_set = self.w_sampler.mix_in(w_set, fqi_iterates, seed)
        self._w_sets[int(seed)] = w_set
        return w_set, omega0

    def activity_sets(self, q_family, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The seed's set W (the one `draw_w` gave, FQI members included) and the fresh vectors drawn alike,
        on which the operator's activity is measured (`pbo_tf.evaluation.operator_activity.seed_sets`)."""
        w_set, fresh = seed_sets(q_family, self.w_size, seed, draw=self._draw)
        return self._w_sets.get(int(seed), w_set), fresh

    def make_monitor(self, pbo, q_family, seed: int):
        """The trainer's or agent's ``monitor(pbo) -> (scalars, text)`` (the operator's active units and
        spread on W and on fresh vectors), or None for an operator without hidden units to watch."""
        if pbo is None or not hasattr(pbo, "active_units"):
            return None
        return activity_monitor(*self.activity_sets(q_family, seed))

    def operator_activity(self, pbo, q_family, seed: int, iterates=None) -> dict | None:
        """Whether the trained operator is still a function of ω (`pbo_tf.evaluation.operator_activity`), on
        the seed's W and fresh vectors; None without an operator. With the curve's ``iterates`` ``[n_k, d]``
        of an MLP Q family, also ``unit_alignment``: per k, per hidden layer, the mean pairwise cosine of the
        units' incoming weights (`pbo_tf.evaluation.unit_alignment`; 1 when the units are copies; None for a
        non-finite iterate)."""
        if pbo is None:
            return None
        activity = operator_activity(pbo, *self.activity_sets(q_family, seed))
        if iterates is not None and getattr(q_family, "layout", None) is not None:
            iterates = np.asarray(iterates)
            alignment = unit_alignment(q_family, iterates)
            activity["unit_alignment"] = [  # None where an iterate past K blew up
                [round(float(v), 4) for v in row] if np.all(np.isfinite(omega)) else None
                for row, omega in zip(alignment, iterates, strict=True)
            ]
        return activity

    def budget(self, trained, paper: dict | None) -> dict | None:
        """``metrics["budget"]`` of one seed: the steps ``trained`` (the seed's trainer or agent) made and
        scheduled against the paper's schedule ``paper`` (the environment's ``paper_budget``); None without
        one."""
        return None

    def options(self) -> dict:
        """The builder's own gin options, written under ``metrics.json["algorithm_options"]`` when any."""
        return {}
