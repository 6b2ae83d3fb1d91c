r"""ProFQI on your own arrays, from .npz to figure.

    python docs/tutorials/own_dataset.py --work_dir=own_dataset [--toy]

1. Makes an offline dataset the way you might have one: transitions of a uniform-random policy in
   gymnasium's ``CartPole-v1``, as five arrays ``observations [N, 4]``, ``actions [N]``, ``rewards [N]``,
   ``next_observations [N, 4]``, ``terminals [N]`` saved to ``<work_dir>/cartpole_random.npz``.
2. Trains FQI and ProFQI on it with the shipped ``gin_configs/dataset/{fqi,profqi}.gin``, through
   ``pbo-train`` (run here as ``python -m pbo_tf.cli.train``), binding ``DATASET`` to the file and
   ``GYM_ID`` to ``CartPole-v1`` so that each ``Q_k`` is evaluated by greedy rollouts there.
3. Plots both curves over k with ``pbo-plot`` to ``<work_dir>/figure.png``: the runs' main metric, the
   undiscounted episode ``return`` of the greedy rollouts (``discounted_return`` and ``episode_length``
   are in each ``metrics.json`` curve too; ``--metric=discounted_return`` plots the former).

Every command is printed before it runs, so you can run them yourself on your own file. ``--toy`` shrinks
the dataset, the training and the rollouts so that the whole script finishes in well under a minute (the
numbers then say nothing about the methods); without it the budget is still far below the defaults of the
gin files (car-on-hill's: 1000 target refreshes × 10 passes).
"""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium
import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("work_dir", "own_dataset", "Folder for the dataset, the runs and the figure.")
flags.DEFINE_boolean("toy", False, "Tiny sizes: finishes in well under a minute.")
flags.DEFINE_integer("seed", 0, "Seed of the data collection and of the runs.")

#: (transitions, gin bindings shared by both runs) per mode.
SIZES = {
    True: (
        600,
        [
            "K = 2", "EXTRA_ITERATIONS = 2", "BATCH_SIZE = 100", "HIDDEN = [16]", "MAX_EPOCHS = 5",
            "PATIENCE = 5", "REFRESHES = 2", "PASSES_PER_REFRESH = 1", "ProFQIConfig.w_size = 4",
            "ProFQIConfig.w_batch_size = 4", "DatasetProblem.eval_episodes = 2",
            "DatasetProblem.eval_max_steps = 100", "FQIConfig.jit_compile = False",
            "ProFQIConfig.jit_compile = False",
        ],
    ),
    False: (
        20_000,
        ["K = 5", "REFRESHES = 50", "MAX_EPOCHS = 100", "DatasetProblem.eval_episodes = 20"],
    ),
}  # fmt: skip


def collect(path: str, n: int, seed: int) -> None:
    """``n`` transitions of a uniform-random policy in CartPole-v1 (episodes reset on termination or after
    500 steps), saved with the common key names; a truncated episode's last step is not terminal."""
    env = gymnasium.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    columns = {k: [] for k in ("observations", "actions", "rewards", "next_observations", "terminals")}
    episodes = 0
    while len(columns["actions"]) < n:
        action = int(rng.integers(env.action_space.n))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(columns, (obs, action, reward, next_obs, float(terminated)), strict=True):
            columns[key].append(value)
        obs = next_obs
        if terminated or truncated:
            episodes += 1
            obs, _ = env.reset(seed=seed + episodes)
    env.close()
    np.savez(path, **{key: np.asarray(value) for key, value in columns.items()})
    print(f"Wrote {path}: {n} transitions of {episodes} finished episodes")


def run(program: str, args: list[str]) -> None:
    """Prints the command ``program args`` as a user types it (``pbo-train ...``), then runs it as
    ``python -m pbo_tf.cli.<name>`` (the same program), stopping the tutorial if it fails."""
    shown = (f'"{a}"' if " " in a or "'" in a else a for a in args)  # no argument holds a double quote
    print("$", program, " ".join(shown), flush=True)
    subprocess.run([sys.executable, "-m", f"pbo_tf.cli.{program.removeprefix('pbo-')}", *args], check=True)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    workdir = os.path.abspath(FLAGS.work_dir)
    os.makedirs(workdir, exist_ok=True)
    n, sizes = SIZES[FLAGS.toy]
    dataset = os.path.join(workdir, "cartpole_random.npz")
    collect(dataset, n, FLAGS.seed)

    bindings = [f"DATASET = '{dataset}'", "GYM_ID = 'CartPole-v1'", f"SEED = {FLAGS.seed}", *sizes]
    for algorithm in ("fqi", "profqi"):
        run("pbo-train", [
            f"--gin_file=dataset/{algorithm}.gin", f"--root_dir={os.path.join(workdir, 'runs', algorithm)}",
            *(f"--gin_bindings={b}" for b in bindings),
        ])  # fmt: skip
    figure = os.path.join(workdir, "figure.png")
    run("pbo-plot", [
        f"--root_dir={os.path.join(workdir, 'runs')}",
        f"--output={figure}", "--title=CartPole-v1 from a random policy's data",
    ])  # fmt: skip


if __name__ == "__main__":
    app.run(main)
