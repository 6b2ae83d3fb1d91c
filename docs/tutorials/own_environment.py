r"""Your own environment package, registered with pbo_tf through its entry point.

  python docs/tutorials/own_environment.py --work_dir=/tmp/own_env [--toy]

Writes a small package, ``my_walk_env`` (a six-state walk whose exact Q* is value iteration), into
``WORK/source``: its dynamics and gymnasium environment (``mdp.py``), its offline problem (``problem.py``),
the module that registers it with pbo_tf (``registration.py``), its gin files and a ``pyproject.toml``
whose ``[project.entry-points."pbo_tf.envs"]`` names that module. It installs the package into
``WORK/site`` (``pip install --target``; put the folder on ``PYTHONPATH``, or ``pip install`` it into your
environment), then runs the programs as a user does, each one finding ``my_walk`` through the entry point:

1. ``pbo-train`` FQI and ProFQI (``WORK/runs/fqi``, ``WORK/runs/profqi``);
2. ``pbo-apply`` the trained operator beyond the run's K, exporting it and its greedy policy
   (``WORK/export``);
3. ``pbo-play`` the exported policy in the package's gymnasium environment.

It prints each step's command and writes ``WORK/summary.json``: Q*, each run's ``q_error_rms`` against k, the
applied curve and the played returns. ``--toy`` shrinks the training (10 refreshes, 100 FQI epochs, graph
mode) so that the whole tutorial runs in well under a minute. docs/own_environment.md explains the steps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

from absl import app, flags

_WORK_DIR = flags.DEFINE_string("work_dir", None, "Folder for the package, its install and the runs.")
_TOY = flags.DEFINE_boolean(
    "toy", False, "Tiny training sizes: the tutorial finishes in well under a minute."
)

#: The package, file by file (what you would write in your own repository).
PACKAGE = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "my-walk-env"
        version = "0.1.0"
        dependencies = ["pbo_tf", "gymnasium", "numpy"]

        # pbo_tf loads this module on its first environment lookup; the module registers my_walk.
        [project.entry-points."pbo_tf.envs"]
        my_walk = "my_walk_env.registration"

        [tool.setuptools]
        packages = ["my_walk_env"]

        [tool.setuptools.package-data]
        my_walk_env = ["gin_configs/*/*.gin"]
        """,
    "my_walk_env/__init__.py": '''
        """A six-state walk for pbo_tf (imports nothing: the entry point loads registration.py only)."""
        ''',
    "my_walk_env/registration.py": '''
        """Registers my_walk with pbo_tf: the module the pbo_tf.envs entry point names."""

        from pbo_tf.envs import registry

        registry.register(
            "my_walk",  # Experiment.problem = 'my_walk'
            problem="my_walk_env.problem:MyWalkProblem",  # lazy: imported when a run asks for it
            gym_id="my_walk_env/MyWalk-v0",
            entry_point="my_walk_env.mdp:MyWalkEnv",
            max_episode_steps=12,
        )
        ''',
    "my_walk_env/mdp.py": '''
        """States 0..5 on a line, actions 0 (left) and 1 (right), reward 1 for landing on 5; γ = 0.7."""

        import gymnasium
        import numpy as np
        from gymnasium import spaces

        N_STATES, N_ACTIONS, GAMMA = 6, 2, 0.7


        def step(state, action):
            next_state = np.clip(np.asarray(state) + 2 * np.asarray(action) - 1, 0, N_STATES - 1)
            return next_state, (next_state == N_STATES - 1).astype(np.float64)


        def optimal_q(gamma=GAMMA, sweeps=500):
            """Q* [N_STATES, 2] by value iteration."""
            states, actions = np.meshgrid(np.arange(N_STATES), np.arange(N_ACTIONS), indexing="ij")
            next_states, rewards = step(states, actions)
            q = np.zeros((N_STATES, N_ACTIONS))
            for _ in range(sweeps):
                q = rewards + gamma * q.max(axis=1)[next_states]
            return q


        def collect_dataset(repetitions):
            """Every (s, a) `repetitions` times; states are the observations, [n, 1] floats."""
            from pbo_tf.data.transitions import Transitions

            states = np.repeat(np.arange(N_STATES), N_ACTIONS * repetitions)
            actions = np.tile(np.repeat(np.arange(N_ACTIONS), repetitions), N_STATES)
            next_states, rewards = step(states, actions)
            obs, next_obs = (s.astype(np.float32)[:, None] for s in (states, next_states))
            return Transitions.from_arrays(obs, actions, rewards, next_obs, np.zeros(len(states)))


        class MyWalkEnv(gymnasium.Env):
            observation_space = spaces.Box(0.0, N_STATES - 1.0, shape=(1,), dtype=np.float32)
            action_space = spaces.Discrete(N_ACTIONS)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self._state = 0
                return np.array([0.0], np.float32), {}

            def step(self, action):
                next_state, reward = step(self._state, int(action))
                self._state = int(next_state)
                return np.array([self._state], np.float32), float(reward), False, False, {}
        ''',
    "my_walk_env/problem.py": '''
        """The offline problem: a tabular Q, the dataset, the metric against Q*."""

        import gin
        import numpy as np

        from my_walk_env import mdp
        from pbo_tf.envs.base import Problem
        from pbo_tf.q import TableQ


        @gin.configurable
        class MyWalkProblem(Problem):
            name = "my_walk"
            main_metric = "q_error_rms"

            def __init__(self, gamma: float = mdp.GAMMA, repetitions: int = 2):
                self.gamma, self.repetitions = float(gamma), int(repetitions)
                self.q_star = mdp.optimal_q(self.gamma)

            def q_family(self):
                return TableQ(mdp.N_STATES, mdp.N_ACTIONS)

            def dataset(self, seed):
                return mdp.collect_dataset(self.repetitions)

            def dataset_layout(self):
                size = mdp.N_STATES * mdp.N_ACTIONS * self.repetitions
                kinds = dict(integer_states=False, integer_actions=True, n_actions=mdp.N_ACTIONS)
                return dict(size=size, state_shape=(1,), **kinds)

            def evaluate(self, params, dataset=None):
                diff = np.asarray(params, np.float64) - self.q_star.reshape(1, -1)
                return [{"q_error_rms": float(v)} for v in np.sqrt(np.mean(diff**2, axis=1))]
        ''',
    "my_walk_env/gin_configs/my_walk/common.gin": """
        import pbo_tf.experiments.runner

        K = 5                      # Bellman iterations
        SEED = 0
        EXTRA_ITERATIONS = 5       # PBO applications evaluated beyond K
        REFRESHES = 200            # ProFQI target refreshes
        PASSES_PER_REFRESH = 5     # ProFQI passes over D between two refreshes
        MAX_EPOCHS = 300           # FQI maximum epochs per iteration

        Experiment.problem = 'my_walk'
        Experiment.seed = %SEED
        MyWalkProblem.repetitions = 2     # dataset: every (s, a) x 2 = 24 transitions
        """,
    "my_walk_env/gin_configs/my_walk/fqi.gin": """
        include 'my_walk/common.gin'

        Experiment.algorithm = @FQI
        FQIConfig.K = %K
        FQIConfig.extra_iterations = %EXTRA_ITERATIONS
        FQIConfig.max_epochs = %MAX_EPOCHS
        FQIConfig.patience = %MAX_EPOCHS        # epochs
        FQIConfig.batch_size = 12               # transitions
        AnnealedAdam.lr_start = 5e-2
        AnnealedAdam.lr_end = 1e-4
        """,
    "my_walk_env/gin_configs/my_walk/profqi.gin": """
        include 'my_walk/common.gin'

        Experiment.algorithm = @ProFQI
        ProFQIConfig.K = %K
        ProFQIConfig.extra_iterations = %EXTRA_ITERATIONS
        ProFQIConfig.w_size = 20                # |W|
        make_pbo.kind = 'linear'
        make_pbo.init_std = 1e-5
        ProFQIConfig.refreshes = %REFRESHES
        ProFQIConfig.passes_per_refresh = %PASSES_PER_REFRESH
        ProFQIConfig.batch_size = 12            # transitions
        ProFQIConfig.w_batch_size = 20          # parameter vectors
        AnnealedAdam.lr_start = 1e-2
        AnnealedAdam.lr_end = 1e-5
        """,
}
#: What --toy binds on top of the gin files.
TOY = {
    "fqi": ["MAX_EPOCHS=100", "FQIConfig.jit_compile=False"],
    "profqi": ["REFRESHES=10", "ProFQIConfig.jit_compile=False"],
}


