"""The offline runner: build the problem, train (FQI, ProFQI) or take the exact operator, apply, evaluate,
write the run folder. Its lifecycle is `pbo_tf.experiments.lifecycle.RunLifecycle`, shared with the online
runner; the algorithm is the gin-bound builder ``Experiment.algorithm = @FQI / @ProFQI / @Oracle``
(`pbo_tf.trainers.builders`).

Run folder contract (``D`` = ``root_dir``; other tools read it):

* ``D/fingerprint.json``: the fingerprint of the config; a relaunch with another config is refused
  (`pbo_tf.experiments.run_folder`);
* ``D/config.gin``: the operative gin config (written at the start, rewritten at the end);
* ``D/dataset.npz``: the offline dataset the run used (reloaded on resume);
* ``D/w_fqi_iterates.npz``: with ``WSampler.fqi_members``, FQI's iterates that W's FQI members copy
  (reloaded on resume; `pbo_tf.trainers.builders.OfflineAlgorithm.fqi_iterates`);
* ``D/checkpoints/``: `tf.train.Checkpoint`s of the trainer, so a killed run resumes, and
  ``train_time.json``, the training wall time summed over every process that worked on the run (what
  ``metrics.json`` reports as ``wall_time_s`` / ``wall_time_s_per_seed``);
* ``D/operator/``: the trained PBO (`pbo_tf.experiments.reader.load_trained_operator` reloads it to apply
  it further);
* ``D/tensorboard/``: losses per epoch and metrics per k;
* ``D/iterates.npz``: the parameter vectors ``ω_k`` of the curve;
* ``D/metrics.json``: written last and atomically; a run folder is complete only when it exists;
* ``D/failure.json``: written instead of ``metrics.json`` when training diverged (NaN or Inf in a loss or
  an iterate); the checkpoints keep the last good state.

With ``Experiment.num_seeds = S > 1`` the S seeds ``seed, seed + 1, ...`` train together in one compiled
graph (`pbo_tf.trainers.seed_batch`): each seed's dataset, checkpoints, operator, summaries and iterates go
to ``D/seed_<s>/``, and ``D/metrics.json`` holds every seed's curve under ``per_seed`` plus their mean and
95% Student-t half width (``curve``, ``curve_ci95``). `pbo_tf.analysis.results.load_runs` expands such a
folder into one record per seed.

What ``metrics.json`` holds besides the curve. Each seed's entries sit at the top of a single-seed run and in
its ``per_seed`` entry of a batched one; the top of a batched run holds their mean over seeds.

* ``main_metric``: the problem's metric of progress lines and reports; ``env`` is the problem's registry
  name, and a problem of many configurations adds what names its own (`pbo_tf.envs.base.Problem.run_fields`:
  a user's dataset its ``env_label``, ``dataset`` file and digest, and ``gym_id``).
* ``reference``: the problem's reference values (e.g. car-on-hill's ``optimal_J``). They can depend on the
  seed's dataset (J weights the grid cells by the dataset's counts), so each seed keeps its own and the
  top-level one is their mean over seeds, like the curve.
* ``operator_activity`` (ProFQI and oracle runs): whether the trained operator is still a function of ω
  (`pbo_tf.evaluation.operator_activity`). For a `DeepPBO`, on the set W and on 30 fresh
  vectors (`pbo_tf.evaluation.operator_activity.seed_sets`): the active hidden units per
  layer, the spread ``max_j std_i Λ(x_i)_j`` (largest std over inputs of one output coordinate), the same
  spread of the inputs and their ratio; ``constant`` is True when within each set some hidden layer has no
  active unit or the ratio is ≤ 1e-6, i.e. Λ maps every ω to the same vector and every k ≥ 1 gives the same
  Q. Other operators record ``{"kind": <class name>}``. The top level counts ``constant_map_seeds``.
* ``budget``: ``{gradient_steps_done, gradient_steps_scheduled, gradient_steps_paper, fraction}`` (ProFQI:
  and ``refreshes_done``), Adam
  steps of the run against the paper's schedule at the paper's sizes (the problem's ``paper_budget``,
  `pbo_tf.trainers.builders`); ``fraction`` is
  scheduled / paper (FQI: the cap of ``max_epochs`` epochs per iteration, which early stopping may cut
  short here as in the paper). Absent for problems without a paper schedule and for the oracle.
"""

