"""The gin-bound builders of the offline runs' algorithms: ``@FQI``, ``@ProFQI``, ``@IFQI`` and ``@Oracle``
(and the reference ``@FitOptimum``).

A builder is not a trainer: ``@ProFQI`` (`ProFQI`) is the builder that makes a `pbo_tf.trainers.ProFQITrainer`
and its operator for one seed, ``@FQI`` (`FQI`) the one that makes an `pbo_tf.trainers.FQITrainer`,
``@Oracle`` (`Oracle`) the exact projected Bellman operator of the problem's model (nothing to train).
`pbo_tf.experiments.runner.Experiment` binds one, ``Experiment.algorithm = @ProFQI``; the builder creates a
seed's trainer and operator and answers what the run needs of its algorithm: the curve's ``ω_k``, whether the
seeds may share one stacked gradient step, and the Adam steps against the paper's budget. Each algorithm's
hyper-parameters are its config (``FQIConfig.*``, ``IFQIConfig.*``, ``ProFQIConfig.*``, ``OracleConfig.*``,
`pbo_tf.configs`), the operator on
`pbo_tf.operators.factory.make_pbo`, Adam on `pbo_tf.optimizers.AnnealedAdam`. The online builders (``@DQN``,
``@ProDQN``) are `pbo_tf.agents.builders`. The package ``pbo_tf.trainers`` does not import this module (gin
binds at the edge).

Budgets (``metrics["budget"]``) count Adam steps against the paper's schedule at the paper's sizes, the
problem's ``paper_budget`` (`pbo_tf.envs.base.Problem.paper_budget`): ProFQI makes ``refreshes ×
passes_per_refresh × w_batches × d_batches`` Adam steps, FQI at most ``fqi_epochs × d_batches`` per
iteration (``d_batches = |D| // batch size``, ``w_batches = |W| / W batch size``).
"""

from __future__ import annotations

from collections.abc import Callable

import gin
import numpy as np
import tensorflow as tf

from pbo_tf.configs import FQIConfig, IFQIConfig, OracleConfig, ProFQIConfig
from pbo_tf.data.transitions import Transitions
from pbo_tf.evaluation.operator_activity import activity_monitor
from pbo_tf.loss_terms.configurable import check_bound_terms
from pbo_tf.operators.factory import make_pbo
from pbo_tf.optimizers import AnnealedAdam
from pbo_tf.q.multi_head import MultiHeadQ
from pbo_tf.schedule import Schedule
from pbo_tf.trainers.fqi import FQITrainer
from pbo_tf.trainers.ifqi import IFQITrainer
from pbo_tf.trainers.profqi import ProFQITrainer

# gin injects bindings only through the returned wrappers, so the builders call these.
ConfiguredFQIConfig = gin.external_configurable(FQIConfig, name="FQIConfig", module="pbo_tf")
ConfiguredIFQIConfig = gin.external_configurable(IFQIConfig, name="IFQIConfig", module="pbo_tf")
ConfiguredOracleConfig = gin.external_configurable(OracleConfig, name="OracleConfig", module="pbo_tf")
ConfiguredProFQIConfig = gin.external_configurable(ProFQIConfig, name="ProFQIConfig", module="pbo_tf")


class OfflineAlgorithm:
    """Builds one seed's trainer and operator and answers the runner's questions about its algorithm."""

    name: str = ""
    #: Batched seeds may share one stacked gradient step (`pbo_tf.trainers.seed_batch.seed_axis_rounds`).
    stacks_seeds: bool = True
    #: The algorithm trains on the set W (the runner then draws it with every W option).
    uses_w: bool = False

    #: The algorithm's config (`pbo_tf.configs`): K, the curve's length and the algorithm's schedule.
    config = None

    def schedule(self) -> Schedule:
        """The run's `Schedule`, derived from the algorithm's config."""
        return self.config.schedule()

    @property
    def w_size(self) -> int:
        """The size of the set W: the config's where the algorithm trains on W, else 1 (W[0] is ω_0)."""
        return getattr(self.config, "w_size", 1)

    def build(
        self,
        *,
        problem,
        q_family,
        dataset: tf.data.Dataset,
        w_set: np.ndarray,
        omega0: np.ndarray,
        schedule: Schedule,
        seed: int,
        checkpoint_dir: str,
        summary_dir: str,
        log,
        activity_sets: Callable[[], tuple[np.ndarray, np.ndarray]],
    ) -> tuple[object | None, object | None]:
        """``(trainer, pbo)`` of one seed: the trainer (None when nothing is trained) and the operator (None
        for FQI). ``activity_sets()`` gives the seed's W and fresh vectors for the operator's monitor."""
        raise NotImplementedError

    def operator(self, problem, q_family, w_set: np.ndarray | None = None, name: str = "pbo"):
        """A new operator of the algorithm's kind (untrained), to restore a trained one into; None for FQI."""
        return None

    def iterates(self, trainer, pbo, omega0: np.ndarray, schedule: Schedule):
        """``(iterates [n, d], fixed point [d] or None)``: the curve's ``ω_k`` after training."""
        raise NotImplementedError

    def budget(self, trainer, schedule: Schedule, paper: dict | None) -> dict | None:
        """``metrics["budget"]`` of one seed (see the module docstring), or None without a paper schedule."""
        return None

    def options(self) -> dict:
        """The builder's own gin options, written under ``metrics.json["algorithm_options"]`` when any."""
        return {}


