"""One experiment runner for every gin file: build the problem, train, apply, evaluate, write the run folder.

Run folder contract (``D`` = ``root_dir``; other tools read it):

* ``D/fingerprint.json``: the fingerprint of the config; a relaunch with another config is refused
  (`pbo_tf.experiments.run_folder`);
* ``D/config.gin``: the operative gin config (written at the start, rewritten at the end);
* ``D/dataset.npz``: the offline dataset the run used (reloaded on resume);
* ``D/checkpoints/``: `tf.train.Checkpoint`s of the trainer, so a killed run resumes, and
  ``train_time.json``, the training wall time summed over every process that worked on the run (what
  ``metrics.json`` reports as ``wall_time_s`` / ``wall_time_s_per_seed``);
* ``D/operator/``: the trained PBO (`load_trained_operator` reloads it to apply it further);
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

* ``reference``: the problem's reference values (e.g. car-on-hill's ``optimal_J``). They can depend on the
  seed's dataset (J weights the grid cells by the dataset's counts), so each seed keeps its own and the
  top-level one is their mean over seeds, like the curve.
* ``operator_activity`` (ProFQI and oracle runs): whether the trained operator is still a function of ω
  (`pbo_tf.evaluation.operator_activity`). For a `DeepPBO`, on the set W and on 30 fresh
  vectors (`pbo_tf.evaluation.operator_activity.seed_activity`): the active hidden units per
  layer, the spread ``max_j std_i Λ(x_i)_j`` (largest std over inputs of one output coordinate), the same
  spread of the inputs and their ratio; ``constant`` is True when within each set some hidden layer has no
  active unit or the ratio is ≤ 1e-6, i.e. Λ maps every ω to the same vector and every k ≥ 1 gives the same
  Q. Other operators record ``{"kind": <class name>}``. The top level counts ``constant_map_seeds``.
* ``budget``: ``{gradient_steps_done, gradient_steps_scheduled, gradient_steps_paper, fraction}`` (ProFQI:
  and ``refreshes_done``), Adam
  steps of the run against the paper's schedule at the paper's sizes (`PAPER_BUDGETS`); ``fraction`` is
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

from pbo_tf.analysis import results
from pbo_tf.data.transitions import Transitions
from pbo_tf.envs import registry
from pbo_tf.evaluation.operator_activity import (
    activity_monitor,
    constant_map_message,
    operator_activity,
    seed_sets,
)
from pbo_tf.evaluation.stats import mean_and_ci
from pbo_tf.experiments import run_folder
from pbo_tf.io import atomic_open, write_json_atomic, write_text_atomic
from pbo_tf.operators.base import check_iterations
from pbo_tf.operators.factory import WSampler, make_pbo, operator_config
from pbo_tf.trainers import FQITrainer, ProFQITrainer, seed_axis_rounds, train_seeds
from pbo_tf.utils import DivergenceError

# gin injects bindings only through the returned wrappers, so the runner calls these.
ConfiguredFQITrainer = gin.external_configurable(FQITrainer, name="FQITrainer", module="pbo_tf")
ConfiguredProFQITrainer = gin.external_configurable(ProFQITrainer, name="ProFQITrainer", module="pbo_tf")
# Every registered problem's gin configurables (``ChainWalkProblem.n_states``, ...) exist once this runner is
# imported: the gin files, and the config.gin of every run folder, import only the runner.
registry.import_modules("problem")

ALGORITHMS = ("fqi", "profqi", "oracle")


#: The paper's schedule and sizes (appendix Tables 1-2), for ``metrics["budget"]``. ProFQI makes
#: ``refreshes × passes_per_refresh × w_batches × d_batches`` Adam steps; FQI at most ``fqi_epochs ×
#: d_batches`` per iteration (``d_batches = |D| // batch size``, ``w_batches = |W| / W batch size``).
PAPER_BUDGETS = {
    "chain_walk": dict(refreshes=1000, passes_per_refresh=5, w_batches=1, d_batches=20, fqi_epochs=400),
    "lqr": dict(refreshes=1000, passes_per_refresh=4, w_batches=1, d_batches=1, fqi_epochs=800),
    "car_on_hill": dict(refreshes=1000, passes_per_refresh=10, w_batches=1, d_batches=11, fqi_epochs=1200),
    "bicycle": dict(refreshes=500, passes_per_refresh=20, w_batches=2, d_batches=70, fqi_epochs=1200),
}


@gin.configurable(denylist=["root_dir", "log", "overwrite"])
class Experiment(run_folder.InRunFolder):
    """One (environment, algorithm, K, seed) run, configured by gin.

    Args:
      root_dir: the run folder.
      problem: environment name (an offline entry of `pbo_tf.envs.registry`).
      algorithm: ``fqi``, ``profqi`` or ``oracle``.
      label: name written as ``metrics.json["algorithm"]`` (e.g. ``profqi_inf``); default ``algorithm``.
      K: Bellman iterations (FQI iterations / terms of the PBO loss).
      seed: run seed (dataset, W, initialisation, data order).
      num_seeds: train the seeds ``seed .. seed + num_seeds − 1`` together in one compiled graph (see the
        module docstring for the folder layout).
      extra_iterations: how many k beyond K the curve evaluates (PBO runs; FQI has no iterate there).
      w_size: size of the set W (ProFQI).
      seed_axis: batched ProFQI seeds share one compiled gradient step with their operators' weights
        stacked over seeds (`pbo_tf.trainers.seed_batch.stacked_gradient_step`, for accelerators); False
        (default, faster on a few CPU cores) runs each seed's own loop side by side in the graph. Either way
        each seed's results are its single-seed run's.
      log: progress printer.
      overwrite: a run folder that holds another experiment (another config fingerprint) is moved aside
        and the run starts afresh; False refuses it (`pbo_tf.experiments.run_folder`).
    """

    def __init__(
        self,
        root_dir: str,
        problem: str = gin.REQUIRED,
        algorithm: str = gin.REQUIRED,
        label: str | None = None,
        K: int = gin.REQUIRED,
        seed: int = 0,
        num_seeds: int = 1,
        extra_iterations: int = 10,
        w_size: int = 1,
        seed_axis: bool = False,
        log=print,
        overwrite: bool = False,
    ):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; known algorithms: {list(ALGORITHMS)}")
        check_iterations(K)
        if int(extra_iterations) < 0:
            raise ValueError(f"extra_iterations must be >= 0, got {extra_iterations}")
        if int(w_size) < 1:
            raise ValueError(f"w_size (the size of the set W) must be >= 1, got {w_size}")
        self.root_dir = root_dir
        self.problem = registry.make_problem(problem)
        self.algorithm, self.label = algorithm, label or algorithm
        self.K, self.seed, self.extra_iterations = int(K), int(seed), int(extra_iterations)
        self.w_size = int(w_size)
        self.seed_axis = bool(seed_axis)
        if int(num_seeds) < 1:
            raise ValueError(f"num_seeds must be >= 1, got {num_seeds}")
        self.num_seeds = int(num_seeds)
        self.seeds = [self.seed + i for i in range(self.num_seeds)]
        self.log = log or (lambda _: None)
        self.overwrite = bool(overwrite)
        self.w_sampler = WSampler()

    # ------------------------------------------------------------------------------------------ phases
    def seed_dir(self, seed: int) -> str:
        """Where one seed's files go: the run folder itself, or ``seed_<s>/`` in a batched run."""
        return self.root_dir if self.num_seeds == 1 else self.path(f"seed_{seed}")

    def _load_or_collect_dataset(self, seed: int, folder: str) -> Transitions:
        path = os.path.join(folder, "dataset.npz")
        if os.path.exists(path):
            data = Transitions.load(path, env=self.problem.name)
            self.problem.check_dataset(data, path)
            return data
        data = self.problem.dataset(seed)
        data.save(path, env=self.problem.name)
        return data

    def _trainer_kwargs(self, seed: int, folder: str) -> dict:
        """What every trainer gets from the run (the rest comes from gin)."""
        return dict(
            seed=seed,
            checkpoint_dir=os.path.join(folder, "checkpoints"),
            summary_dir=os.path.join(folder, "tensorboard"),
            log=self.log,
        )

    def build_seed(self, seed: int) -> dict:
        """Everything of one seed up to (not including) training; the same in single and batched runs."""
        self.claim_folder()
        folder = self.seed_dir(seed)
        os.makedirs(folder, exist_ok=True)
        tf_keras.utils.set_random_seed(seed)
        q = self.problem.q_family()
        data = self._load_or_collect_dataset(seed, folder)
        w_set, omega0 = self.w_sampler(q, max(self.w_size, 1), seed)
        self.log(
            f"{self.problem.name} / {self.label}: K={self.K}, seed={seed}, d={q.d}, "
            f"{len(data)} transitions -> {folder}"
        )
        built = {"seed": seed, "dir": folder, "q": q, "omega0": omega0, "trainer": None, "pbo": None}
        built["data"] = data
        kwargs = self._trainer_kwargs(seed, folder)
        if self.algorithm == "fqi":
            built["trainer"] = ConfiguredFQITrainer(
                q_family=q, dataset=data.to_dataset(), initial_params=omega0, K=self.K,
                gamma=self.problem.gamma, **kwargs,
            )  # fmt: skip
        elif self.algorithm == "oracle":
            built["pbo"] = make_pbo(self.problem, q, kind="oracle")
        else:
            pbo = make_pbo(self.problem, q, name="pbo", w_set=w_set)
            target = make_pbo(self.problem, q, name="target_pbo", w_set=w_set)
            built["pbo"] = pbo
            monitor = activity_monitor(*self.activity_sets(q, seed)) if hasattr(pbo, "active_units") else None
            built["trainer"] = ConfiguredProFQITrainer(
                pbo=pbo, target_pbo=target, q_family=q, dataset=data.to_dataset(), w_set=w_set, K=self.K,
                gamma=self.problem.gamma, monitor=monitor, **kwargs,
            )  # fmt: skip
        return built

    def _train(self, runs: list[dict]) -> None:
        trainers = [r["trainer"] for r in runs if r["trainer"] is not None]
        if not trainers:
            return
        seed_axis = self.seed_axis and self.algorithm != "fqi" and len(trainers) > 1
        train_seeds(trainers, log=self.log, run_all=seed_axis_rounds(trainers) if seed_axis else None)
        if self.algorithm == "fqi":
            for r in runs:
                r["iterates"] = r["trainer"].iterates.numpy()

    def finish_seed(self, r: dict, train_time: float) -> dict:
        """Applies the operator, evaluates the curve and writes the seed's iterates (and operator)."""
        fixed = None
        if self.algorithm == "fqi":
            iterates = r["iterates"]
            check_finite_iterates(iterates, f"the FQI iterates ω_k of seed {r['seed']}")
        else:
            pbo = r["pbo"]
            pbo.ensure_built()
            iterates, fixed = self._apply(pbo, r["omega0"])
            # (beyond K an operator may legitimately blow up: the curve records it as null)
            check_finite_iterates(
                iterates[: self.K + 1], f"the trained operator's iterates Λ^k(ω_0) of seed {r['seed']}"
            )
            tf.train.Checkpoint(pbo=pbo).write(os.path.join(r["dir"], "operator", "pbo"))
        curve = self._curve(iterates, fixed, r["dir"], r["data"])
        with atomic_open(os.path.join(r["dir"], "iterates.npz"), "wb") as f:
            np.savez(f, iterates=iterates, **({"fixed_point": fixed} if fixed is not None else {}))
        entry = {
            "seed": r["seed"],
            "curve": curve,
            "wall_time_s": train_time,
            "reference": self.problem.reference(r["data"]),
        }
        if r["pbo"] is not None:
            entry["operator"] = {**operator_config(r["pbo"]), **self.w_sampler.config()}
            activity = self.operator_activity(r["pbo"], r["q"], r["seed"])
            entry["operator_activity"] = activity
            message = constant_map_message(activity)
            if message:
                self.log(f"seed {r['seed']}: {message}")
        budget = self._budget(r["trainer"])
        if budget is not None:
            entry["budget"] = budget
        return entry

    def activity_sets(self, q_family, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The seed's set W and the fresh vectors drawn alike, on which the operator's activity is measured
        (`pbo_tf.evaluation.operator_activity.seed_sets` with the run's W sampler)."""
        return seed_sets(q_family, self.w_size, seed, draw=lambda q, n, s: self.w_sampler(q, n, s)[0])

    def operator_activity(self, pbo, q_family, seed: int) -> dict:
        """`pbo_tf.evaluation.operator_activity.operator_activity` of one seed's trained operator: on the
        seed's set W and on fresh vectors (see the module docstring)."""
        return operator_activity(pbo, *self.activity_sets(q_family, seed))

    def _budget(self, trainer) -> dict | None:
        """``metrics["budget"]`` of one seed (see the module docstring), or None without a paper schedule."""
        paper = PAPER_BUDGETS.get(self.problem.name)
        if trainer is None or paper is None:
            return None
        if self.algorithm == "fqi":
            d_batches = trainer.batches_per_pass
            done = int(np.sum(trainer.epochs_run.numpy())) * d_batches
            scheduled = self.K * trainer.max_epochs * d_batches
            paper_steps = self.K * paper["fqi_epochs"] * paper["d_batches"]
        else:
            scheduled = trainer.total_steps
            done = scheduled * trainer.rounds_done // trainer.refreshes
            paper_steps = (
                paper["refreshes"] * paper["passes_per_refresh"] * paper["w_batches"] * paper["d_batches"]
            )
        budget = {
            "gradient_steps_done": int(done),
            "gradient_steps_scheduled": int(scheduled),
            "gradient_steps_paper": int(paper_steps),
            "fraction": scheduled / paper_steps,
        }
        if self.algorithm != "fqi":
            budget["refreshes_done"] = int(trainer.rounds_done)
        return budget

    def _apply(self, pbo, omega0):
        n = self.K + self.extra_iterations
        iterates = pbo.iterate(tf.constant(omega0[None, :]), n)[:, 0].numpy()
        fixed = pbo.fixed_point().numpy() if pbo.has_fixed_point else None
        return iterates, fixed

    def run(self) -> dict:
        """Runs the experiment (resuming if interrupted) and returns the metrics dict.

        A run folder that already holds ``metrics.json`` is complete: it is read back, not re-run. The folder
        must hold this experiment (`pbo_tf.experiments.run_folder.claim`).

        Raises:
          RunFolderConflict: the folder holds another experiment (and not ``overwrite``).
          DivergenceError: training diverged; ``failure.json`` records it, the checkpoints keep the last
            good state and no ``metrics.json`` is written.
        """
        status = self.claim_folder()
        if status == "complete":
            self.log(f"{self.root_dir}: complete (metrics.json exists), skipping")
            return results.load_metrics(self.root_dir)
        if status == "resume":
            self.log(f"{self.root_dir}: resuming (same config fingerprint)")
        write_text_atomic(self.path("config.gin"), gin.config_str())
        try:
            start = time.perf_counter()
            runs = [self.build_seed(seed) for seed in self.seeds]
            self._train(runs)
            train_time = (time.perf_counter() - start) / len(runs)
            trainers = [r["trainer"] for r in runs if r["trainer"] is not None]
            if trainers:  # the trainers' own ledger counts every process of a resumed run
                train_time = float(np.mean([t.train_seconds for t in trainers]))
            per_seed = [self.finish_seed(r, train_time) for r in runs]
        except DivergenceError as e:
            path = run_folder.write_failure(self.root_dir, e, where=e.where, step=e.step)
            self.log(f"{e} (recorded in {path})")
            raise
        metrics = {"env": self.problem.name, "algorithm": self.label, "K": self.K, "seed": self.seed}
        if self.num_seeds > 1:
            metrics.update(seeds=self.seeds, **summarise_seeds(per_seed), per_seed=per_seed)
            if "operator" in per_seed[0]:
                metrics["operator"] = per_seed[0]["operator"]
            metrics["wall_time_s_per_seed"] = train_time
        else:
            metrics.update({k: v for k, v in per_seed[0].items() if k != "seed"})
            metrics.update({k: v for k, v in summarise_seeds(per_seed).items() if k == "constant_map_seeds"})
        write_text_atomic(self.path("config.gin"), gin.operative_config_str())
        write_json_atomic(self.path("metrics.json"), metrics)
        run_folder.clear_failure(self.root_dir)
        main = self.problem.main_metric
        at_k = {c["k"]: c.get(main) for c in metrics["curve"]}
        what = "mean over seeds" if self.num_seeds > 1 else "seed " + str(self.seed)
        self.log(
            f"done in {train_time:.1f}s per seed ({what}): {main} at k=0: {at_k.get(0)}, "
            f"k=K: {at_k.get(self.K)}, k=K+{self.extra_iterations}: "
            f"{at_k.get(self.K + self.extra_iterations)}"
        )
        return metrics

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
        curve = self.evaluate_curve(iterates, data, fixed, n_points=self.K + self.extra_iterations + 1)
        all_params = iterates if fixed is None else np.concatenate([iterates, fixed[None, :]])
        ks = list(range(len(iterates))) + (["inf"] if fixed is not None else [])
        self.problem.artifacts(all_params, folder, ks)
        writer = tf.summary.create_file_writer(os.path.join(folder, "tensorboard"))
        with writer.as_default():
            for entry in curve:
                if isinstance(entry["k"], int):
                    for key, value in entry.items():
                        if key != "k" and value is not None:
                            tf.summary.scalar(f"curve/{key}", value, step=entry["k"])
        writer.flush()
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


def summarise_seeds(per_seed: list[dict]) -> dict:
    """The top-level entries of a batched ``metrics.json`` from its ``per_seed`` entries: the curve's mean
    and 95% Student-t half width (``curve``, ``curve_ci95``), the mean over seeds of ``reference`` and
    ``budget``, and ``constant_map_seeds``, how many seeds' operator is a constant map (when some seed's
    operator was measured: see the module docstring)."""
    curve, ci = aggregate_curves([p["curve"] for p in per_seed])
    out = {
        "curve": curve,
        "curve_ci95": ci,
        "reference": mean_over_seeds([p.get("reference") for p in per_seed]),
    }
    budgets = [p["budget"] for p in per_seed if p.get("budget")]
    if budgets:
        out["budget"] = mean_over_seeds(budgets)
    verdicts = [p["operator_activity"].get("constant") for p in per_seed if p.get("operator_activity")]
    if any(v is not None for v in verdicts):
        out["constant_map_seeds"] = sum(1 for v in verdicts if v)
    return out


def mean_over_seeds(entries: list[dict | None]) -> dict:
    """Key by key mean of per-seed dicts (``reference``, ``budget``): numbers and equally shaped lists of
    numbers are averaged (an integer mean that is whole stays an int); other values are kept when every seed
    has the same one, else None. Keys of the first dict; seeds without the key are left out of its mean."""
    entries = [e for e in entries if isinstance(e, dict)]
    if not entries:
        return {}
    out = {}
    for key in entries[0]:
        values = [e[key] for e in entries if key in e]
        mean = _numeric_mean(values)
        if mean is not None:
            out[key] = mean
        else:
            out[key] = values[0] if all(v == values[0] for v in values) else None
    return out


def _numeric_mean(values: list):
    """Mean of numbers or of equally shaped (nested) lists of numbers; None for anything else."""
    if any(isinstance(v, (bool, str)) or v is None for v in values):
        return None
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    mean = array.mean(axis=0)
    if mean.ndim == 0 and all(isinstance(v, (int, np.integer)) for v in values) and float(mean).is_integer():
        return int(mean)
    return mean.tolist()


def aggregate_curves(curves: list[list[dict]]) -> tuple[list[dict], list[dict]]:
    """Mean and 95% Student-t half width over seeds of curves with the same k entries (None = missing)."""
    mean, ci = [], []
    for entries in zip(*curves, strict=True):
        m, c = {"k": entries[0]["k"]}, {"k": entries[0]["k"]}
        for key in entries[0]:
            if key == "k":
                continue
            values = np.array([np.nan if e.get(key) is None else float(e[key]) for e in entries])
            if np.all(np.isnan(values)):
                m[key] = c[key] = None
                continue
            mu, half = mean_and_ci(values)
            m[key] = float(mu)
            c[key] = float(half) if np.isfinite(half) else None
        mean.append(m)
        ci.append(c)
    return mean, ci


def load_trained_operator(run_dir: str, seed: int | None = None):
    """Rebuilds the trained PBO of a finished ProFQI/oracle run folder, to apply it for more iterations.

    Parses ``run_dir/config.gin`` (this clears the current gin config), builds the problem's Q family and
    the operator, and restores the weights from ``run_dir/operator``.

    Args:
      run_dir: a finished run folder.
      seed: which seed of a batched (``num_seeds > 1``) run; default its first seed.

    Returns:
      ``(pbo, q_family, omega0)``: ``pbo.iterate(omega0[None], k)`` continues the run's curve.

    Raises:
      FileNotFoundError: the folder has no saved operator (e.g. an FQI run or an unfinished run).
      ValueError: the checkpoint does not match the operator the config describes.
    """
    from pbo_tf.experiments.config import parse_config

    config = os.path.join(run_dir, "config.gin")
    if not os.path.exists(config):
        raise FileNotFoundError(f"{run_dir!r} holds no trained operator (no config.gin: not a run folder)")
    parse_config([config])
    experiment = Experiment(root_dir=run_dir, log=None)
    seed = experiment.seed if seed is None else int(seed)
    if seed not in experiment.seeds:
        raise ValueError(f"{run_dir!r} trained seeds {experiment.seeds}, not {seed}")
    prefix = os.path.join(experiment.seed_dir(seed), "operator", "pbo")
    if not tf.io.gfile.exists(prefix + ".index"):
        raise FileNotFoundError(f"{run_dir!r} holds no trained operator ({prefix}.index is missing)")
    q = experiment.problem.q_family()
    if experiment.algorithm == "oracle":
        pbo = make_pbo(experiment.problem, q, kind="oracle")
    else:
        pbo = make_pbo(experiment.problem, q, name="pbo")
    pbo.ensure_built()
    try:
        tf.train.Checkpoint(pbo=pbo).read(prefix).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        first = first if len(first) <= 200 else first[:200] + " ..."
        raise ValueError(f"operator checkpoint {prefix!r} does not match its config: {first}") from e
    omega0 = experiment.w_sampler(q, max(experiment.w_size, 1), seed)[1]
    return pbo, q, omega0