def write_package(folder: str) -> None:
    """Writes `PACKAGE` under ``folder``."""
    for name, text in PACKAGE.items():
        path = os.path.join(folder, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text).lstrip())


def install(source: str, site: str) -> None:
    """``pip install --no-deps --no-build-isolation --target site`` of a copy of ``source`` (pip builds in
    the tree it installs from)."""
    with tempfile.TemporaryDirectory() as build:
        tree = shutil.copytree(source, os.path.join(build, "tree"))
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
        run(
            [*command, "--no-index", "--upgrade", "--target", site, tree], show="pip install --target " + site
        )


def run(command: list[str], env: dict | None = None, show: str | None = None) -> str:
    """Runs ``command`` (printing ``show`` or the command first); returns its stdout; exits on failure."""
    print(f"$ {show or ' '.join(command)}", flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"failed (exit {done.returncode}): {' '.join(command)}\n{done.stdout}{done.stderr}")
    return done.stdout


def program(name: str, *args: str, site: str) -> str:
    """A pbo_tf program (``pbo-<name>`` is ``python -m pbo_tf.cli.<name>``) with ``site`` on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))}
    return run(
        [sys.executable, "-m", f"pbo_tf.cli.{name}", *args], env=env, show=f"pbo-{name} {' '.join(args)}"
    )


def curve(run_dir: str) -> list[float | None]:
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
        return [e["q_error_rms"] for e in json.load(f)["curve"] if e["k"] != "inf"]


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    work = os.path.abspath(_WORK_DIR.value or tempfile.mkdtemp(prefix="own_environment_"))
    source, site, runs = (os.path.join(work, name) for name in ("source", "site", "runs"))
    write_package(source)
    install(source, site)
    gin = os.path.join(site, "my_walk_env", "gin_configs", "my_walk")

    summary = {"work_dir": work, "toy": _TOY.value}
    for algorithm in ("fqi", "profqi"):
        toy = [f"--gin_bindings={b}" for b in TOY[algorithm]] if _TOY.value else []
        root = os.path.join(runs, algorithm)
        program("train", f"--root_dir={root}", f"--gin_file={os.path.join(gin, algorithm + '.gin')}", *toy,
                site=site)  # fmt: skip
        summary[algorithm] = curve(root)
    k_max = len(summary["profqi"]) + 5
    export = os.path.join(work, "export")
    program("apply", f"--run_dir={os.path.join(runs, 'profqi')}", f"--k_max={k_max}", f"--export={export}",
            site=site)  # fmt: skip
    with open(os.path.join(runs, "profqi", f"applied_k{k_max}.json"), encoding="utf-8") as f:
        summary["applied"] = [e["q_error_rms"] for e in json.load(f)["curve"]]
    played = program("play", f"--policy_dir={os.path.join(export, 'policy')}", "--env=my_walk_env/MyWalk-v0",
                     "--episodes=2", "--max_steps=12", "--gamma=0.7", site=site)  # fmt: skip
    summary["played"] = json.loads(played.strip().splitlines()[-1])

    path = os.path.join(work, "summary.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    print("\nq_error_rms (distance to Q*) against k:")
    for name in ("fqi", "profqi", "applied"):
        print(f"  {name:8s}", " ".join("-" if v is None else f"{v:.3f}" for v in summary[name]))
    print(f"greedy policy at k = K, played: return {summary['played']['mean_return']:.1f}")
    print(f"Wrote {path}")


if __name__ == "__main__":
    app.run(main)
