"""Evaluation during training: ``progress.csv`` in the run folder, and the ETA of a progress line.

Offline (`pbo_tf.experiments.runner.Experiment.eval_every`,
`pbo_tf.trainers.base.OfflineTrainer.set_evaluation`) and online
(`pbo_tf.experiments.online.OnlineExperiment.eval_interval`) runs evaluate the greedy policy at K of the
current iterate along the way: ProFQI's and ProDQN's ``Λ^K(ω₀)``, FQI's last iterate, DQN's online network,
i-FQI's and i-DQN's last head. Each evaluation is a row of ``progress.csv`` (`ProgressCSV`), a TensorBoard
scalar ``eval/<metric>`` and a part of the progress line. The file is plain CSV that a notebook reads without
TensorFlow (``pandas.read_csv(D/progress.csv)``); its first columns say where in the run the row was taken
(offline ``round``, ``gradient_steps``; online ``train_step``, ``env_steps``), then ``wall_time_s`` (training
time so far) and the evaluation's metrics.
"""

from __future__ import annotations

import csv
import math
import os

import numpy as np

#: The file name in the run folder (in each seed's folder of a batched offline run).
PROGRESS_FILE = "progress.csv"


class ProgressCSV:
    """Appends rows to ``folder/progress.csv``; the first row's keys are the header.

    A resumed run appends to the file its earlier processes wrote, after dropping rows at or past the step it
    resumes from (they were evaluated after the checkpoint it restored, and are evaluated again).

    Args:
      folder: the run folder (or a batched run's seed folder).
      step_key: the column that orders the rows (``round`` or ``train_step``).
    """

    def __init__(self, folder: str, step_key: str):
        self.path = os.path.join(folder, PROGRESS_FILE)
        self.step_key = step_key
        self.header: list[str] | None = None
        if os.path.exists(self.path):
            with open(self.path, newline="") as f:
                reader = csv.DictReader(f)
                self.header = list(reader.fieldnames or []) or None

    def rewind(self, step: int) -> None:
        """Drops the rows at or past ``step`` (a resumed run starts again from it)."""
        if self.header is None:
            return
        with open(self.path, newline="") as f:
            rows = [row for row in csv.DictReader(f) if float(row[self.step_key]) < step]
        with open(self.path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.header)
            writer.writeheader()
            writer.writerows(rows)

    def append(self, row: dict) -> None:
        """Adds one row (keys outside the header are left out; missing ones are empty)."""
        new = self.header is None
        if new:
            self.header = list(row)
        with open(self.path, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.header, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow({key: _cell(value) for key, value in row.items()})


def _cell(value):
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return value


def eta_text(remaining_steps: int, steps_per_s: float | None) -> str:
    """``"ETA 1h02m"`` / ``"ETA 3m05s"`` / ``"ETA 12s"`` for ``remaining_steps`` at ``steps_per_s``; ``""``
    when the rate is unknown."""
    if not steps_per_s or steps_per_s <= 0 or not math.isfinite(steps_per_s):
        return ""
    seconds = int(round(max(0, remaining_steps) / steps_per_s))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"ETA {hours}h{minutes:02d}m"
    if minutes:
        return f"ETA {minutes}m{secs:02d}s"
    return f"ETA {secs}s"


def numeric_metrics(values: dict) -> dict[str, float]:
    """The numeric entries of an evaluation's metrics, as floats (booleans, text and None left out)."""
    return {
        key: float(value)
        for key, value in values.items()
        if isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))
    }


def metrics_text(metrics: dict, keys: list[str] | None = None) -> str:
    """``"return 153.2, discounted_return 41.07"``: the evaluation's metrics for a progress line."""
    keys = list(metrics) if keys is None else keys
    return ", ".join(
        f"{key} {metrics[key]:.4g}" for key in keys if isinstance(metrics.get(key), (int, float))
    )
