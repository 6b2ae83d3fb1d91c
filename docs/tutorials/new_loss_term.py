r"""A new loss term in one file: a contraction penalty on the operator, trained through gin, logged by itself.

    python docs/tutorials/new_loss_term.py --work_dir=new_loss_term [--toy]

1. Defines `ContractionPenalty`, a `pbo_tf.loss_terms.LossTerm`: on the rows ω of each W batch it measures
   how much the operator ``Λ_φ`` stretches the distance between two of them,
   ``ρ_ij = ‖Λ(ω_i) − Λ(ω_j)‖ / ‖ω_i − ω_j‖``, and penalises the pairs stretched past ``max_ratio``,
   ``mean_ij max(0, ρ_ij − max_ratio)²``: an operator whose iterates should converge is pushed towards a
   contraction on W (here towards stretching no pair by more than 0.5). It returns the penalty and two
   metrics of its own, ``ratio_mean`` and ``ratio_max``. ``@gin.configurable`` makes it bindable
   (``ContractionPenalty.max_ratio = 0.5``); nothing else in pbo_tf
   is edited or told about it.
2. Trains ProFQI on chain-walk (the shipped ``chain_walk/profqi.gin``, a linear operator) twice in this
   process, with ``ProFQIConfig.loss_terms = [@BellmanTerm(), @ContractionPenalty()]``: once with the
   term's weight 0 (it is measured, not trained on) and once with weight 1.
3. Shows where the term's metrics went, for both runs: the progress lines (``contraction ...``), TensorBoard
   (tags ``loss_terms/contraction``, ``loss_terms/contraction/ratio_max``, ...) and ``metrics.json``
   (``loss_terms``), and the largest stretch ``ratio_max`` with and without the penalty. Writes
   ``<work_dir>/summary.json``.

``--toy`` shrinks the training (30 target refreshes, graph mode) so the script finishes in well under a
minute.
"""

from __future__ import annotations

import glob
import json
import os

import gin
import tensorflow as tf
from absl import app, flags, logging

import pbo_tf  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from pbo_tf.loss_terms import LossTerm

_WORK_DIR = flags.DEFINE_string("work_dir", "new_loss_term", "Folder for the runs and the summary.")
_TOY = flags.DEFINE_boolean("toy", False, "Tiny sizes: finishes in well under a minute.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the runs.")


# ------------------------------------------------------------------------------------------- 1: the term
@gin.configurable
class ContractionPenalty(LossTerm):
    """``mean_{i<j} max(0, ρ_ij − max_ratio)²`` with ``ρ_ij = ‖Λ(ω_i) − Λ(ω_j)‖ / ‖ω_i − ω_j‖`` over the pairs
    of distinct rows of the W batch; metrics ``ratio_mean`` and ``ratio_max`` (of ρ over the pairs).

    Args:
      weight: the term's weight in the loss.
      max_ratio: the stretch allowed before the penalty starts (< 1: a contraction).
    """

    name = "contraction"

    def __init__(self, weight: float = 1.0, max_ratio: float = 0.9):
        super().__init__(weight)
        self.max_ratio = float(max_ratio)

    def __call__(self, context):
        omega = context.params  # [n, d], the W batch
        applied = context.pbo(omega)  # [n, d], Λ_φ(ω), differentiable in φ
        n = tf.shape(omega)[0]
        i, j = tf.meshgrid(tf.range(n), tf.range(n), indexing="ij")
        pairs = tf.where(i < j)  # [p, 2], each pair once
        gap_in = tf.norm(tf.gather(omega, pairs[:, 0]) - tf.gather(omega, pairs[:, 1]), axis=-1)
        gap_out = tf.norm(tf.gather(applied, pairs[:, 0]) - tf.gather(applied, pairs[:, 1]), axis=-1)
        ratio = gap_out / tf.maximum(gap_in, 1e-12)
        penalty = tf.reduce_mean(tf.square(tf.nn.relu(ratio - self.max_ratio)))
        return penalty, {"ratio_mean": tf.reduce_mean(ratio), "ratio_max": tf.reduce_max(ratio)}


# ----------------------------------------------------------------------------------------------- 2: train
#: What each mode binds on top of chain_walk/profqi.gin.
SIZES = {
    True: ["K = 5", "EXTRA_ITERATIONS = 5", "REFRESHES = 30", "ProFQIConfig.jit_compile = False"],
    False: ["K = 5", "EXTRA_ITERATIONS = 10", "REFRESHES = 300"],
}
TERMS = [
    "ProFQIConfig.loss_terms = [@BellmanTerm(), @ContractionPenalty()]",
    "ContractionPenalty.max_ratio = 0.5",
]


def train(root: str, weight: float, seed: int, toy: bool) -> tuple[dict, list[str]]:
    """ProFQI on chain-walk with the penalty at ``weight``, in this process (where the class is defined and
    gin knows it); returns metrics.json and the run's printed lines."""
    from pbo_tf.experiments import run_experiment
    from pbo_tf.experiments.config import parse_config

    bindings = [f"SEED = {seed}", *SIZES[toy], *TERMS, f"ContractionPenalty.weight = {weight}"]
    print("$ pbo-train --gin_file=chain_walk/profqi.gin", " ".join(f'--gin_bindings="{b}"' for b in bindings))
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        print(" ", line, flush=True)

    parse_config(["chain_walk/profqi.gin"], bindings)
    return run_experiment(root, log=log), lines


# ------------------------------------------------------------------------------------ 3: where it went
def tensorboard_scalars(root: str) -> dict[str, list[tuple[int, float]]]:
    """Every ``loss_terms/`` scalar of the run's TensorBoard logs: ``{tag: [(step, value), ...]}``."""
    found: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(os.path.join(root, "**", "events.out.tfevents.*"), recursive=True)):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.tag.startswith("loss_terms/"):
                    number = (
                        float(tf.make_ndarray(value.tensor))
                        if value.HasField("tensor")
                        else value.simple_value
                    )
                    found.setdefault(value.tag, []).append((int(event.step), number))
    return found


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    work = os.path.abspath(_WORK_DIR.value)
    summary = {}
    for label, weight in (("measured_only", 0.0), ("penalised", 1.0)):
        root = os.path.join(work, "runs", label)
        print(f"\n== {label}: ContractionPenalty.weight = {weight}")
        metrics, lines = train(root, weight, _SEED.value, _TOY.value)
        progress = [line for line in lines if "contraction" in line]
        scalars = tensorboard_scalars(root)
        terms = metrics["loss_terms"]
        print(f"  progress lines naming the term: {len(progress)}")
        print(f"  TensorBoard tags: {sorted(scalars)}")
        shown = {key: round(value, 4) for key, value in terms.items() if "bellman/" not in key}
        print(f"  metrics.json loss_terms: {shown}")
        summary[label] = {
            "weight": weight,
            "metrics_json": terms,
            "tensorboard_tags": sorted(scalars),
            "ratio_max_last": scalars["loss_terms/contraction/ratio_max"][-1][1],
            "progress_lines": progress,
            "curve": metrics["curve"],
        }
    before, after = summary["measured_only"]["ratio_max_last"], summary["penalised"]["ratio_max_last"]
    print(f"\nLargest stretch of the operator on W: {before:.3f} without the penalty, {after:.3f} with it")
    path = os.path.join(work, "summary.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    print(f"Wrote {path}")


if __name__ == "__main__":
    app.run(main)
