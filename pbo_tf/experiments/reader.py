"""A finished run folder read back: its seeds and their folders, metrics, config, iterates, dataset and
trained operator (the files `docs/run_folder.md` lists).

`RunReader` reads what the offline `pbo_tf.experiments.runner.Experiment` and the online
`pbo_tf.experiments.online.OnlineExperiment` wrote; `load_trained_operator` is its `RunReader.operator`;
`read_runs` and `read_records` read every run under some folders (``pbo-report``, ``pbo-plot``).
The metrics, seeds, config and iterates need NumPy only; the experiment, the dataset and the operator
import TensorFlow when they are asked for. The metrics are `pbo_tf.analysis.results`' (`load_metrics`, and
`expand_seeds` for each seed's entries and folder), which reads the runs of many folders as curves over
seeds.
"""

from __future__ import annotations

import os

import numpy as np

from pbo_tf.analysis import results
from pbo_tf.experiments import run_folder

CONFIG_FILE = results.CONFIG_FILENAME
ITERATES_FILE = run_folder.ITERATES_FILE
DATASET_FILE = run_folder.DATASET_FILE


class RunError(FileNotFoundError):
    """The folder is not a finished run, or has not what was asked of it; the message names the folder and
    the problem in one line."""

    def __init__(self, run_dir: str, problem: str):
        super().__init__(f"{run_dir!r} {problem}")
        self.run_dir, self.problem = run_dir, problem


def batched_seed(folder: str) -> tuple[str, int] | None:
    """``(the batched run's folder, s)`` when ``folder`` is a ``seed_<s>/`` folder without its own
    ``metrics.json`` inside a finished run that has one; None otherwise."""
    folder = os.path.normpath(folder)
    name, parent = os.path.basename(folder), os.path.dirname(folder)
    seed = results.seed_of_folder_name(name)
    if seed is None:
        return None
    if os.path.exists(os.path.join(folder, run_folder.METRICS_FILE)):
        return None
    if not os.path.exists(os.path.join(parent, run_folder.METRICS_FILE)):
        return None
    return parent, seed