def _budget(done: int, scheduled: int, paper_steps: int, **extra) -> dict:
    return {
        "gradient_steps_done": int(done),
        "gradient_steps_scheduled": int(scheduled),
        "gradient_steps_paper": int(paper_steps),
        "fraction": scheduled / paper_steps,
        **extra,
    }


@gin.configurable(denylist=["config"])
class FQI(OfflineAlgorithm):
    """The builder of FQI (`pbo_tf.trainers.FQITrainer`): K fitted Q iterations from ω_0, trained with Adam
    (`pbo_tf.optimizers.AnnealedAdam`); its curve is the K + 1 iterates (no iterate beyond K). Its
    hyper-parameters are its config, ``FQIConfig.*`` (`pbo_tf.configs.FQIConfig`).

    Args:
      config: the config (default: the gin-bound ``FQIConfig``); the runner passes one for W's FQI members
        (`pbo_tf.operators.factory.WSampler.fqi_members`), whose K is the run's.
    """

    name = "fqi"
    stacks_seeds = False

    def __init__(self, config: FQIConfig | None = None):
        self.config = config if config is not None else ConfiguredFQIConfig()

    def build(self, *, problem, q_family, dataset, w_set, omega0, schedule, seed, checkpoint_dir, summary_dir,
              log, activity_sets):  # fmt: skip
        trainer = FQITrainer(
            config=self.config, q_family=q_family, dataset=dataset, initial_params=omega0,
            gamma=problem.gamma, optimizer=AnnealedAdam(), seed=seed, checkpoint_dir=checkpoint_dir,
            summary_dir=summary_dir, log=log,
        )  # fmt: skip
        return trainer, None

    def iterates(self, trainer, pbo, omega0, schedule):
        return trainer.iterates.numpy(), None

    def budget(self, trainer, schedule, paper):
        if paper is None:
            return None
        d_batches = trainer.batches_per_pass
        done = int(np.sum(trainer.epochs_run.numpy())) * d_batches
        scheduled = schedule.K * trainer.max_epochs * d_batches
        return _budget(done, scheduled, schedule.K * paper["fqi_epochs"] * paper["d_batches"])


@gin.configurable
class FitOptimum(FQI):
    """The builder of a reference, not a method: the Q network fitted by least squares to the problem's exact
    ``Q*`` (`pbo_tf.envs.base.Problem.optimum_regression`), one FQI fit with FQI's training
    (``FQIConfig.*``). Its curve is ω_0 and the fitted ω_1 (with K = 1; a larger K refits the same targets
    from the last fit): what the Q network gives when its target is the optimum itself, beside the methods
    that iterate towards it.

    Args:
      at: where ``Q*`` is fitted: ``"grid"``, car-on-hill's grid cells weighted by the run's dataset (where
        J's rollouts start), or ``"dataset"``, the dataset's own state-action pairs (``ΠQ*`` in the norm of
        every fitted iteration's regression).
    """

    name = "fit_optimum"

    def __init__(self, at: str = "grid"):
        if at not in ("grid", "dataset"):
            raise ValueError(f"FitOptimum.at must be 'grid' or 'dataset', got {at!r}")
        self.at = at
        super().__init__()

    def build(self, *, problem, q_family, dataset, w_set, omega0, schedule, seed, checkpoint_dir, summary_dir,
              log, activity_sets):  # fmt: skip
        fields = {k: v.numpy() for k, v in dataset.batch(1 << 31).get_single_element().items()}
        regression = problem.optimum_regression(Transitions.from_arrays(**fields), at=self.at, log=log)
        return super().build(
            problem=problem, q_family=q_family, dataset=regression.to_dataset(), w_set=w_set, omega0=omega0,
            schedule=schedule, seed=seed, checkpoint_dir=checkpoint_dir, summary_dir=summary_dir, log=log,
            activity_sets=activity_sets,
        )  # fmt: skip

    def options(self):
        return {"at": self.at}

    def budget(self, trainer, schedule, paper):
        return None  # a reference with no schedule in the paper (like the oracle)


