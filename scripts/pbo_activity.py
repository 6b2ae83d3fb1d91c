"""Is a trained deep PBO still a function of its input? For each seed of a finished ProFQI run folder:
the hidden units that fire on at least one of 30 fresh parameter vectors, per layer, and the spread of
Λ(ω) over those vectors (0 means Λ is a constant map: every k >= 1 then gives the same Q).

  python scripts/pbo_activity.py RUN_DIR [--output=F.json]
"""

import sys

import tensorflow as tf

from pbo_tf.experiments.results import write_json_atomic
from pbo_tf.experiments.runner import Experiment, load_trained_operator
from pbo_tf.operators import DeepPBO


def activity(run_dir: str, seed: int) -> dict:
    pbo, q, _ = load_trained_operator(run_dir, seed)
    if not isinstance(pbo, DeepPBO):
        raise SystemExit(f"{run_dir}: the operator is {type(pbo).__name__}, not a deep PBO")
    x = tf.constant(q.initial_params(30, seed + 1000))  # fresh vectors, not the training set W
    out = pbo(x)
    spread = float(tf.reduce_max(tf.abs(out - out[:1])))
    active = pbo.active_units(x)
    return {"seed": seed, "active_units": active, "width": [layer.units for layer in pbo.hidden_layers],
            "output_spread": spread}  # fmt: skip


def main(argv):
    if len(argv) < 2:
        raise SystemExit(__doc__)
    run_dir = argv[1]
    output = next((a.split("=", 1)[1] for a in argv[2:] if a.startswith("--output=")), None)
    load_trained_operator(run_dir)  # parses the run's config (and checks it is a run with an operator)
    seeds = Experiment(root_dir=run_dir, log=None).seeds
    rows = [activity(run_dir, s) for s in seeds]
    for r in rows:
        print(f"seed {r['seed']}: active units per hidden layer {r['active_units']} of {r['width']}, "
              f"spread of Λ over 30 fresh ω {r['output_spread']:.3g}")  # fmt: skip
    if output:
        write_json_atomic(output, {"run_dir": run_dir, "seeds": rows})


if __name__ == "__main__":
    main(sys.argv)
