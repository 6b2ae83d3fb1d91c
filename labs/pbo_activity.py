"""Is a trained deep PBO still a function of its input? For each seed of a finished ProFQI run folder: the
hidden units that fire on at least one vector, per layer, and the spread of Λ(ω), on the set W and on
fresh parameter vectors (`pbo_tf.evaluation.operator_activity`, the measure the runner writes into
``metrics.json["operator_activity"]``). A spread of 0 means Λ is a constant map: every k >= 1 then gives
the same Q. Use it on run folders written before the runner recorded it, or to check a reloaded operator.

  python labs/pbo_activity.py RUN_DIR [--output=F.json]
"""

import sys

from pbo_tf.experiments.results import write_json_atomic
from pbo_tf.experiments.runner import Experiment, load_trained_operator
from pbo_tf.operators import DeepPBO


def activity(run_dir: str, experiment: Experiment, seed: int) -> dict:
    pbo, q, _ = load_trained_operator(run_dir, seed)
    if not isinstance(pbo, DeepPBO):
        raise SystemExit(f"{run_dir}: the operator is {type(pbo).__name__}, not a deep PBO")
    return {"seed": seed, **experiment.operator_activity(pbo, q, seed)}


def describe(row: dict) -> str:
    parts = []
    for name in ("W", "fresh"):
        one = row[name]
        relative = one["relative_spread"]
        ratio = f" ({relative:.3g} of the inputs')" if relative is not None else ""
        units, spread = one["active_units"], one["spread"]
        parts.append(f"on {name} ({one['n']} ω): active units {units}, spread of Λ {spread:.3g}{ratio}")
    verdict = "a constant map" if row["constant"] else "not constant"
    return f"seed {row['seed']}: hidden widths {row['width']}; {'; '.join(parts)}: Λ is {verdict}"


def main(argv):
    if len(argv) < 2:
        raise SystemExit(__doc__)
    run_dir = argv[1]
    output = next((a.split("=", 1)[1] for a in argv[2:] if a.startswith("--output=")), None)
    load_trained_operator(run_dir)  # parses the run's config (and checks it is a run with an operator)
    experiment = Experiment(root_dir=run_dir, log=None)
    rows = [activity(run_dir, experiment, s) for s in experiment.seeds]
    for row in rows:
        print(describe(row))
    if output:
        constant = sum(1 for r in rows if r["constant"])
        write_json_atomic(output, {"run_dir": run_dir, "seeds": rows, "constant_map_seeds": constant})


if __name__ == "__main__":
    main(sys.argv)
