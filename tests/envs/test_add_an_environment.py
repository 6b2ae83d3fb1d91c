"""docs/adding_an_environment.md's recipe, followed on a toy MDP: a package outside pbo_tf (its dynamics,
gymnasium env, dataset and exact solution in ``mdp.py``, its offline problem in ``problem.py``), one
`pbo_tf.envs.registry.register` call and one gin folder; FQI run by the real runner.

The toy: states 0, 1, 2 on a line, actions 0 (left) and 1 (right), deterministic moves clipped at the ends;
a transition pays 1 when it lands on state 2, else 0; γ = 1/2. By hand: ``V*(2) = 1 / (1 − γ) = 2``,
``V*(1) = 1 + γ V*(2) = 2``, ``V*(0) = γ V*(1) = 1``, so ``Q*(s, a) = r(s, a) + γ V*(s')`` is
``[[0.5, 1], [0.5, 2], [1, 2]]``. FQI on the table family starts from ``Q_0 = 0`` and, on a dataset holding
every ``(s, a)``, its iterate ``Q_k`` fits ``T^k 0`` (value iteration from zero, written out in the test).
"""

import json
import pathlib
import textwrap

import gymnasium
import numpy as np
import pytest

from pbo_tf.envs import registry
from pbo_tf.experiments import run_experiment
from pbo_tf.experiments.config import GIN_CONFIGS_DIR, parse_config

GAMMA = 0.5
Q_STAR = np.array([[0.5, 1.0], [0.5, 2.0], [1.0, 2.0]])  # worked out by hand (module docstring)
K = 6

PACKAGE = {
    "__init__.py": '''
        """A toy chain (tests/envs/test_add_an_environment.py)."""

        from toy_chain_env.mdp import GAMMA, N_ACTIONS, N_STATES, ToyChainEnv, collect_dataset, optimal_q

        __all__ = ["GAMMA", "N_ACTIONS", "N_STATES", "ToyChainEnv", "collect_dataset", "optimal_q"]
        ''',
    "mdp.py": '''
        """Dynamics, gymnasium env, dataset and exact solution: NumPy and gymnasium only."""

        import gymnasium
        import numpy as np
        from gymnasium import spaces

        N_STATES, N_ACTIONS, GAMMA = 3, 2, 0.5


        def step(state, action):
            next_state = np.clip(state + 2 * action - 1, 0, N_STATES - 1)
            return next_state, (next_state == N_STATES - 1).astype(np.float64)


        def optimal_q(gamma=GAMMA, sweeps=200):
            states = np.repeat(np.arange(N_STATES), N_ACTIONS)
            actions = np.tile(np.arange(N_ACTIONS), N_STATES)
            next_states, rewards = step(states, actions)
            q = np.zeros(N_STATES * N_ACTIONS)
            for _ in range(sweeps):
                q = rewards + gamma * q.reshape(N_STATES, N_ACTIONS).max(1)[next_states]
            return q.reshape(N_STATES, N_ACTIONS)


        def collect_dataset(seed, repetitions=1):
            from pbo_tf.data.transitions import Transitions

            states = np.repeat(np.arange(N_STATES), N_ACTIONS * repetitions)
            actions = np.tile(np.repeat(np.arange(N_ACTIONS), repetitions), N_STATES)
            next_states, rewards = step(states, actions)
            return Transitions.from_arrays(states, actions, rewards, next_states, np.zeros(len(states)))


        class ToyChainEnv(gymnasium.Env):
            observation_space = spaces.Discrete(N_STATES)
            action_space = spaces.Discrete(N_ACTIONS)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self._state = 0
                return self._state, {}

            def step(self, action):
                next_state, reward = step(np.int64(self._state), np.int64(action))
                self._state = int(next_state)
                return self._state, float(reward), False, False, {}
        ''',
    "problem.py": '''
        """The offline view: a gin-configurable pbo_tf.envs.base.Problem."""

        import gin
        import numpy as np

        from pbo_tf.envs.base import Problem
        from pbo_tf.q import TableQ
        from toy_chain_env import mdp


        @gin.configurable
        class ToyChainProblem(Problem):
            name = "toy_chain"
            main_metric = "q_error_rms"

            def __init__(self, gamma=mdp.GAMMA, repetitions=1):
                self.gamma, self.repetitions = float(gamma), int(repetitions)
                self.q_star = mdp.optimal_q(self.gamma)

            def q_family(self):
                return TableQ(mdp.N_STATES, mdp.N_ACTIONS)

            def dataset(self, seed):
                return mdp.collect_dataset(seed, self.repetitions)

            def dataset_layout(self):
                size = mdp.N_STATES * mdp.N_ACTIONS * self.repetitions
                return dict(size=size, state_shape=(), integer_states=True, integer_actions=True, n_actions=2)

            def reference(self, dataset=None):
                return {"optimal_q_rms": float(np.sqrt(np.mean(self.q_star**2)))}

            def evaluate(self, params, dataset=None):
                diff = np.asarray(params, np.float64) - self.q_star.reshape(1, -1)
                return [{"q_error_rms": float(v)} for v in np.sqrt(np.mean(diff**2, axis=1))]
        ''',
}

