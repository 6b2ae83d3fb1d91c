r"""Seeds per hour of online runs: S seeds in one process (``NUM_SEEDS=S``) against S processes in a row.

  python benchmarks/online_seeds.py [--configs=...] [--seeds=1,5,10] [--steps=500] [--rounds=1] [--output=F]
  python benchmarks/online_seeds.py --toy     # 3 processes: a check that it runs, not a measurement

For each gin file (default the online bicycle ProDQN, Lunar Lander DQN and CartPole DQN) and each S, the S
seeds ``0 .. S − 1`` train ``--steps`` training steps each, at the file's network, replay batch, collection
and compilation, with a short schedule and a small evaluation (`SIZES`), twice: ``batched``, one
``launch/train.py`` process with ``NUM_SEEDS=S`` (`pbo_tf.experiments.online_seeds`), and ``separate``, S
``launch/train.py`` processes one after the other (``SEED=s``). The two alternate (A B, then B A, ...), as the
machine is shared.

Per way and S: ``wall_s``, the wall time of the processes (start-up, build, tracing and compilation,
training, the final evaluation, the files); ``seeds_per_hour`` = S · 3600 / ``wall_s``; ``loop_s``, the time
of the training loops (the initial collects and every training step: the seeds' ``wall_time_s`` summed) and
``other_s`` = ``wall_s`` − ``loop_s`` (start-up, build, evaluation, files); ``steady_steps_per_s``, the seeds'
training steps per second of collect and train time once compiled (``loop_steps_per_s``, its first step
left out). Per S: ``batched_over_separate``, the ratio of seeds per hour (median over rounds), and the same
of the steady rates. Reports the CPU count it ran on.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
CONFIGS = ("bicycle_online/prodqn.gin", "lunar_lander/dqn.gin", "gym/dqn.gin")
#: per gin file: ``steps`` training steps (the schedule's product), a short initial collect, a small curve
#: evaluation at the end and none during training; the network, batch, collection and compilation are the
#: file's.
SIZES = {
    "bicycle_online/prodqn.gin": lambda steps: [
        f"REFRESHES={max(1, steps // 25)}", "TRAIN_STEPS_PER_REFRESH=25", "EXTRA_ITERATIONS=0",
        "N_EVAL_EPISODES=1", "EVAL_MAX_STEPS=100",
    ],
    "lunar_lander/dqn.gin": lambda steps: [
        "K=2", f"DQN_TRAIN_STEPS_PER_REFRESH={max(1, steps // 2)}", "N_EVAL_EPISODES=1", "EVAL_MAX_STEPS=100",
    ],
    "gym/dqn.gin": lambda steps: [
        "K=2", f"DQN_TRAIN_STEPS_PER_REFRESH={max(1, steps // 2)}", "N_EVAL_EPISODES=1", "EVAL_MAX_STEPS=100",
    ],
}  # fmt: skip
COMMON = ["INITIAL_COLLECT_STEPS=1000", "EVAL_INTERVAL=0", "OnlineExperiment.log_interval=100000"]
#: --toy: CartPole DQN (unless --configs), tiny networks and batches, 4 steps, S = 2
TOY_CONFIGS = ("gym/dqn.gin",)
TOY = {
    "bicycle_online/prodqn.gin": [
        "BicycleOnlineEnv.hidden=[8]",
        "W_SIZE=4",
        "W_BATCH_SIZE=2",
        "BATCH_SIZE=16",
    ],
    "lunar_lander/dqn.gin": ["LunarLanderEnv.hidden=[8]", "BATCH_SIZE=16"],
    "gym/dqn.gin": ["GymOnlineEnv.hidden=[8]", "BATCH_SIZE=16"],
}
TOY_COMMON = ["INITIAL_COLLECT_STEPS=40", "DQNConfig.jit_compile=False", "ProDQNConfig.jit_compile=False"]


def define_flags():
    flags.DEFINE_list("configs", list(CONFIGS), "Online gin files to time.")
    flags.DEFINE_list("seeds", ["1", "5", "10"], "The numbers of seeds S.")
    flags.DEFINE_integer("steps", 500, "Training steps of each seed.", lower_bound=1)
    flags.DEFINE_integer(
        "rounds", 1, "Rounds per S (each a batched and a separate measurement).", lower_bound=1
    )
    flags.DEFINE_boolean("toy", False, "CartPole DQN at tiny sizes, S = 2 (a check that it runs).")
    flags.DEFINE_string("output", None, "Write the results as JSON here.")


def bindings(gin_file: str, steps: int, toy: bool) -> list[str]:
    """The gin bindings of one gin file's runs (`SIZES`, `COMMON`; `TOY` with ``toy``)."""
    out = [*COMMON, *SIZES[gin_file](steps)]
    if toy:
        out += [*TOY_COMMON, *TOY[gin_file]]
    return out


def _train(gin_file: str, root: str, extra: list[str]) -> float:
    """Runs one ``launch/train.py`` process; returns its wall time."""
    cmd = [
        sys.executable,
        os.path.join(REPO, "launch", "train.py"),
        f"--gin_file={gin_file}",
        f"--root_dir={root}",
    ]
    cmd += [f"--gin_bindings={b}" for b in extra]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, check=False)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr[-2000:]}")
    return wall


