"""Shared by the runner tests: bindings that shrink every offline gin file to test size."""

import os

import numpy as np

from pbo_tf.experiments.config import parse_config
from pbo_tf.experiments.runner import Experiment

# |W| = 30 or 50 costs one Keras model build per member; 4 exercise the same code.
SMALL_W = ["ProFQIConfig.w_size = 4", "ProFQIConfig.w_batch_size = 2"]
# Per-env bindings that shrink datasets and evaluations to test size.
ENV_TINY = {
    "car_on_hill": ["CarOnHillProblem.n_random = 900", "CarOnHillProblem.n_oriented = 100", *SMALL_W],
    "bicycle_offline": ["BicycleProblem.n_transitions = 2000", "N_ROLLOUTS = 3", "MAX_STEPS = 300", *SMALL_W],
}
#: gin_configs/dataset/ (a user's file): `run_tiny` writes `tiny_dataset` beside the run folder and binds it.
DATASET_TINY = ["BATCH_SIZE = 20", *SMALL_W]
TINY = ["K=2", "REFRESHES=1", "PASSES_PER_REFRESH=1", "MAX_EPOCHS=2", "PATIENCE=1", "EXTRA_ITERATIONS=3"]
#: Online gin files at test size: K = 2 and 2 PBO applications past it, 3 ProDQN refreshes x 2 training steps,
#: |W| = 4 in batches of 2 (2 Adam steps per ProDQN training step), a replay of 300 from 40 random
#: transitions, batches of 16, 2 evaluation episodes of at most 30 steps.
ONLINE_K, ONLINE_EXTRA = 2, 2
ONLINE_TINY = [
    f"K={ONLINE_K}",
    f"EXTRA_ITERATIONS={ONLINE_EXTRA}",
    "REFRESHES=3",
    "TRAIN_STEPS_PER_REFRESH=2",
    "INITIAL_COLLECT_STEPS=40",
    "REPLAY_CAPACITY=300",
    "BATCH_SIZE=16",
    "W_SIZE=4",
    "W_BATCH_SIZE=2",
    "N_EVAL_EPISODES=2",
    "EVAL_MAX_STEPS=30",
]
#: The online gin files' cheap graphs at test size: the training steps in graph mode (no XLA compilation;
#: the XLA train steps are tested in tests/agents), and the equivariant operator (prodqn_equivariant.gin:
#: [16, 16]) with one hidden layer, whose training step's graph is a third smaller, and TensorFlow's first run
#: of it (graph optimisation) takes as much less. The layers' code is the same
#: (tests/operators/test_equivariant.py checks two hidden layers, [16, 16]).
ONLINE_GRAPH_MODE = [
    "DQNConfig.jit_compile=False",
    "IDQNConfig.jit_compile=False",
    "ProDQNConfig.jit_compile=False",
    "EquivariantPBO.channels=[4]",
    "EquivariantPBO.unroll_chain=False",  # one application in the graph, however large K
]
#: The fixed-point term's estimate Λ̄^N(ω₀) at N = 3 applications of the target operator where a gin file
#: asks for more: each application is traced and compiled (tests/trainers checks the term by hand).
FIXED_POINT_N = 3


def fixed_point_tiny(config: str = "ProFQIConfig") -> list[str]:
    """The binding that shrinks the parsed config's fixed-point estimate (``FixedPointTerm.iterations``, the
    same offline and online) to FIXED_POINT_N, if it asks for more. (``config`` is kept for the callers
    that name the algorithm's config.)"""
    import gin

    try:
        n = gin.query_parameter("FixedPointTerm.iterations")
    except ValueError:  # not bound: the term's default, no estimate
        return []
    return [f"FixedPointTerm.iterations = {FIXED_POINT_N}"] if n > FIXED_POINT_N else []


def parse_tiny(gin_file, bindings, config: str = "ProFQIConfig") -> None:
    """Parses ``gin_file`` with ``bindings``, then again with `fixed_point_tiny` where its estimate asks for
    more than FIXED_POINT_N applications."""
    parse_config([gin_file], bindings)
    if smaller := fixed_point_tiny(config):
        parse_config([gin_file], list(bindings) + smaller)


def run_tiny(gin_file, root, bindings=()):
    """Runs ``gin_file`` at test size (plus ``bindings``) into ``root``; returns its metrics."""
    env = os.path.basename(os.path.dirname(gin_file))
    env_tiny = ENV_TINY.get(env, [])
    if env == "dataset":
        path = f"{root}_dataset.npz"
        np.savez(path, **tiny_dataset())
        env_tiny = [*DATASET_TINY, f"DATASET = '{path}'"]
    bindings = list(TINY) + env_tiny + list(bindings)
    parse_tiny(gin_file, bindings)
    return Experiment(root_dir=str(root), log=None).run()


def tiny_dataset(n: int = 100, seed: int = 0) -> dict[str, np.ndarray]:
    """A user's file for gin_configs/dataset/: ``n`` transitions of 2-d states, 2 actions, the common key
    names (``observations``, ...); rewards N(0, 1), every 10th transition terminal."""
    rng = np.random.default_rng(seed)
    states = rng.uniform(-1, 1, (n, 2))
    return {
        "observations": states,
        "actions": rng.integers(0, 2, n),
        "rewards": rng.normal(size=n),
        "next_observations": np.clip(states + rng.normal(0, 0.1, (n, 2)), -1, 1),
        "terminals": (np.arange(n) % 10 == 9).astype(np.float64),
    }
