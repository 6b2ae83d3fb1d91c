"""Runs a plan of online runs in one process with deterministic ops (for test_online_seeds.py; two runs of
one online config give the same numbers only with them: pbo-train --deterministic).

``python online_seeds_worker.py PLAN.json``: PLAN is a list of steps, run in order:

* ``{"run": [root_dir, gin_file, [binding, ...]]}``: parses the config and runs its experiment in
  ``root_dir`` (a call that stops at ``max_train_steps_this_call`` leaves its checkpoints for the next);
* ``{"copy": [src, dst]}``: copies the folder ``src`` to ``dst`` (``dst`` removed first);
* ``{"poison": {"<seed>": step, ...}}``: in the runs that follow, DQN's training step ``step`` of each named
  seed leaves its online parameters NaN (the check after that step finds them), batched or not;
* ``"diverges": true`` beside ``"run"``: the run is expected to raise `DivergenceError`.
"""

import json
import shutil
import sys


def main(plan_path: str) -> None:
    import gin
    import tensorflow as tf

    from pbo_tf.agents.builders import DQN
    from pbo_tf.experiments.config import parse_config, set_determinism
    from pbo_tf.experiments.run import run_experiment
    from pbo_tf.utils import DivergenceError

    set_determinism()
    tf.get_logger().setLevel("ERROR")
    with open(plan_path, encoding="utf-8") as f:
        plan = json.load(f)
    poison = {}
    build = DQN.build

    def build_poisoned(self, *args, seed, **kwargs):
        agent = build(self, *args, seed=seed, **kwargs)
        at = poison.get(str(seed))
        if at is not None:  # the training step `at` leaves NaN parameters, as a diverging one would
            train, omega = agent.train, self.online_omega

            def poisoned(*a, **k):
                out = train(*a, **k)
                hit = tf.equal(agent.train_step_counter, at)
                omega.assign(tf.where(hit, tf.fill(tf.shape(omega), float("nan")), omega))
                return out

            agent.train = poisoned
        return agent

    DQN.build = build_poisoned
    for step in plan:
        if "poison" in step:
            poison = step["poison"]
            continue
        if "copy" in step:
            src, dst = step["copy"]
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
            continue
        root, gin_file, bindings = step["run"]
        parse_config([gin_file], bindings)
        try:
            run_experiment(root, log=None)
        except DivergenceError as error:
            if step.get("diverges"):
                print(f"diverged as planned: {error}")
            else:
                raise
        finally:
            gin.clear_config()


if __name__ == "__main__":
    main(sys.argv[1])
