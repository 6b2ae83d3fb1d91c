r"""A new operator in one file: a residual low-rank PBO, registered, trained, applied past K and exported.

    python docs/tutorials/new_operator.py --work_dir=new_operator [--toy]

1. Defines `ResidualLowRankPBO`, ``Λ(ω) = ω + U Vᵀ ω + b`` with ``U, V ∈ R^{d×r}`` and ``b ∈ R^d``, a
   `pbo_tf.operators.base.PBO`. It is built with the Q family itself and reads its flat layout
   (`pbo_tf.q.FlatMLPQ.layout`) to draw V layer by layer.
2. Registers it as the operator kind ``residual_low_rank`` (`pbo_tf.operators.registry.register`), for MLP
   families only, and makes it gin-configurable under its own name (``ResidualLowRankPBO.rank = 4``).
3. Trains it with ProFQI on car-on-hill in this process: the shipped ``car_on_hill/profqi.gin`` with
   ``make_pbo.kind = 'residual_low_rank'`` (`pbo_tf.experiments.config.parse_config`,
   `pbo_tf.experiments.run_experiment`), into ``<work_dir>/runs/profqi``. The run's curve goes past K: its
   ``k > K`` entries apply the trained operator without new samples.
4. Applies it further past K and exports it with ``pbo-apply --import=new_operator`` in a fresh process:
   ``--import`` imports this file as the module ``new_operator`` (its folder on ``PYTHONPATH``), which
   registers the kind, so the operator is rebuilt from the run's ``config.gin`` and its checkpoint. The
   export, ``<work_dir>/export/operator``, is a SavedModel that loads with TensorFlow alone.
5. Reloads the export and checks that its ``Λ^k(ω_0)`` are the run's own iterates (``iterates.npz``, what
   the trained operator computed) and its ``Λ(ω_0)`` the formula above on its variables; writes
   ``<work_dir>/summary.json``.

``--toy`` shrinks the dataset, W and the training (3 target refreshes, graph mode) so that the whole script
finishes in well under a minute (the numbers then say nothing about the operator).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gin
import numpy as np
import tensorflow as tf
import tf_keras
from absl import app, flags, logging

import pbo_tf  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from pbo_tf.operators import registry
from pbo_tf.operators.base import PBO, initializer_seeds
from pbo_tf.q import FlatMLPQ

_WORK_DIR = flags.DEFINE_string("work_dir", "new_operator", "Folder for the run, the export and the summary.")
_TOY = flags.DEFINE_boolean("toy", False, "Tiny sizes: finishes in well under a minute.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the dataset, W and the operator.")


# ------------------------------------------------------------------------------------------ 1, 2: the class
@registry.register("residual_low_rank", q_family=FlatMLPQ)
@gin.configurable(denylist=["q_family", "init_std", "seed"])  # make_pbo passes these
class ResidualLowRankPBO(PBO):
    """``Λ(ω) = ω + U Vᵀ ω + b`` on a batch of flat MLP parameters: ``[n_w, d] → [n_w, d]`` computed as
    ``ω + (ω V) Uᵀ + b``, with ``U, V ∈ R^{d×r}`` and ``b ∈ R^d`` learned.

    ``U`` starts truncated-normal with std ``init_std`` and ``b`` at zero, so Λ starts near the identity
    and, being residual, is never a constant map. ``V`` is drawn layer by layer from the family's layout:
    the rows that read layer l's kernel and bias are normal with std ``1 / sqrt(size_l)``, so every layer
    weighs alike in ``Vᵀ ω`` whatever its size.

    Args:
      q_family: the `FlatMLPQ` family whose parameters Λ maps.
      rank: r, the rank of the correction ``U Vᵀ``.
      init_std: std of U's initialisation (``make_pbo.init_std``).
      seed: seed of U's and V's draws (`initializer_seeds`); None draws from the global generator.

    Raises:
      ValueError: a rank outside ``[1, d]``.
    """

    def __init__(self, q_family: FlatMLPQ, rank: int = 4, init_std: float = 5e-6, seed=None, **kwargs):
        super().__init__(q_family.d, **kwargs)
        if not 1 <= int(rank) <= self.d:
            raise ValueError(f"ResidualLowRankPBO.rank must be in [1, d={self.d}], got {rank}")
        self.rank, self.init_std = int(rank), float(init_std)
        self.layer_shapes = tuple(layer.kernel_shape for layer in q_family.layout)  # (in, out) per layer
        u_seed, v_seed = initializer_seeds(seed, 2)
        row_std = np.zeros([self.d, 1], np.float32)  # each layer's rows of V (kernel and bias together)
        for layer in q_family.layout:
            row_std[layer.offset : layer.offset + layer.size] = 1.0 / np.sqrt(layer.size)
        v = tf_keras.initializers.RandomNormal(stddev=1.0, seed=v_seed)([self.d, self.rank]).numpy() * row_std
        self.U = self.add_weight(
            name="U",
            shape=[self.d, self.rank],
            initializer=tf_keras.initializers.TruncatedNormal(stddev=self.init_std, seed=u_seed),
        )
        self.V = self.add_weight(
            name="V", shape=[self.d, self.rank], initializer=tf_keras.initializers.Constant(v)
        )
        self.b = self.add_weight(name="b", shape=[self.d], initializer="zeros")

    def apply(self, params):
        return params + tf.matmul(tf.matmul(params, self.V), self.U, transpose_b=True) + self.b

    def get_config(self):
        return {
            "d": self.d,
            "rank": self.rank,
            "init_std": self.init_std,
            "layers": [list(shape) for shape in self.layer_shapes],
            "name": self.name,
        }


# ----------------------------------------------------------------------------------------------- 3: train
#: What each mode binds on top of car_on_hill/profqi.gin (K, the curve's length past K, the budget).
SIZES = {
    True: [
        "K = 3", "EXTRA_ITERATIONS = 4", "REFRESHES = 3", "PASSES_PER_REFRESH = 1",
        "CarOnHillProblem.n_random = 500", "CarOnHillProblem.n_oriented = 100",
        "ProFQIConfig.w_size = 4", "ProFQIConfig.w_batch_size = 4", "ProFQIConfig.jit_compile = False",
    ],
    False: ["K = 5", "EXTRA_ITERATIONS = 10", "REFRESHES = 100", "PASSES_PER_REFRESH = 5"],
}  # fmt: skip
OPERATOR = [
    "make_pbo.kind = 'residual_low_rank'",
    "make_pbo.init_std = 1e-3",  # U's std
    "ResidualLowRankPBO.rank = 4",
    "AnnealedAdam.lr_start = 1e-3",
]


def train(root: str, seed: int, toy: bool) -> dict:
    """ProFQI with the residual low-rank operator on car-on-hill, in this process; returns metrics.json."""
    from pbo_tf.experiments import run_experiment
    from pbo_tf.experiments.config import parse_config

    bindings = [f"SEED = {seed}", *SIZES[toy], *OPERATOR]
    print(
        "$ pbo-train --gin_file=car_on_hill/profqi.gin", " ".join(f'--gin_bindings="{b}"' for b in bindings)
    )
    print("  (in this process, where the kind is registered: parse_config + run_experiment)", flush=True)
    parse_config(["car_on_hill/profqi.gin"], bindings)
    return run_experiment(root, log=lambda line: print(" ", line, flush=True))


# ---------------------------------------------------------------------------------- 4: apply and export
def apply_and_export(root: str, export: str, k_max: int) -> list[dict]:
    """``pbo-apply`` in a fresh process that imports this file as ``new_operator``; returns its curve."""
    here = os.path.dirname(os.path.abspath(__file__))
    args = ["--import=new_operator", f"--run_dir={root}", f"--k_max={k_max}", f"--export={export}"]
    print(f"$ PYTHONPATH={here} pbo-apply {' '.join(args)}", flush=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    done = subprocess.run(
        [sys.executable, "-m", "pbo_tf.cli.apply", *args], env=env, capture_output=True, text=True
    )
    print("\n".join("  " + line for line in done.stdout.splitlines()))
    if done.returncode != 0:
        sys.exit(f"pbo-apply failed (exit {done.returncode}): {done.stderr.strip()}")
    with open(os.path.join(root, f"applied_k{k_max}.json"), encoding="utf-8") as f:
        return json.load(f)["curve"]


# ------------------------------------------------------------------------------------ 5: reload the export
def check_export(export: str, root: str) -> float:
    """Loads the exported operator with TensorFlow alone; returns the largest difference between its
    ``Λ^k(ω_0)`` and the run's iterates, after checking its ``Λ(ω_0)`` against ``ω + (ω V) Uᵀ + b``."""
    module = tf.saved_model.load(os.path.join(export, "operator"))
    with np.load(os.path.join(root, "iterates.npz")) as data:
        iterates = data["iterates"]  # [K + extra + 1, d]: Λ^k(ω_0) of the trained operator
    omega0 = module.omega0.numpy()[None]
    reloaded = module.iterate(tf.constant(omega0), tf.constant(len(iterates) - 1)).numpy()[:, 0]
    weights = {v.name.split("/")[-1].split(":")[0]: v.numpy() for v in module.operator_variables}
    by_hand = omega0 + (omega0 @ weights["V"]) @ weights["U"].T + weights["b"]
    np.testing.assert_allclose(reloaded[1], by_hand[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(reloaded, iterates, rtol=1e-5, atol=1e-6)
    return float(np.max(np.abs(reloaded - iterates)))


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    logging.set_verbosity(logging.WARNING)  # as pbo-train: TensorFlow's saving notes off the output
    work = os.path.abspath(_WORK_DIR.value)
    root, export = os.path.join(work, "runs", "profqi"), os.path.join(work, "export")
    print(f"Registered operator kinds: {registry.names()}")

    metrics = train(root, _SEED.value, _TOY.value)
    K = metrics["K"]
    options = {k: v for k, v in metrics["operator"].items() if k in ("kind", "d", "rank", "layers")}
    print(f"\nThe run's curve, J against k ({options}); past K the trained operator applies alone:")
    for entry in metrics["curve"]:
        print(f"  k = {entry['k']:>2}  J = {entry['J']}" + ("  (past K)" if entry["k"] > K else ""))

    k_max = len(metrics["curve"]) + 4
    applied = apply_and_export(root, export, k_max)
    difference = check_export(export, root)
    print(
        f"\nThe exported operator reloaded: its Λ^k(ω_0) are the run's iterates (max |Δ| = {difference:.2g})"
    )

    summary = {
        "K": K,
        "operator": metrics["operator"],
        "curve": [[e["k"], e["J"]] for e in metrics["curve"]],
        "applied": [[e["k"], e["J"]] for e in applied],
        "export": os.path.join(export, "operator"),
        "export_max_abs_difference": difference,
    }
    path = os.path.join(work, "summary.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    print(f"Wrote {path}")


if __name__ == "__main__":
    app.run(main)