class RunReader:
    """A finished run folder (one with ``metrics.json``), or one seed's folder ``seed_<s>/`` of a batched
    run (the run is then read from the folder above, with ``s`` as its default seed).

    Args:
      run_dir: the run folder (``--root_dir`` of the run), or a seed's folder in a batched run.

    Raises:
      RunError: no such folder, or no ``metrics.json`` in it (an unfinished run, or one that diverged),
        or a ``seed_<s>/`` folder whose batched run did not train ``s``.
    """

    def __init__(self, run_dir: str):
        if not os.path.isdir(run_dir):
            raise RunError(run_dir, "does not exist or is not a directory")
        given, self.default_seed = run_dir, None
        batched = batched_seed(run_dir)
        if batched is not None:
            if os.path.exists(os.path.join(run_dir, run_folder.FAILURE_FILE)):
                why = f"the seed diverged (see its {run_folder.FAILURE_FILE})"
                raise RunError(run_dir, f"has no {run_folder.METRICS_FILE}: {why}")
            run_dir, self.default_seed = batched
        if not os.path.exists(os.path.join(run_dir, run_folder.METRICS_FILE)):
            why = "not a run folder, or the run is unfinished: finish it with pbo-train first"
            if os.path.exists(os.path.join(run_dir, run_folder.FAILURE_FILE)):
                why = f"the run diverged (see its {run_folder.FAILURE_FILE})"
            raise RunError(run_dir, f"has no {run_folder.METRICS_FILE}: {why}")
        self.root = run_dir
        self._metrics = None
        self._experiment = None
        if self.default_seed is not None and self.default_seed not in self.seeds:  # reads metrics.json once
            raise RunError(given, f"is not one of its batched run's seeds {self.seeds}")

    # ------------------------------------------------------------------------------------ metrics, seeds
    @property
    def metrics(self) -> dict:
        """The run's ``metrics.json`` (`pbo_tf.analysis.results.load_metrics`).

        Raises:
          ValueError: a corrupt ``metrics.json`` (the message names the file).
        """
        if self._metrics is None:
            self._metrics = results.load_metrics(self.root)
        return self._metrics

    @property
    def env(self) -> str:
        return self.metrics["env"]

    @property
    def setting(self) -> str:
        """``"online"`` (an `OnlineExperiment` run: DQN, ProDQN, ...) or ``"offline"``, from ``config.gin``
        (``metrics.json`` where the folder has no config)."""
        if os.path.exists(self.config_path):
            return "online" if "OnlineExperiment." in self.config_text else "offline"
        return self.metrics.get("setting", "offline")

    @property
    def seeds(self) -> list[int]:
        """The seeds the run trained (several for a batched run, ``Experiment.num_seeds > 1``)."""
        return [int(s) for s in self.metrics.get("seeds") or [self.metrics["seed"]]]

    def seed(self, seed: int | None = None) -> int:
        """``seed`` (default the run's first, or the seed whose folder the reader was given), checked to be
        one of the run's.

        Raises:
          ValueError: the run did not train ``seed``.
        """
        if seed is None:
            return self.seeds[0] if self.default_seed is None else self.default_seed
        if int(seed) not in self.seeds:
            raise ValueError(f"{self.root!r} trained seeds {self.seeds}, not {seed}")
        return int(seed)

    def records(self) -> list[dict]:
        """One record per seed (`pbo_tf.analysis.results.expand_seeds`), each with its ``seed_dir``: what
        `pbo_tf.analysis` takes (curves over seeds, paired tables, reports)."""
        return results.expand_seeds(self.metrics)

    def seed_metrics(self, seed: int | None = None) -> dict:
        """One seed's entries (`pbo_tf.analysis.results.expand_seeds`: a batched run's ``per_seed`` entry
        with the run's own keys, the whole ``metrics.json`` of a single-seed run), with its ``seed_dir``."""
        seed = self.seed(seed)
        return next(r for r in self.records() if r["seed"] == seed)

    def seed_dir(self, seed: int | None = None) -> str:
        """Where one seed's files are: the run folder, or ``seed_<s>/`` in a batched run."""
        return self.seed_metrics(seed)["seed_dir"]

    def curve(self, seed: int | None = None) -> list[dict]:
        """One seed's curve, ``[{"k": k, metric: value, ...}]``."""
        return self.seed_metrics(seed)["curve"]

    # --------------------------------------------------------------------------------- config, iterates
    @property
    def config_path(self) -> str:
        return os.path.join(self.root, CONFIG_FILE)

    @property
    def config_text(self) -> str:
        """The operative gin config the run wrote at its end (``config.gin``)."""
        with open(self.config_path, encoding="utf-8") as f:
            return f.read()

    def iterates(self, seed: int | None = None) -> np.ndarray:
        """The curve's parameter vectors ``ω_k`` of one seed, ``[n_k, d]`` (``iterates.npz``)."""
        with np.load(os.path.join(self.seed_dir(seed), ITERATES_FILE), allow_pickle=False) as data:
            return data["iterates"]

    def fixed_point(self, seed: int | None = None) -> np.ndarray | None:
        """The trained operator's fixed point ``[d]`` (the curve's ``k = "inf"``), None when it has none."""
        with np.load(os.path.join(self.seed_dir(seed), ITERATES_FILE), allow_pickle=False) as data:
            return data["fixed_point"] if "fixed_point" in data.files else None

    # ------------------------------------------------------------------ experiment, dataset, operator
    def experiment(self):
        """The run's experiment, built (not run) from its ``config.gin``: an offline
        `pbo_tf.experiments.runner.Experiment` or an online `pbo_tf.experiments.online.OnlineExperiment`.
        Parsing the config clears the current gin config. Built once per reader.

        Raises:
          RunError: the folder has no ``config.gin``.
        """
        if self._experiment is None:
            from pbo_tf.experiments.config import parse_config
            from pbo_tf.experiments.run import make_experiment

            if not os.path.exists(self.config_path):
                raise RunError(self.root, f"has no {CONFIG_FILE}: not a run folder")
            parse_config([self.config_path])
            self._experiment = make_experiment(root_dir=self.root, log=None)
        return self._experiment

    def dataset(self, seed: int | None = None):
        """One seed's offline dataset (a `pbo_tf.data.transitions.Transitions`), checked to be one of the
        run's problem as configured.

        Raises:
          RunError: an online run (it has no dataset).
          CorruptDatasetError: the file is not a dataset of the run's problem.
        """
        from pbo_tf.data.transitions import Transitions

        if self.setting == "online":
            raise RunError(self.root, "is an online run: it collected its transitions and saved no dataset")
        problem = self.experiment().problem
        path = os.path.join(self.seed_dir(seed), DATASET_FILE)
        data = Transitions.load(path, env=problem.name)
        problem.check_dataset(data, path)
        return data

    def operator(self, seed: int | None = None):
        """The trained PBO of one seed, to apply it for more iterations: an offline ProFQI or oracle run's
        (``operator/``), or an online ProDQN run's (the operator in its last checkpoint, ``checkpoints/``).

        Returns:
          ``(pbo, q_family, omega0)``: ``pbo.iterate(omega0[None], k)`` continues the run's curve.

        Raises:
          FileNotFoundError: the run has no trained operator (FQI, DQN, i-FQI, ...) or its file is missing.
          ValueError: the checkpoint does not match the operator the config describes, or the run did not
            train ``seed``.
        """
        import tensorflow as tf

        from pbo_tf.experiments.runner import Experiment

        experiment = self.experiment()
        seed = self.seed(seed)
        if not isinstance(experiment, Experiment):
            return _online_operator(experiment, self.root, self.seed_dir(seed), seed)
        q = experiment.problem.q_family()
        pbo = experiment.algorithm.operator(experiment.problem, q)
        if pbo is None:
            raise FileNotFoundError(f"{self.root!r} holds no trained operator ({experiment.label} has none)")
        prefix = os.path.join(self.seed_dir(seed), "operator", "pbo")
        if not tf.io.gfile.exists(prefix + ".index"):
            raise FileNotFoundError(f"{self.root!r} holds no trained operator ({prefix}.index is missing)")
        pbo.ensure_built()
        _restore(tf.train.Checkpoint(pbo=pbo), prefix)
        omega0 = experiment.algorithm.draw_w(q, seed)[1]
        return pbo, q, omega0