@gin.configurable
class IFQI(OfflineAlgorithm):
    """The builder of i-FQI (`pbo_tf.trainers.ifqi.IFQITrainer`), the reference code's iterated baseline:
    K + 1 heads of the problem's Q family, head 0 at the seed's ω_0 (FQI's start), the others fresh
    initialisations, trained with Adam (`pbo_tf.optimizers.AnnealedAdam`); its curve is the heads, k = 0..K
    (no iterate beyond K). Its hyper-parameters are its config, ``IFQIConfig.*``
    (`pbo_tf.configs.IFQIConfig`).

    Its budget counts Adam steps against the reference code's i-FQI schedule (``ifqi_refreshes ×
    ifqi_passes_per_refresh × d_batches`` of the problem's ``paper_budget``) where it has one, else against
    ProFQI's (``refreshes × passes_per_refresh × d_batches``); ``budget["paper_schedule"]`` says which.
    """

    name = "ifqi"
    stacks_seeds = False

    def __init__(self):
        self.config = ConfiguredIFQIConfig()

    def build(self, *, problem, q_family, dataset, w_set, omega0, schedule, seed, checkpoint_dir, summary_dir,
              log, activity_sets):  # fmt: skip
        heads = MultiHeadQ(q_family, schedule.K + 1).initial_params(1, seed)[0].reshape(schedule.K + 1, -1)
        heads[0] = np.asarray(omega0, np.float32)
        trainer = IFQITrainer(
            config=self.config, q_family=q_family, dataset=dataset, initial_params=heads,
            gamma=problem.gamma, optimizer=AnnealedAdam(), seed=seed, checkpoint_dir=checkpoint_dir,
            summary_dir=summary_dir, log=log,
        )  # fmt: skip
        return trainer, None

    def iterates(self, trainer, pbo, omega0, schedule):
        return trainer.iterates(), None

    def budget(self, trainer, schedule, paper):
        if paper is None:
            return None
        scheduled = trainer.refreshes * trainer.steps_per_refresh
        done = trainer.rounds_done * trainer.steps_per_refresh
        own = "ifqi_refreshes" in paper
        refreshes = paper["ifqi_refreshes"] if own else paper["refreshes"]
        passes = paper["ifqi_passes_per_refresh"] if own else paper["passes_per_refresh"]
        return _budget(
            done, scheduled, refreshes * passes * paper["d_batches"],
            refreshes_done=int(trainer.rounds_done), paper_schedule="ifqi" if own else "profqi",
        )  # fmt: skip


class _AppliesOperator(OfflineAlgorithm):
    """An algorithm whose curve is the operator applied to ω_0: ``Λ^k(ω_0)`` for k = 0..K + extra (and the
    operator's fixed point when it has one)."""

    def iterates(self, trainer, pbo, omega0, schedule):
        pbo.ensure_built()
        n = schedule.n_curve_points - 1
        iterates = pbo.iterate(tf.constant(np.asarray(omega0)[None, :]), n)[:, 0].numpy()
        fixed = pbo.fixed_point().numpy() if pbo.has_fixed_point else None
        return iterates, fixed


@gin.configurable
class ProFQI(_AppliesOperator):
    """The builder of ProFQI (paper Algorithm 1, `pbo_tf.trainers.ProFQITrainer`): the operator of `make_pbo`
    (its kind bound on ``make_pbo.kind``) and a target copy, trained on the seed's set W with Adam
    (`pbo_tf.optimizers.AnnealedAdam`). Its hyper-parameters are its config, ``ProFQIConfig.*``
    (`pbo_tf.configs.ProFQIConfig`)."""

    name = "profqi"
    uses_w = True

    def __init__(self):
        self.config = ConfiguredProFQIConfig()
        check_bound_terms(self.config.loss_terms, "ProFQIConfig.loss_terms")

    def operator(self, problem, q_family, w_set=None, name="pbo"):
        return make_pbo(problem, q_family, name=name, w_set=w_set)

    def build(self, *, problem, q_family, dataset, w_set, omega0, schedule, seed, checkpoint_dir, summary_dir,
              log, activity_sets):  # fmt: skip
        pbo = self.operator(problem, q_family, w_set, name="pbo")
        target = self.operator(problem, q_family, w_set, name="target_pbo")
        monitor = activity_monitor(*activity_sets()) if hasattr(pbo, "active_units") else None
        trainer = ProFQITrainer(
            config=self.config, pbo=pbo, target_pbo=target, q_family=q_family, dataset=dataset, w_set=w_set,
            gamma=problem.gamma, optimizer=AnnealedAdam(), seed=seed, omega0=omega0, monitor=monitor,
            checkpoint_dir=checkpoint_dir, summary_dir=summary_dir, log=log,
        )  # fmt: skip
        return trainer, pbo

    def budget(self, trainer, schedule, paper):
        if paper is None:
            return None
        scheduled = trainer.total_steps
        done = scheduled * trainer.rounds_done // trainer.refreshes
        paper_steps = (
            paper["refreshes"] * paper["passes_per_refresh"] * paper["w_batches"] * paper["d_batches"]
        )
        return _budget(done, scheduled, paper_steps, refreshes_done=int(trainer.rounds_done))


@gin.configurable
class Oracle(_AppliesOperator):
    """The exact projected Bellman operator of the problem's model (`make_pbo(kind="oracle")`): nothing is
    trained; its curve is the exact projected value iteration from ω_0, to k = K + extra iterations
    (``OracleConfig.*``, `pbo_tf.configs.OracleConfig`)."""

    name = "oracle"

    def __init__(self):
        self.config = ConfiguredOracleConfig()

    def operator(self, problem, q_family, w_set=None, name="pbo"):
        return make_pbo(problem, q_family, kind="oracle")

    def build(self, *, problem, q_family, dataset, w_set, omega0, schedule, seed, checkpoint_dir, summary_dir,
              log, activity_sets):  # fmt: skip
        return None, self.operator(problem, q_family)
