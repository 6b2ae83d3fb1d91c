"""Runs a plan of online runs in one process with deterministic ops (for test_online_seeds.py; two runs of
one online config give the same numbers only with them: pbo-train --deterministic).

``python online_seeds_worker.py PLAN.json``: PLAN is a list of steps, run in order:

* ``{"run": [root_dir, gin_file, [binding, ...]]}``: parses the config and runs its experiment in
  ``root_dir`` (a call that stops at ``max_train_steps_this_call`` leaves its checkpoints for the next);
* ``{"copy": [src, dst]}``: copies the folder ``src`` to ``dst`` (``dst`` removed first).
"""

import json
import shutil
import sys


def main(plan_path: str) -> None:
    import gin
    import tensorflow as tf

    from pbo_tf.experiments.config import parse_config, set_determinism
    from pbo_tf.experiments.run import run_experiment

    set_determinism()
    tf.get_logger().setLevel("ERROR")
    with open(plan_path, encoding="utf-8") as f:
        plan = json.load(f)
    for step in plan:
        if "copy" in step:
            src, dst = step["copy"]
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
            continue
        root, gin_file, bindings = step["run"]
        parse_config([gin_file], bindings)
        try:
            run_experiment(root, log=None)
        finally:
            gin.clear_config()


if __name__ == "__main__":
    main(sys.argv[1])