#: The gin folder: its common.gin, and FQI's file as chain-walk's (`_algorithm_file`).
COMMON_GIN = f"""
    import pbo_tf.experiments.runner
    import toy_chain_env.problem

    K = {K}
    EXTRA_ITERATIONS = 0       # the curve stops at K
    MAX_EPOCHS = 300           # FQI maximum epochs per iteration
    PATIENCE = 300             # FQI epochs without improvement before stopping an iteration
    Experiment.problem = 'toy_chain'
    ToyChainProblem.gamma = {GAMMA}
    ToyChainProblem.repetitions = 10   # dataset: every (s, a) x 10 = 60 transitions
    """


def _algorithm_file(algorithm):
    """The shipped chain-walk file of ``algorithm``, including the toy's common.gin instead."""
    text = (pathlib.Path(GIN_CONFIGS_DIR) / "chain_walk" / f"{algorithm}.gin").read_text()
    assert "include 'chain_walk/common.gin'" in text
    return text.replace("include 'chain_walk/common.gin'", "include 'toy_chain/common.gin'")


def _write(folder, files):
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())


@pytest.fixture
def toy_chain(tmp_path, monkeypatch):
    """The toy package on sys.path, registered under ``toy_chain`` (and ``toy/ToyChain-v0``)."""
    _write(tmp_path / "src" / "toy_chain_env", PACKAGE)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    entry = registry.register(
        "toy_chain",
        problem="toy_chain_env.problem:ToyChainProblem",
        gym_id="toy/ToyChain-v0",
        entry_point="toy_chain_env.mdp:ToyChainEnv",
        max_episode_steps=5,
    )
    yield entry
    registry.unregister("toy_chain")


def test_a_toy_environment_added_by_the_recipe_runs_fqi_to_its_value_iteration(toy_chain, tmp_path):
    assert "toy_chain" in registry.names("problem") and "toy_chain" not in registry.names("online")
    assert registry.ENV_IDS["toy_chain"] == "toy/ToyChain-v0"
    # The gymnasium registration: the env steps right from 0 to the goal, then stays, cut at 5 steps.
    env = gymnasium.make("toy/ToyChain-v0")
    env.reset(seed=0)
    steps = [env.step(1)[:4] for _ in range(5)]
    assert steps == [(1, 0.0, False, False), (2, 1.0, False, False), *[(2, 1.0, False, False)] * 2] + [
        (2, 1.0, False, True)
    ]

    _write(tmp_path / "gin" / "toy_chain", {"common.gin": COMMON_GIN, "fqi.gin": _algorithm_file("fqi")})
    parse_config([str(tmp_path / "gin" / "toy_chain" / "fqi.gin")], ["FQIConfig.jit_compile = False"])
    metrics = run_experiment(str(tmp_path / "run"), log=None)

    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert (on_disk["env"], on_disk["algorithm"], on_disk["K"]) == ("toy_chain", "fqi", K)
    assert on_disk["curve"] == metrics["curve"]
    assert metrics["reference"]["optimal_q_rms"] == pytest.approx(np.sqrt(np.mean(Q_STAR**2)), rel=1e-12)
    # Value iteration from Q_0 = 0, by hand: Q_{k+1}(s, a) = r(s, a) + γ max_a' Q_k(s', a').
    next_state = np.array([[0, 1], [0, 2], [1, 2]])
    reward = (next_state == 2).astype(float)
    q = np.zeros((3, 2))
    iterates = np.load(tmp_path / "run" / "iterates.npz")["iterates"]
    assert iterates.shape == (K + 1, 6)
    for k, entry in enumerate(metrics["curve"]):
        assert entry["k"] == k
        np.testing.assert_allclose(iterates[k].reshape(3, 2), q, atol=5e-4, err_msg=f"k={k}")
        want = np.sqrt(np.mean((q - Q_STAR) ** 2))
        assert entry["q_error_rms"] == pytest.approx(want, abs=5e-4 if k else 1e-12), k
        q = reward + GAMMA * q.max(1)[next_state]
    # After K = 6 iterations from 0, the error is at most γ^K max|Q*| = 2 / 64.
    assert np.abs(iterates[K].reshape(3, 2) - Q_STAR).max() < 2 / 2**K + 5e-4
