"""The one run lifecycle of every experiment, offline and online.

`RunLifecycle.run` is written once: claim the folder (`pbo_tf.experiments.run_folder`: fingerprint, resume or
refuse), write ``config.gin``, build and train (resuming from the checkpoints), record a divergence in
``failure.json``, then the curve, ``iterates.npz``, the operator's activity and the budget, and
``metrics.json`` last, with the hardware trained on. The offline `pbo_tf.experiments.runner.Experiment` and
the online `pbo_tf.experiments.online.OnlineExperiment` differ only in what they plug in: the algorithm's
builder (``@FQI``, ``@ProFQI``, ``@Oracle`` offline, `pbo_tf.trainers.builders`; ``@DQN``, ``@ProDQN``
online, `pbo_tf.agents.builders`) and their training loop (`train`), and how they gather the metrics
(`results`).
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from pbo_tf.evaluation.operator_activity import constant_map_message
from pbo_tf.experiments import run_folder
from pbo_tf.experiments.hardware import training_hardware
from pbo_tf.io import atomic_open
from pbo_tf.utils import DivergenceError

#: numpy's and TensorFlow's seeds are unsigned 32-bit integers.
MAX_SEED = 2**32 - 1


def check_seeds(seed, num_seeds: int, owner: str) -> int:
    """``seed`` as an int, checked before anything is written: it and the batch's last seed ``seed +
    num_seeds − 1`` must lie in ``[0, 2**32 − 1]`` (numpy's and TensorFlow's seed range).

    Raises:
      ValueError: naming ``owner``'s ``seed`` (the ``SEED`` macro of the gin files).
    """
    try:
        value = int(seed)
        whole = not isinstance(seed, bool) and value == seed
    except (TypeError, ValueError):
        whole = False
    if not whole or value < 0 or value + int(num_seeds) - 1 > MAX_SEED:
        raise ValueError(
            f"{owner}.seed (SEED) must be an integer in [0, 2**32 - 1] (with num_seeds - 1 added), "
            f"got {seed!r}"
        )
    return value


class RunLifecycle(run_folder.InRunFolder):
    """A run: `run` calls the hooks `train`, `results`, `failure_details` and `done_line` of the runner.
    The runner sets ``schedule`` (its `pbo_tf.schedule.Schedule`) before the run."""

    #: what ``metrics.json`` records under ``hardware``; None: this process's device
    #: (`pbo_tf.experiments.hardware.training_hardware`). A run trained elsewhere (the XLA export's device
    #: route, benchmarks/xla_profqi.py) sets the device it trained on.
    hardware: dict | None = None

    @property
    def K(self) -> int:
        """The run's K, read from its schedule."""
        return self.schedule.K

    def train(self) -> bool:
        """Builds and trains (resuming from the checkpoints); True when training is finished, False when the
        call stopped early (checkpointed). Raises `DivergenceError` when training diverged."""
        raise NotImplementedError

    def results(self) -> dict:
        """After training: the curve, the iterates and the other files; returns the metrics dict. May raise
        `DivergenceError` (non-finite iterates)."""
        raise NotImplementedError

    def failure_details(self, error: DivergenceError) -> dict:
        """What ``failure.json`` records besides the message."""
        return {"where": error.where, "step": error.step}

    def run_identity(self) -> dict:
        """Which run ``failure.json`` is about, as a report groups runs: ``env``, ``setting`` (``offline`` or
        ``online``), ``algorithm`` (the label), ``K`` and ``seeds`` (every seed the failed folder trained),
        and what names the problem beside ``env`` (`pbo_tf.envs.base.Problem.run_fields`)."""
        raise NotImplementedError

    def done_line(self, metrics: dict) -> str:
        """The last progress line of a finished run."""
        raise NotImplementedError

    def run(self) -> dict | None:
        """Trains (resuming if interrupted), evaluates the curve and writes the run folder.

        A run folder that already holds ``metrics.json`` is complete: it is read back, not re-run. The folder
        must hold this experiment (`pbo_tf.experiments.run_folder.claim`); a new run refused by a check before
        it trained gives its claim back (`pbo_tf.experiments.run_folder.release_claim`).

        Returns:
          The metrics dict; None when the call stopped training early (checkpointed: call again).

        Raises:
          RunFolderConflict: the folder holds another experiment (and not ``overwrite``).
          DivergenceError: training diverged; ``failure.json`` records it, the checkpoints keep the last
            good state and no ``metrics.json`` is written.
        """
        status = self.claim_folder()
        if status == "complete":
            self.log(f"{self.root_dir}: complete (metrics.json exists), skipping")
            return self.folder.load_metrics()
        if status == "resume":
            self.log(f"{self.root_dir}: resuming (same config fingerprint)")
        self.folder.write_config()
        try:
            if not self.train():
                return None
            metrics = self.results()
            metrics["hardware"] = self.hardware or training_hardware()
        except DivergenceError as e:
            path = self.folder.record_failure(e, **self.run_identity(), **self.failure_details(e))
            self.log(f"{e} (recorded in {path})")
            raise
        except Exception:
            if status == "new":  # refused before it trained: the corrected run may take the folder
                run_folder.release_claim(self.root_dir)
            raise
        self.folder.finish(metrics)
        self.log(self.done_line(metrics))
        return metrics

    # ------------------------------------------------------------------------------------------ shared files
    @staticmethod
    def write_iterates(folder: str, iterates: np.ndarray, fixed: np.ndarray | None = None) -> None:
        """``folder/iterates.npz``: the curve's ``ω_k`` (``iterates``) and the operator's fixed point."""
        with atomic_open(os.path.join(folder, run_folder.ITERATES_FILE), "wb") as f:
            np.savez(f, iterates=iterates, **({"fixed_point": fixed} if fixed is not None else {}))

    @staticmethod
    def write_curve_summaries(folder: str, curve: list[dict]) -> None:
        """The curve's metrics per k into ``folder/tensorboard`` (``curve/<metric>``; missing values and the
        fixed point's ``k = "inf"`` entry are left out)."""
        writer = tf.summary.create_file_writer(os.path.join(folder, "tensorboard"))
        with writer.as_default(), tf.summary.record_if(True):
            for entry in curve:
                if not isinstance(entry["k"], int):
                    continue
                for key, value in entry.items():
                    if key != "k" and value is not None:
                        tf.summary.scalar(f"curve/{key}", value, step=entry["k"])
        writer.flush()

    def note_activity(self, activity: dict, prefix: str = "") -> dict:
        """Logs the constant-map warning of an operator's activity (`pbo_tf.evaluation.operator_activity`)
        when it is one; returns ``activity``."""
        message = constant_map_message(activity)
        if message:
            self.log(prefix + message)
        return activity

    @staticmethod
    def curve_at(curve: list[dict], metric: str) -> dict:
        """``{k: value of metric}`` of a curve."""
        return {c["k"]: c.get(metric) for c in curve}
