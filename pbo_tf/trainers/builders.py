"""The gin-bound builders of the offline runs' algorithms: ``@FQI``, ``@ProFQI``, ``@IFQI`` and ``@Oracle``
(and the reference ``@FitOptimum``).

A builder is not a trainer: ``@ProFQI`` (`ProFQI`) is the builder that makes a `pbo_tf.trainers.ProFQITrainer`
and its operator for one seed, ``@FQI`` (`FQI`) the one that makes an `pbo_tf.trainers.FQITrainer`,
``@Oracle`` (`Oracle`) the exact projected Bellman operator of the problem's model (nothing to train).
`pbo_tf.experiments.runner.Experiment` binds one, ``Experiment.algorithm = @ProFQI``. Every builder is a
`pbo_tf.algorithm.AlgorithmBuilder`, as the online ones are: it derives the run's schedule, draws each
seed's set W and ω₀ (with W's FQI members, `fqi_iterates`), makes Adam, the operator's monitor, the seed's
trainer and operator, and answers what the run needs of its algorithm: the curve's ``ω_k``, the operator's
activity, whether the seeds may share one stacked gradient step, and the Adam steps against the paper's
budget. Each algorithm's
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

import os
import time
from typing import NamedTuple

import gin
import numpy as np
import tensorflow as tf

from pbo_tf.algorithm import AlgorithmBuilder
from pbo_tf.configs import FQIConfig, IFQIConfig, OracleConfig, ProFQIConfig
from pbo_tf.data.transitions import Transitions
from pbo_tf.data.w_set import draw_w_set
from pbo_tf.io import atomic_open
from pbo_tf.loss_terms.configurable import check_bound_terms
from pbo_tf.operators.factory import make_pbo
from pbo_tf.q.multi_head import MultiHeadQ
from pbo_tf.trainers.fqi import FQITrainer
from pbo_tf.trainers.ifqi import IFQITrainer
from pbo_tf.trainers.profqi import ProFQITrainer
from pbo_tf.utils import first_line

# gin injects bindings only through the returned wrappers, so the builders call these.
ConfiguredFQIConfig = gin.external_configurable(FQIConfig, name="FQIConfig", module="pbo_tf")
ConfiguredIFQIConfig = gin.external_configurable(IFQIConfig, name="IFQIConfig", module="pbo_tf")
ConfiguredOracleConfig = gin.external_configurable(OracleConfig, name="OracleConfig", module="pbo_tf")
ConfiguredProFQIConfig = gin.external_configurable(ProFQIConfig, name="ProFQIConfig", module="pbo_tf")

#: A seed's FQI iterates for W's FQI members (`OfflineAlgorithm.fqi_iterates`), in the seed's folder.
W_FQI_ITERATES_FILE = "w_fqi_iterates.npz"


class SeedBuild(NamedTuple):
    """One seed's pieces (`OfflineAlgorithm.build`).

    Attributes:
      trainer: the seed's trainer, None when nothing is trained (the oracle).
      pbo: the seed's operator, None for FQI and i-FQI.
      omega0: ω₀ ``[d]``, where the curve starts.
    """

    trainer: object | None
    pbo: object | None
    omega0: np.ndarray


class OfflineAlgorithm(AlgorithmBuilder):
    """Builds one seed's trainer and operator and answers the runner's questions about its algorithm."""

    #: Batched seeds may share one stacked gradient step (`pbo_tf.trainers.seed_batch.seed_axis_rounds`).
    stacks_seeds: bool = True

    def build(
        self, *, problem, q_family, data: Transitions, seed: int, folder: str | None, log, omega0=None
    ) -> SeedBuild:
        """One seed's trainer and operator on ``data``: W and ω₀ drawn (`draw_seed_w`), the checkpoints and
        summaries under ``folder`` (None: none), and ``omega0`` instead of the drawn ω₀ when given."""
        w_set, drawn = self.draw_seed_w(problem, q_family, data, seed, folder, log)
        omega0 = drawn if omega0 is None else np.asarray(omega0, np.float32)
        join = (lambda name: os.path.join(folder, name)) if folder is not None else (lambda name: None)
        trainer, pbo = self._build(
            problem=problem, q_family=q_family, dataset=data.to_dataset(), w_set=w_set, omega0=omega0,
            seed=seed, checkpoint_dir=join("checkpoints"), summary_dir=join("tensorboard"), log=log,
        )  # fmt: skip
        return SeedBuild(trainer, pbo, omega0)

    def _build(self, *, problem, q_family, dataset, w_set, omega0, seed, checkpoint_dir, summary_dir, log):
        """``(trainer, pbo)`` of one seed (None where there is none)."""
        raise NotImplementedError

    def draw_seed_w(self, problem, q_family, data: Transitions, seed: int, folder: str | None, log):
        """The seed's set W and ω₀ (`pbo_tf.algorithm.AlgorithmBuilder.draw_w`); an algorithm that trains on
        W gets W's FQI members (``WSampler.fqi_members``) from FQI's iterates on ``data``."""
        iterates = None
        if self.w_sampler.fqi_members and self.uses_w:
            iterates = self.fqi_iterates(problem, q_family, data, seed, folder, log)
        return self.draw_w(q_family, seed, iterates)

    def fqi_iterates(
        self, problem, q_family, data: Transitions, seed: int, folder: str | None, log
    ) -> np.ndarray:
        """FQI's iterates ω_1 .. ω_K ``[K, d]`` on the seed's dataset, from the paper's ω₀, for W's FQI
        members (``WSampler.fqi_members``), with the gin file's ``FQIConfig`` bindings (K is the run's) in
        the gin scope ``fqi`` (so ``fqi/AnnealedAdam.*`` gives FQI its own learning rates). They are saved in
        the seed's ``w_fqi_iterates.npz``, which a resumed run reads instead of running FQI again."""
        K = self.schedule.K
        path = os.path.join(folder, W_FQI_ITERATES_FILE) if folder is not None else None
        if path is not None and os.path.exists(path):
            with np.load(path) as f:
                iterates = f["iterates"]
            if iterates.shape != (K, q_family.d):
                raise ValueError(
                    f"{path!r} holds iterates of shape {list(iterates.shape)}, not [{K}, {q_family.d}] "
                    "(K, d) of this run; delete it to run FQI again"
                )
            return iterates
        with gin.config_scope("fqi"):
            try:
                fqi = FQI(config=ConfiguredFQIConfig(K=K))
            except TypeError as e:
                raise ValueError(
                    "WSampler.fqi_members runs FQI first and needs the FQIConfig bindings of the "
                    f"environment's fqi.gin (max_epochs, patience, batch_size): {first_line(e)}"
                ) from e
            trainer = fqi.build(
                problem=problem, q_family=q_family, data=data, seed=seed, folder=None, log=None,
                omega0=draw_w_set(q_family, 1, seed)[1],
            ).trainer  # fmt: skip
        start = time.perf_counter()
        trainer.train()
        iterates = trainer.iterates.numpy()[1:]
        if path is not None:
            with atomic_open(path, "wb") as f:
                np.savez(f, iterates=iterates)
        if log:
            log(
                f"seed {seed}: FQI's {K} iterations for W's {self.w_sampler.fqi_members} FQI members "
                f"({time.perf_counter() - start:.1f} s) -> {path}"
            )
        return iterates

    def operator(self, problem, q_family, w_set: np.ndarray | None = None, name: str = "pbo"):
        """A new operator of the algorithm's kind (untrained), to restore a trained one into; None for FQI."""
        return None

    def iterates(self, trainer, pbo, omega0: np.ndarray):
        """``(iterates [n, d], fixed point [d] or None)``: the curve's ``ω_k`` after training."""
        raise NotImplementedError

    def greedy_params(self, trainer, pbo, omega0: np.ndarray) -> np.ndarray:
        """``[d]``: the parameters of the greedy policy at K as training stands now (the operator's
        ``Λ^K(ω₀)``, i-FQI's last head; FQI overrides it), for the evaluation during training."""
        return self.iterates(trainer, pbo, omega0)[0][self.schedule.K]


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
      config: the config (default: the gin-bound ``FQIConfig``); W's FQI members
        (`pbo_tf.operators.factory.WSampler.fqi_members`) pass one whose K is the run's.
    """

    name = "fqi"
    stacks_seeds = False

    def __init__(self, config: FQIConfig | None = None):
        super().__init__(config if config is not None else ConfiguredFQIConfig())

    def _build(self, *, problem, q_family, dataset, w_set, omega0, seed, checkpoint_dir, summary_dir, log):
        trainer = FQITrainer(
            config=self.config, q_family=q_family, dataset=dataset, initial_params=omega0,
            gamma=problem.gamma, optimizer=self.adam, seed=seed, checkpoint_dir=checkpoint_dir,
            summary_dir=summary_dir, log=log,
        )  # fmt: skip
        return trainer, None

    def iterates(self, trainer, pbo, omega0):
        return trainer.iterates.numpy(), None

    def greedy_params(self, trainer, pbo, omega0):
        return trainer.iterates.numpy()[trainer.rounds_done]  # the last iteration done

    def budget(self, trainer, paper):
        if paper is None:
            return None
        d_batches = trainer.batches_per_pass
        done = int(np.sum(trainer.epochs_run.numpy())) * d_batches
        scheduled = self.schedule.K * trainer.max_epochs * d_batches
        return _budget(done, scheduled, self.schedule.K * paper["fqi_epochs"] * paper["d_batches"])


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

    def build(self, *, problem, q_family, data, seed, folder, log, omega0=None):
        regression = problem.optimum_regression(data, at=self.at, log=log)
        return super().build(
            problem=problem,
            q_family=q_family,
            data=regression,
            seed=seed,
            folder=folder,
            log=log,
            omega0=omega0,
        )

    def options(self):
        return {"at": self.at}

    def budget(self, trainer, paper):
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
        super().__init__(ConfiguredIFQIConfig())

    def _build(self, *, problem, q_family, dataset, w_set, omega0, seed, checkpoint_dir, summary_dir, log):
        K = self.schedule.K
        heads = MultiHeadQ(q_family, K + 1).initial_params(1, seed)[0].reshape(K + 1, -1)
        heads[0] = np.asarray(omega0, np.float32)
        trainer = IFQITrainer(
            config=self.config, q_family=q_family, dataset=dataset, initial_params=heads,
            gamma=problem.gamma, optimizer=self.adam, seed=seed, checkpoint_dir=checkpoint_dir,
            summary_dir=summary_dir, log=log,
        )  # fmt: skip
        return trainer, None

    def iterates(self, trainer, pbo, omega0):
        return trainer.iterates(), None

    def budget(self, trainer, paper):
        if paper is None:
            return None
        done = trainer.rounds_done * trainer.steps_per_refresh
        own = "ifqi_refreshes" in paper
        refreshes = paper["ifqi_refreshes"] if own else paper["refreshes"]
        passes = paper["ifqi_passes_per_refresh"] if own else paper["passes_per_refresh"]
        return _budget(
            done, trainer.total_steps, refreshes * passes * paper["d_batches"],
            refreshes_done=int(trainer.rounds_done), paper_schedule="ifqi" if own else "profqi",
        )  # fmt: skip


class _AppliesOperator(OfflineAlgorithm):
    """An algorithm whose curve is the operator applied to ω_0: ``Λ^k(ω_0)`` for k = 0..K + extra (and the
    operator's fixed point when it has one)."""

    def greedy_params(self, trainer, pbo, omega0):
        pbo.ensure_built()
        return pbo.iterate(tf.constant(np.asarray(omega0)[None, :]), self.schedule.K)[-1, 0].numpy()

    def iterates(self, trainer, pbo, omega0):
        pbo.ensure_built()
        n = self.schedule.n_curve_points - 1
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
        super().__init__(ConfiguredProFQIConfig())
        check_bound_terms(self.config.loss_terms, "ProFQIConfig.loss_terms")

    def operator(self, problem, q_family, w_set=None, name="pbo"):
        return make_pbo(problem, q_family, name=name, w_set=w_set)

    def _build(self, *, problem, q_family, dataset, w_set, omega0, seed, checkpoint_dir, summary_dir, log):
        pbo = self.operator(problem, q_family, w_set, name="pbo")
        target = self.operator(problem, q_family, w_set, name="target_pbo")
        trainer = ProFQITrainer(
            config=self.config, pbo=pbo, target_pbo=target, q_family=q_family, dataset=dataset, w_set=w_set,
            gamma=problem.gamma, optimizer=self.adam, seed=seed, omega0=omega0,
            monitor=self.make_monitor(pbo, q_family, seed), checkpoint_dir=checkpoint_dir,
            summary_dir=summary_dir, log=log,
        )  # fmt: skip
        return trainer, pbo

    def budget(self, trainer, paper):
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
        super().__init__(ConfiguredOracleConfig())

    def operator(self, problem, q_family, w_set=None, name="pbo"):
        return make_pbo(problem, q_family, kind="oracle")

    def _build(self, *, problem, q_family, dataset, w_set, omega0, seed, checkpoint_dir, summary_dir, log):
        return None, self.operator(problem, q_family)