from __future__ import annotations

import os
import time

import gin
import numpy as np
import tensorflow as tf
import tf_keras

from pbo_tf.analysis.results import seed_folder_name
from pbo_tf.data.transitions import Transitions
from pbo_tf.envs import registry
from pbo_tf.evaluation.stats import summarise_seeds
from pbo_tf.experiments import run_folder
from pbo_tf.experiments.lifecycle import RunLifecycle, check_seeds
from pbo_tf.operators.factory import operator_config
from pbo_tf.progress_log import ProgressCSV
from pbo_tf.trainers import seed_axis_rounds, train_seeds
from pbo_tf.trainers.builders import OfflineAlgorithm
from pbo_tf.utils import DivergenceError

# Every registered problem's gin configurables (``ChainWalkProblem.n_states``, ...) exist once this runner is
# imported: the gin files, and the config.gin of every run folder, import only the runner.
registry.import_modules("problem")


@gin.configurable(denylist=["root_dir", "log", "overwrite"])
class Experiment(RunLifecycle):
    """One (environment, algorithm, K, seed) run, configured by gin.

    Args:
      root_dir: the run folder.
      problem: environment name (an offline entry of `pbo_tf.envs.registry`).
      algorithm: the algorithm's builder, ``@FQI``, ``@ProFQI`` or ``@Oracle`` (`pbo_tf.trainers.builders`).
      label: name written as ``metrics.json["algorithm"]`` (e.g. ``profqi_inf``); default the builder's name.
      seed: run seed (dataset, W, initialisation, data order).
      num_seeds: train the seeds ``seed .. seed + num_seeds − 1`` together in one compiled graph (see the
        module docstring for the folder layout).
      seed_axis: batched ProFQI seeds share one compiled gradient step with their operators' weights
        stacked over seeds (`pbo_tf.trainers.seed_batch.stacked_gradient_step`, for accelerators); False
        (default, faster on a few CPU cores) runs each seed's own loop side by side in the graph. Either way
        each seed's results are its single-seed run's.
      eval_every: evaluate the greedy policy at K of the current iterate (ProFQI: ``Λ^K(ω₀)``; FQI: the last
        iterate; i-FQI: the last head) every this many rounds (refreshes, FQI iterations) and after the last,
        on the problem's own evaluation: ``D/progress.csv`` (each seed's folder), TensorBoard
        ``eval/<metric>`` and the progress line (`pbo_tf.progress_log`). None or 0: no evaluation during
        training.
      log: progress printer.
      overwrite: a run folder that holds another experiment (another config fingerprint) is moved aside
        and the run starts afresh; False refuses it (`pbo_tf.experiments.run_folder`).
    """

    def __init__(
        self,
        root_dir: str,
        problem: str = gin.REQUIRED,
        algorithm: type[OfflineAlgorithm] | OfflineAlgorithm = gin.REQUIRED,
        label: str | None = None,
        seed: int = 0,
        num_seeds: int = 1,
        seed_axis: bool = False,
        eval_every: int | None = None,
        log=print,
        overwrite: bool = False,
    ):
        algorithm = algorithm() if isinstance(algorithm, type) else algorithm
        if not isinstance(algorithm, OfflineAlgorithm):
            raise ValueError(
                "algorithm must be an offline algorithm's builder (@FQI, @ProFQI, @Oracle or @FitOptimum), "
                f"got {algorithm!r}"
            )
        self.schedule = algorithm.schedule  # K and the curve's length: the algorithm's config, derived once
        self.root_dir = root_dir
        self.problem = registry.make_problem(problem)
        self.algorithm, self.label = algorithm, label or algorithm.name
        self.seed_axis = bool(seed_axis)
        if eval_every is not None and (isinstance(eval_every, bool) or int(eval_every) < 0):
            raise ValueError(f"Experiment.eval_every must be None or an integer >= 0, got {eval_every!r}")
        self.eval_every = int(eval_every or 0)
        if int(num_seeds) < 1:
            raise ValueError(f"num_seeds must be >= 1, got {num_seeds}")
        self.num_seeds = int(num_seeds)
        self.seed = check_seeds(seed, self.num_seeds, "Experiment")
        self.seeds = [self.seed + i for i in range(self.num_seeds)]
        self.log = log or (lambda _: None)
        self.overwrite = bool(overwrite)

    @property
    def extra_iterations(self) -> int:
        return self.schedule.extra_iterations

    # ------------------------------------------------------------------------------------------ phases
    def seed_dir(self, seed: int) -> str:
        """Where one seed's files go: the run folder itself, or ``seed_<s>/`` in a batched run."""
        return self.root_dir if self.num_seeds == 1 else self.path(seed_folder_name(seed))

    def _load_or_collect_dataset(self, seed: int, folder: str) -> Transitions:
        path = os.path.join(folder, run_folder.DATASET_FILE)
        if os.path.exists(path):
            data = Transitions.load(path, env=self.problem.name)
            self.problem.check_dataset(data, path)
            return data
        data = self.problem.dataset(seed)
        data.save(path, env=self.problem.name)
        return data

    def build_seed(self, seed: int) -> dict:
        """Everything of one seed up to (not including) training; the same in single and batched runs."""
        self.claim_folder()
        folder = self.seed_dir(seed)
        os.makedirs(folder, exist_ok=True)
        tf_keras.utils.set_random_seed(seed)
        q = self.problem.q_family()
        data = self._load_or_collect_dataset(seed, folder)
        self.log(
            f"{self.problem.label} / {self.label}: K={self.K}, seed={seed}, d={q.d}, "
            f"{len(data)} transitions -> {folder}"
        )
        built = self.algorithm.build(
            problem=self.problem, q_family=q, data=data, seed=seed, folder=folder, log=self.log
        )
        if self.eval_every and built.trainer is not None:
            trainer, pbo, omega0 = built

            def evaluate():
                params = self.algorithm.greedy_params(trainer, pbo, omega0)
                return self.problem.evaluate(params[None], data)[0]

            trainer.set_evaluation(evaluate, self.eval_every, ProgressCSV(folder, "round"))
        return {"seed": seed, "dir": folder, "q": q, "data": data, **built._asdict()}

    def train(self) -> bool:
        """Builds every seed and trains them (in one graph when there are several)."""
        start = time.perf_counter()
        self.runs = [self.build_seed(seed) for seed in self.seeds]
        trainers = [r["trainer"] for r in self.runs if r["trainer"] is not None]
        if trainers:
            stacked = self.seed_axis and self.algorithm.stacks_seeds and len(trainers) > 1
            train_seeds(trainers, log=self.log, run_all=seed_axis_rounds(trainers) if stacked else None)
            # the trainers' own ledger counts every process of a resumed run
            self.train_time = float(np.mean([t.train_seconds for t in trainers]))
        else:
            self.train_time = (time.perf_counter() - start) / len(self.runs)
        return True

    def finish_seed(self, r: dict, train_time: float) -> dict:
        """Applies the operator, evaluates the curve and writes the seed's iterates (and operator)."""
        iterates, fixed = self.algorithm.iterates(r["trainer"], r["pbo"], r["omega0"])
        if r["pbo"] is None:
            check_finite_iterates(iterates, f"the FQI iterates ω_k of seed {r['seed']}")
        else:
            # (beyond K an operator may legitimately blow up: the curve records it as null)
            check_finite_iterates(
                iterates[: self.K + 1], f"the trained operator's iterates Λ^k(ω_0) of seed {r['seed']}"
            )
            tf.train.Checkpoint(pbo=r["pbo"]).write(os.path.join(r["dir"], "operator", "pbo"))
        curve = self._curve(iterates, fixed, r["dir"], r["data"])
        self.write_iterates(r["dir"], iterates, fixed)
        entry = {
            "seed": r["seed"],
            "curve": curve,
            "wall_time_s": train_time,
            "reference": self.problem.reference(r["data"]),
        }
        if r["pbo"] is not None:
            entry["operator"] = {**operator_config(r["pbo"]), **self.algorithm.w_sampler.config()}
            if r["trainer"] is not None and r["trainer"].learner is not None:
                entry["operator"].update(r["trainer"].learner.records())
                if r["trainer"].loss_metrics:  # the last probe's, restored with the checkpoint on a rerun
                    entry["loss_terms"] = r["trainer"].loss_metrics
            activity = self.algorithm.operator_activity(r["pbo"], r["q"], r["seed"], iterates)
            entry["operator_activity"] = self.note_activity(activity, prefix=f"seed {r['seed']}: ")
        budget = self.algorithm.budget(r["trainer"], self.problem.paper_budget)
        if budget is not None:
            entry["budget"] = budget
        return entry

    def results(self) -> dict:
        """Every seed's curve, iterates, operator, activity and budget; their summary over seeds."""
        per_seed = [self.finish_seed(r, self.train_time) for r in self.runs]
        metrics = {"env": self.problem.name, **self.problem.run_fields(), "algorithm": self.label}
        metrics.update(K=self.K, seed=self.seed, main_metric=self.problem.main_metric)
        options = self.algorithm.options()
        if options:
            metrics["algorithm_options"] = options
        if self.num_seeds > 1:
            metrics.update(seeds=self.seeds, **summarise_seeds(per_seed), per_seed=per_seed)
            if "operator" in per_seed[0]:
                metrics["operator"] = per_seed[0]["operator"]
            metrics["wall_time_s_per_seed"] = self.train_time
        else:
            metrics.update({k: v for k, v in per_seed[0].items() if k != "seed"})
            metrics.update({k: v for k, v in summarise_seeds(per_seed).items() if k == "constant_map_seeds"})
        return metrics

    def run_identity(self) -> dict:
        return {
            "env": self.problem.name,
            **self.problem.run_fields(),
            "setting": "offline",
            "algorithm": self.label,
            "K": self.K,
            "seeds": self.seeds,
        }

    def done_line(self, metrics: dict) -> str:
        at_k = self.curve_at(metrics["curve"], self.problem.main_metric)
        what = "mean over seeds" if self.num_seeds > 1 else "seed " + str(self.seed)
        return (
            f"done in {self.train_time:.1f}s per seed ({what}): {self.problem.main_metric} at k=0: "
            f"{at_k.get(0)}, k=K: {at_k.get(self.K)}, k=K+{self.extra_iterations}: "
            f"{at_k.get(self.K + self.extra_iterations)}"
        )

    def evaluate_curve(
        self, iterates: np.ndarray, data: Transitions, fixed=None, n_points: int | None = None
    ) -> list[dict]:
        """The curve entries ``{"k": k, <metric>: value, ...}`` of the iterates ``ω_k = iterates[k]`` (and
        ``{"k": "inf", ...}`` of ``fixed``, the fixed point, when given), evaluated with the problem's
        protocol on the run's dataset ``data`` in one batched call. ``n_points`` (default
        ``len(iterates)``) entries for k = 0, 1, ...; those beyond the iterates hold None (FQI stops at K).
        Writes nothing: `pbo_tf.cli.apply` extends a finished run's curve with it."""
        n_points = len(iterates) if n_points is None else int(n_points)
        all_params = iterates if fixed is None else np.concatenate([iterates, fixed[None, :]])
        all_values = self.problem.evaluate(all_params, data)  # one batched evaluation for every k
        values = all_values[: len(iterates)]
        keys = list(values[0])
        curve = []
        for k in range(n_points):
            entry = {"k": k}
            entry.update(values[k] if k < len(values) else {key: None for key in keys})
            curve.append(entry)
        if fixed is not None:
            entry = {"k": "inf"}
            entry.update(all_values[-1])
            curve.append(entry)
        return curve

    def _curve(self, iterates: np.ndarray, fixed, folder: str, data: Transitions) -> list[dict]:
        curve = self.evaluate_curve(iterates, data, fixed, n_points=self.schedule.n_curve_points)
        all_params = iterates if fixed is None else np.concatenate([iterates, fixed[None, :]])
        ks = list(range(len(iterates))) + (["inf"] if fixed is not None else [])
        self.problem.artifacts(all_params, folder, ks)
        self.write_curve_summaries(folder, curve)
        return curve


def check_finite_iterates(iterates: np.ndarray, what: str) -> None:
    """Raises `DivergenceError` naming the first k whose iterate ``iterates[k]`` holds a NaN or an Inf."""
    finite = np.all(np.isfinite(np.asarray(iterates)), axis=tuple(range(1, np.ndim(iterates))))
    if not np.all(finite):
        k = int(np.argmin(finite))
        raise DivergenceError(
            f"training diverged: {what} are not finite from k={k} on; the last good checkpoint is kept",
            where=what,
            step=k,
        )