def read_runs(root_dirs: str | list[str]) -> list[RunReader]:
    """A reader for every finished run folder under one or several root directories
    (`pbo_tf.analysis.results.run_folders`: each folder once; unfinished ones are skipped with a warning)."""
    return [RunReader(run_dir) for run_dir in results.run_folders(root_dirs)]


def read_records(root_dirs: str | list[str]) -> list[dict]:
    """Every seed of every finished run under ``root_dirs``, one record each (`RunReader.records`): what
    ``pbo-report`` and ``pbo-plot`` read."""
    return [record for reader in read_runs(root_dirs) for record in reader.records()]


def load_trained_operator(run_dir: str, seed: int | None = None):
    """`RunReader.operator` of the finished run folder ``run_dir``: ``(pbo, q_family, omega0)``, the
    trained PBO of an offline ProFQI or oracle run or an online ProDQN run, its Q family and its ``ω_0``.

    Parses ``run_dir/config.gin`` (this clears the current gin config). The run's environment is found in
    `pbo_tf.envs.registry`, those of other packages through their entry points.

    Args:
      run_dir: a finished run folder.
      seed: which seed of a batched (``num_seeds > 1``) run; default its first seed.

    Raises:
      FileNotFoundError: the folder holds no trained operator (an unfinished run, FQI, DQN, ...).
      ValueError: the checkpoint does not match the operator the config describes, or ``seed`` is not one
        of the run's.
    """
    try:
        run = RunReader(run_dir)
    except RunError as e:
        raise RunError(run_dir, f"holds no trained operator: it {e.problem}") from e
    return run.operator(seed)


def _online_operator(experiment, run_dir: str, seed_dir: str, seed: int):
    """`RunReader.operator` of an online run: ProDQN's operator ``φ`` of ``seed`` from the agent in its last
    checkpoint (in ``seed_dir``: the run folder, or ``seed_<s>/`` of a batched run) and its ``ω_0`` (W[0] of
    the builder's sampler), checked against the seed's ``iterates.npz`` (``ω_0`` and ``Λ(ω_0)``)."""
    import tensorflow as tf

    from pbo_tf.agents.builders import ProDQN
    from pbo_tf.compat import checkpoint_names
    from pbo_tf.operators.factory import make_pbo

    if not isinstance(experiment.algorithm, ProDQN):
        raise FileNotFoundError(
            f"{run_dir!r} holds no trained operator: {experiment.label} runs have none (its greedy policy "
            f"is {os.path.join(run_dir, 'policy')})"
        )
    checkpoint = tf.train.latest_checkpoint(os.path.join(seed_dir, "checkpoints"))
    if checkpoint is None:
        raise FileNotFoundError(f"{run_dir!r} holds no trained operator (no checkpoint in checkpoints/)")
    q = experiment.q_family()
    w_set, omega0 = experiment.algorithm.draw_w(q, seed)
    pbo = make_pbo(None, q, name="pbo", w_set=w_set)  # as `ProDQN.build` makes it
    pbo.ensure_built()
    agent = tf.Module(name="agent")
    setattr(agent, checkpoint_names.OPERATOR, pbo)  # the agent's attribute in the checkpoint (agent/_pbo/...)
    _restore(tf.train.Checkpoint(agent=agent), checkpoint, partial=True)
    with np.load(os.path.join(seed_dir, ITERATES_FILE)) as data:
        saved = data["iterates"][:2]
    computed = pbo.iterate(tf.constant(omega0[None]), 1)[:, 0].numpy()
    if not np.allclose(computed, saved, rtol=1e-4, atol=1e-5):
        raise ValueError(
            f"the operator restored from {checkpoint!r} and its ω_0 do not give the run's iterates.npz "
            "(ω_0, Λ(ω_0)): the folder's config.gin does not describe its checkpoint"
        )
    return pbo, q, omega0


def _restore(checkpoint, path: str, partial: bool = False) -> None:
    """Reads the objects of ``checkpoint`` from ``path`` (``partial``: the file holds more, which is left
    unread); a `ValueError` naming it when they do not match."""
    import tensorflow as tf

    try:
        status = checkpoint.read(path).assert_existing_objects_matched()
        if partial:
            status.expect_partial()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        first = first if len(first) <= 200 else first[:200] + " ..."
        raise ValueError(f"operator checkpoint {path!r} does not match its config: {first}") from e