def _seed_entries(root: str) -> list[dict]:
    with open(os.path.join(root, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    return metrics.get("per_seed") or [metrics]


def _summary(wall: float, entries: list[dict], n_seeds: int) -> dict:
    loop = sum(e["wall_time_s"] for e in entries)
    steps = sum(e["train_steps"] for e in entries)
    busy = sum(e["train_steps"] / e["loop_steps_per_s"] for e in entries if e.get("loop_steps_per_s"))
    return {
        "wall_s": wall,
        "seeds_per_hour": n_seeds * 3600.0 / wall,
        "loop_s": loop,
        "other_s": wall - loop,
        "steady_steps_per_s": steps / busy if busy else None,
    }


def measure_once(gin_file: str, n_seeds: int, extra: list[str], batched_first: bool, work: str) -> dict:
    """One batched and one separate measurement of ``n_seeds`` seeds (in the order ``batched_first``)."""
    out = {}
    for way in ("batched", "separate") if batched_first else ("separate", "batched"):
        root = tempfile.mkdtemp(dir=work)
        if way == "batched":
            folder = os.path.join(root, "run")
            wall = _train(gin_file, folder, [*extra, "SEED=0", f"NUM_SEEDS={n_seeds}"])
            entries = _seed_entries(folder)
        else:
            wall, entries = 0.0, []
            for seed in range(n_seeds):
                folder = os.path.join(root, f"seed_{seed}")
                wall += _train(gin_file, folder, [*extra, f"SEED={seed}"])
                entries += _seed_entries(folder)
        out[way] = _summary(wall, entries, n_seeds)
    return out


def measure(configs, seeds, steps: int, rounds: int, toy: bool, log=print) -> dict:
    result = {"cpu_count": os.cpu_count(), "steps": steps, "rounds": rounds, "configs": {}}
    with tempfile.TemporaryDirectory() as work:
        flip = True
        for gin_file in configs:
            extra = bindings(gin_file, steps, toy)
            per_s = {}
            for n_seeds in seeds:
                trials = []
                for _ in range(rounds):
                    trials.append(measure_once(gin_file, n_seeds, extra, flip, work))
                    flip = not flip
                ratio = statistics.median(
                    t["batched"]["seeds_per_hour"] / t["separate"]["seeds_per_hour"] for t in trials
                )
                steady = [
                    t["batched"]["steady_steps_per_s"] / t["separate"]["steady_steps_per_s"]
                    for t in trials
                    if t["batched"]["steady_steps_per_s"] and t["separate"]["steady_steps_per_s"]
                ]
                per_s[str(n_seeds)] = {
                    "trials": trials,
                    "batched_over_separate": ratio,
                    "steady_batched_over_separate": statistics.median(steady) if steady else None,
                }
                b, s = trials[-1]["batched"], trials[-1]["separate"]
                log(
                    f"{gin_file} S={n_seeds}: seeds/h batched {b['seeds_per_hour']:.0f} "
                    f"(wall {b['wall_s']:.1f}s, loop {b['loop_s']:.1f}s), "
                    f"separate {s['seeds_per_hour']:.0f} (wall {s['wall_s']:.1f}s, "
                    f"loop {s['loop_s']:.1f}s): x{ratio:.2f}"
                )
            result["configs"][gin_file] = per_s
    return result


def table(result: dict) -> str:
    """The markdown table of a result: one row per gin file and S."""
    lines = [
        "| gin file | S | seeds/h batched | seeds/h separate | ratio | wall batched (loop + other) s "
        "| wall separate (loop + other) s | steady steps/s ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for gin_file, per_s in result["configs"].items():
        for n_seeds, entry in per_s.items():
            b = statistics.median(t["batched"]["seeds_per_hour"] for t in entry["trials"])
            s = statistics.median(t["separate"]["seeds_per_hour"] for t in entry["trials"])
            tb, ts = entry["trials"][-1]["batched"], entry["trials"][-1]["separate"]
            steady = entry["steady_batched_over_separate"]
            lines.append(
                f"| {gin_file} | {n_seeds} | {b:.0f} | {s:.0f} | {entry['batched_over_separate']:.2f} | "
                f"{tb['wall_s']:.1f} ({tb['loop_s']:.1f} + {tb['other_s']:.1f}) | "
                f"{ts['wall_s']:.1f} ({ts['loop_s']:.1f} + {ts['other_s']:.1f}) | "
                + ("n/a" if steady is None else f"{steady:.2f}")
                + " |"
            )
    return "\n".join(lines)


def main(argv):
    del argv
    seeds = [2] if FLAGS.toy else [int(s) for s in FLAGS.seeds]
    steps, rounds = (4, 1) if FLAGS.toy else (FLAGS.steps, FLAGS.rounds)
    configs = TOY_CONFIGS if FLAGS.toy and FLAGS["configs"].using_default_value else FLAGS.configs
    unknown = set(configs) - set(SIZES)
    if unknown:
        raise app.UsageError(f"unknown --configs {sorted(unknown)}; known: {sorted(SIZES)}")
    result = measure(configs, seeds, steps, rounds, FLAGS.toy)
    print(f"{result['cpu_count']} CPUs, {steps} training steps per seed")
    print(table(result))
    if FLAGS.output:
        with open(FLAGS.output, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    define_flags()
    app.run(main)
