r"""Times the generic gymnasium online path against the Lunar Lander one, side by side in one process.

  python benchmarks/gym_online.py [--algorithms=dqn,prodqn] [--steps=100] [--rounds=3] [--output=F.json]
  python benchmarks/gym_online.py --gym_id=CartPole-v1     # another id through the generic path
  python benchmarks/gym_online.py --toy                    # seconds: a check that it runs, not a measurement

For each algorithm, two `OnlineExperiment`s are built from ``gin_configs/lunar_lander/<algorithm>.gin``
(the paper's sizes: Q [30, 30], d = 1261, batch 500, |W| 30 in batches of 15, K = 10): one as shipped
(``OnlineExperiment.env = 'lunar_lander'``, `pbo_tf.envs.lunar_lander.online.LunarLanderEnv`), one with
``OnlineExperiment.env = 'gym'`` and ``GymOnlineEnv.gym_id = --gym_id`` at the same hidden widths, action
encoding, discount and episode cut (`pbo_tf.envs.gym.online.GymOnlineEnv`, whose Q network scales the
bounded observation dimensions onto [-1, 1]). Everything else (agent, replay, Adam, compilation) is the
file's. Both run their initial collect, then ``--rounds`` rounds of ``--steps`` training steps each,
alternating (A B, B A, A B, ...); the rate of a round is its training steps over its collect + train time, as
``metrics.json["loop_steps_per_s"]`` counts them (the first step of a round, which traces the compiled
functions, is not timed). Prints and writes each path's median rate and the median of the per-round
ratios generic / Lunar Lander.
"""

import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

from pbo_tf.cli.common import import_tensorflow_quietly  # noqa: E402

import_tensorflow_quietly()

import gin  # noqa: E402

from pbo_tf.experiments import make_experiment  # noqa: E402
from pbo_tf.experiments.config import GIN_CONFIGS_DIR, parse_config  # noqa: E402

FLAGS = flags.FLAGS
# --toy: tiny networks and batches, a few steps.
TOY = ["LunarLanderEnv.hidden=[8]", "BATCH_SIZE=16", "W_SIZE=4", "W_BATCH_SIZE=2", "INITIAL_COLLECT_STEPS=40"]


def define_flags():
    flags.DEFINE_list("algorithms", ["dqn", "prodqn"], "lunar_lander/<algorithm>.gin files to time.")
    flags.DEFINE_string("gym_id", "LunarLander-v3", "The gymnasium id run through the generic path.")
    flags.DEFINE_integer("steps", 100, "Training steps per round.", lower_bound=2)
    flags.DEFINE_integer("rounds", 3, "Rounds per path (alternating).", lower_bound=1)
    flags.DEFINE_boolean("toy", False, "Tiny sizes (a check that it runs).")
    flags.DEFINE_string("output", None, "Write the results as JSON here.")


def _bindings(path: str, gym_id: str, toy: bool) -> list[str]:
    """The gin bindings of one path: the generic one binds the Lunar Lander file's environment values on
    `GymOnlineEnv` (hidden widths, action encoding, discount, cuts)."""
    out = ["REFRESHES=100000", "DQN_TRAIN_STEPS_PER_REFRESH=100000", "K=10"]  # never finishes here
    if toy:
        out += TOY
    if path == "generic":
        out += [
            "OnlineExperiment.env='gym'",
            f"GymOnlineEnv.gym_id='{gym_id}'",
            "GymOnlineEnv.hidden=%s" % ("[8]" if toy else "[30, 30]"),
            "GymOnlineEnv.gamma=0.99",
            "GymOnlineEnv.train_max_episode_steps=1000",
            "GymOnlineEnv.eval_max_steps=%EVAL_MAX_STEPS",
        ]
        if gym_id == "LunarLander-v3":
            out.append("GymOnlineEnv.action_values=[0.0, 1.0, 2.0, 3.0]")
    return out


def _build(algorithm: str, path: str, root: str, gym_id: str, toy: bool):
    gin_file = os.path.join(GIN_CONFIGS_DIR, "lunar_lander", f"{algorithm}.gin")
    parse_config([gin_file], _bindings(path, gym_id, toy))
    experiment = make_experiment(os.path.join(root, f"{algorithm}_{path}"), log=None)
    experiment.build()
    gin.clear_config()
    return experiment


def _round(experiment, steps: int) -> float:
    """Runs ``steps`` training steps; returns their rate (training steps per second of collect + train)."""
    p = experiment.progress
    before = (int(p.loop_train_steps.numpy()), float(p.collect_s.numpy()), float(p.train_s.numpy()))
    experiment.max_train_steps_this_call = steps
    experiment.train()
    after = (int(p.loop_train_steps.numpy()), float(p.collect_s.numpy()), float(p.train_s.numpy()))
    n = after[0] - before[0]
    return n / ((after[1] - before[1]) + (after[2] - before[2]))


def measure(algorithms, gym_id: str, steps: int, rounds: int, toy: bool) -> dict:
    """``{algorithm: {"lunar_lander_steps_per_s", "generic_steps_per_s", "generic_over_lunar_lander",
    "d": [lunar lander's, generic's]}}``: median rates and the median per-round ratio."""
    out = {}
    with tempfile.TemporaryDirectory() as root:
        for algorithm in algorithms:
            paths = {path: _build(algorithm, path, root, gym_id, toy) for path in ("lunar_lander", "generic")}
            rates = {path: [] for path in paths}
            for i in range(rounds):  # A B, B A, A B, ...: a drift of the host's speed favours neither
                order = list(paths) if i % 2 == 0 else list(paths)[::-1]
                for path in order:
                    rates[path].append(_round(paths[path], steps))
            ratios = [g / ll for g, ll in zip(rates["generic"], rates["lunar_lander"], strict=True)]
            out[algorithm] = {
                "gym_id": gym_id,
                "d": [paths["lunar_lander"].q.d, paths["generic"].q.d],
                "lunar_lander_steps_per_s": statistics.median(rates["lunar_lander"]),
                "generic_steps_per_s": statistics.median(rates["generic"]),
                "generic_over_lunar_lander": statistics.median(ratios),
                "rounds": rates,
            }
    return out


def main(argv):
    del argv
    steps, rounds = (3, 1) if FLAGS.toy else (FLAGS.steps, FLAGS.rounds)
    result = measure(FLAGS.algorithms, FLAGS.gym_id, steps, rounds, FLAGS.toy)
    for algorithm, r in result.items():
        print(
            f"{algorithm}: lunar_lander {r['lunar_lander_steps_per_s']:.2f} training steps/s "
            f"(d={r['d'][0]}), "
            f"generic {r['gym_id']} {r['generic_steps_per_s']:.2f} (d={r['d'][1]}), "
            f"ratio generic / lunar_lander {r['generic_over_lunar_lander']:.3f}"
        )
    if FLAGS.output:
        with open(FLAGS.output, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    define_flags()
    app.run(main)
