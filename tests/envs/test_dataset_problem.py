"""A user's own dataset as an offline problem (`pbo_tf.envs.dataset`): the same transitions from an ``.npz``
and from a Minari dataset, FQI on a tabular file against value iteration on that file's empirical MDP
(counts by hand), the held-out Bellman residual by hand, rollouts against gymnasium, every bad file refused
in one line before training, and a tiny ProFQI run through pbo-train and pbo-apply."""

import json
import os
import re
import sys

import gymnasium
import numpy as np
import pytest

from pbo_tf.cli import common as cli
from pbo_tf.data.transitions import Transitions
from pbo_tf.envs.dataset.problem import DatasetProblem
from pbo_tf.envs.dataset.source import DatasetFileError
from pbo_tf.envs.gym.evaluation import evaluate_greedy
from pbo_tf.experiments import run_experiment, run_folder
from pbo_tf.experiments.config import parse_config
from pbo_tf.q import FlatMLPQ


def cartpole_episodes(n_episodes=3, seed=0):
    """Uniform-random CartPole-v1 episodes: per episode the observations ``[T + 1, 4]``, actions, rewards,
    terminations and truncations ``[T]``."""
    env = gymnasium.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    episodes = []
    for e in range(n_episodes):
        obs, _ = env.reset(seed=seed * 1000 + e)
        ep = {"observations": [obs], "actions": [], "rewards": [], "terminations": [], "truncations": []}
        while True:
            action = int(rng.integers(2))
            obs, reward, terminated, truncated, _ = env.step(action)
            for key, value in zip(
                ("observations", "actions", "rewards", "terminations", "truncations"),
                (obs, action, reward, terminated, truncated),
                strict=True,
            ):
                ep[key].append(value)
            if terminated or truncated:
                break
        episodes.append({k: np.asarray(v) for k, v in ep.items()})
    env.close()
    return episodes


def episodes_to_arrays(episodes):
    """The common ``.npz`` keys of the episodes' transitions (``terminals`` = terminations)."""
    return {
        "observations": np.concatenate([e["observations"][:-1] for e in episodes]),
        "actions": np.concatenate([e["actions"] for e in episodes]),
        "rewards": np.concatenate([e["rewards"] for e in episodes]),
        "next_observations": np.concatenate([e["observations"][1:] for e in episodes]),
        "terminals": np.concatenate([e["terminations"] for e in episodes]).astype(np.float64),
    }


def test_an_npz_and_a_local_minari_dataset_give_the_same_transitions(tmp_path, monkeypatch):
    minari = pytest.importorskip("minari")
    from minari.data_collector.episode_buffer import EpisodeBuffer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    episodes = cartpole_episodes()
    env = gymnasium.make("CartPole-v1")
    buffers = [
        EpisodeBuffer(id=i, observations=e["observations"], actions=e["actions"], rewards=list(e["rewards"]),
                      terminations=list(e["terminations"]), truncations=list(e["truncations"]), infos={})
        for i, e in enumerate(episodes)
    ]  # fmt: skip
    with pytest.warns(UserWarning):  # Minari asks for an author e-mail and a description
        minari.create_dataset_from_buffers("cartpole/random-v0", buffers, env=env, algorithm_name="random")
    arrays = episodes_to_arrays(episodes)
    np.savez(tmp_path / "common.npz", **arrays)
    Transitions.from_arrays(
        arrays["observations"], arrays["actions"], arrays["rewards"], arrays["next_observations"],
        arrays["terminals"],
    ).save(str(tmp_path / "own.npz"))  # fmt: skip

    by_id = DatasetProblem(path="minari:cartpole/random-v0")
    by_folder = DatasetProblem(path=f"minari:{tmp_path / 'minari' / 'cartpole' / 'random-v0'}")
    common = DatasetProblem(path=str(tmp_path / "common.npz"), holdout_fraction=0.2)
    own = DatasetProblem(path=str(tmp_path / "own.npz"), holdout_fraction=0.2)
    n = sum(len(e["actions"]) for e in episodes)
    for problem in (by_id, by_folder, common, own):
        data = problem.all_transitions
        assert len(data) == n
        np.testing.assert_array_equal(data.state, arrays["observations"].astype(np.float32))
        np.testing.assert_array_equal(data.next_state, arrays["next_observations"].astype(np.float32))
        np.testing.assert_array_equal(data.action, arrays["actions"])
        np.testing.assert_array_equal(data.reward, arrays["rewards"])
        np.testing.assert_array_equal(data.done, arrays["terminals"])
        assert (data.state.dtype, data.action.dtype) == (np.float32, np.int32)
    # Each episode's last transition is terminal (the pole fell), and no other one is.
    assert by_id.all_transitions.done.sum() == len(episodes) and by_id.all_transitions.done[n - 1] == 1
    # The Minari dataset brings its env spec: rollouts in CartPole-v1, cut at its 500 steps, no held-out part.
    assert (by_id.env_id, by_id.eval_max_steps, by_id.holdout_fraction) == ("CartPole-v1", 500, 0.0)
    assert (by_id.main_metric, len(by_id.dataset(0))) == ("return", n)
    assert (common.env_id, common.main_metric) == (None, "bellman_residual")
    assert DatasetProblem(path="minari:cartpole/random-v0", use_dataset_env=False).env_id is None
    # Each names its source (by id, by folder, by file name) and gym id; the same transitions, one digest.
    assert [p.label for p in (by_id, by_folder, common, own)] == [
        "dataset minari:cartpole/random-v0 (CartPole-v1)", "dataset minari:random-v0 (CartPole-v1)",
        "dataset common.npz", "dataset own.npz",
    ]  # fmt: skip
    assert len({p.digest for p in (by_id, by_folder, common, own)}) == 1


def three_state_file(path, seed=0, repetitions=8):
    """A tabular file on a 3-state stochastic chain: every (s, a) ``repetitions`` times, the intended move
    (a = 0 left, 1 right) with probability 0.7, else stay; reward N(s' == 2, 0.1²); state 2 under action 1
    terminal with probability 0.2. Returns its arrays."""
    rng = np.random.default_rng(seed)
    s = np.repeat(np.arange(3), 2 * repetitions)
    a = np.tile(np.repeat(np.arange(2), repetitions), 3)
    move = np.where(rng.uniform(size=len(s)) < 0.7, 2 * a - 1, 0)
    s2 = np.clip(s + move, 0, 2)
    r = (s2 == 2) + rng.normal(0, 0.1, len(s))
    done = ((s == 2) & (a == 1) & (rng.uniform(size=len(s)) < 0.2)).astype(float)
    arrays = dict(state=s, action=a, reward=r, next_state=s2, done=done)
    np.savez(path, **arrays)
    return arrays


def test_fqi_on_a_tabular_file_is_value_iteration_on_its_empirical_mdp(tmp_path):
    three_state_file(tmp_path / "chain.npz")
    gamma, K = 0.5, 4
    bindings = [
        f"DATASET = '{tmp_path / 'chain.npz'}'", f"GAMMA = {gamma}", f"K = {K}", "EXTRA_ITERATIONS = 0",
        "MAX_EPOCHS = 500", "PATIENCE = 500", "BATCH_SIZE = 38",  # 48 - round(0.2 · 48) held out: full batch
        "AnnealedAdam.lr_start = 5e-2", "AnnealedAdam.lr_end = 1e-5", "FQIConfig.jit_compile = False",
    ]  # fmt: skip
    parse_config(["dataset/fqi.gin"], bindings)
    metrics = run_experiment(str(tmp_path / "run"), log=None)

    # The empirical MDP of the transitions the run trained on, counted by hand.
    with np.load(tmp_path / "run" / "dataset.npz") as f:
        s, a, r, s2, done = (f[k] for k in ("state", "action", "reward", "next_state", "done"))
    assert len(s) == 38
    counts = np.zeros((3, 2))
    reward_sum = np.zeros((3, 2))
    to = np.zeros((3, 2, 3))  # non-terminal transitions (s, a) -> s'
    for i in range(len(s)):
        counts[s[i], a[i]] += 1
        reward_sum[s[i], a[i]] += r[i]
        to[s[i], a[i], s2[i]] += 1 - done[i]
    assert counts.min() > 0  # every (s, a) was kept
    r_hat, p_hat = reward_sum / counts, to / counts[..., None]  # P̂ sums to 1 − P̂(terminal)
    iterates = np.load(tmp_path / "run" / "iterates.npz")["iterates"]
    assert iterates.shape == (K + 1, 6)
    q = np.zeros((3, 2))
    for k in range(K + 1):
        # Each FQI iterate is a least-squares fit of the table to the batch's targets, i.e. per (s, a) their
        # mean R̂ + γ P̂ max Q_{k-1}; full-batch Adam to lr 1e-5 fits it to ~1e-5, and the errors of earlier
        # fits add up at most as Σ γ^j ≤ 2 of them: 2e-4 leaves room for float32 sums.
        np.testing.assert_allclose(iterates[k].reshape(3, 2), q, atol=2e-4, err_msg=f"k={k}")
        q = r_hat + gamma * p_hat @ q.max(axis=1)
    # Its curve is the held-out residual of each iterate, computed here on the 10 rows the run left out.
    with np.load(tmp_path / "chain.npz") as f:
        file = {k: f[k] for k in f.files}
    trained = {tuple(row) for row in np.stack([s, a, r.astype(np.float32), s2, done], 1).tolist()}
    rows = np.stack([file["state"], file["action"], file["reward"].astype(np.float32), file["next_state"],
                     file["done"]], 1).tolist()  # fmt: skip
    held = np.array([i for i, row in enumerate(rows) if tuple(row) not in trained])
    assert len(held) == 10
    hs, ha, hs2, hd = (file[k][held] for k in ("state", "action", "next_state", "done"))
    hr = file["reward"][held].astype(np.float32).astype(np.float64)
    for k, entry in enumerate(metrics["curve"]):
        table = iterates[k].reshape(3, 2).astype(np.float64)
        want = np.mean((hr + gamma * (1 - hd) * table[hs2].max(1) - table[hs, ha]) ** 2)
        assert entry["bellman_residual"] == pytest.approx(want, rel=1e-5), k
        assert entry["bellman_residual_rms"] == pytest.approx(np.sqrt(want), rel=1e-5), k
    assert metrics["reference"]["zero_q_bellman_residual"] == pytest.approx(np.mean(hr**2), rel=1e-6)


def test_the_held_out_residual_by_hand(tmp_path):
    # Four transitions on 2 states; seed 0 holds out round(0.5 · 4) = 2 of them (whichever: checked below).
    np.savez(
        tmp_path / "d.npz", state=[0, 1, 1, 0], action=[1, 0, 1, 0], reward=[1.0, 0.0, 2.0, -1.0],
        next_state=[1, 1, 0, 0], done=[0, 0, 1, 0],
    )  # fmt: skip
    problem = DatasetProblem(path=str(tmp_path / "d.npz"), gamma=0.5, holdout_fraction=0.5)
    train = problem.dataset(0)
    held = problem.held_out(train)
    assert len(train) == len(held) == 2
    assert sorted(np.concatenate([train.reward, held.reward]).tolist()) == [-1.0, 0.0, 1.0, 2.0]
    # Q = [[q00, q01], [q10, q11]] = [[1, 3], [-2, 0.5]]: per transition, target − Q(s, a):
    #   (0, 1, r 1, s' 1):      1 + 0.5 · max(−2, 0.5) − 3   = −1.75
    #   (1, 0, r 0, s' 1):      0 + 0.5 · 0.5 − (−2)         =  2.25
    #   (1, 1, r 2, done):      2 − 0.5                      =  1.5
    #   (0, 0, r −1, s' 0):    −1 + 0.5 · max(1, 3) − 1      = −0.5
    by_reward = {1.0: -1.75, 0.0: 2.25, 2.0: 1.5, -1.0: -0.5}
    params = np.array([[1.0, 3.0, -2.0, 0.5]])
    seen = set()
    for seed in range(4):  # seeds 0..3 hold out every row at least once (the terminal one included)
        train = problem.dataset(seed)
        held = problem.held_out(train)
        seen |= set(held.reward.tolist())
        want = np.mean([by_reward[float(x)] ** 2 for x in held.reward])
        (got,) = problem.evaluate(params, train)
        assert got["bellman_residual"] == pytest.approx(want, rel=1e-6), seed
        assert got["bellman_residual_rms"] == pytest.approx(np.sqrt(want), rel=1e-6), seed
        assert set(got) == {"bellman_residual", "bellman_residual_rms"}
    assert seen == set(by_reward)
    # The layout follows the split's size.
    assert problem.dataset_layout()["size"] == 2 and problem.q_family().d == 4
    with pytest.raises(DatasetFileError, match="holds transitions that .* does not"):
        problem.held_out(Transitions.from_arrays([5], [0], [0.0], [5], [0.0]))


def test_rollouts_in_a_gym_id_are_evaluate_greedy_and_gymnasium(tmp_path):
    np.savez(tmp_path / "cp.npz", **episodes_to_arrays(cartpole_episodes(n_episodes=2)))
    problem = DatasetProblem(
        path=str(tmp_path / "cp.npz"), gym_id="CartPole-v1", gamma=0.9, hidden=[8], eval_episodes=3,
        eval_max_steps=40, eval_seed=5,
    )  # fmt: skip
    assert (problem.env_id, problem.main_metric) == ("CartPole-v1", "return")
    assert problem.holdout_fraction == 0  # a gym id: no held-out part by default
    q = problem.q_family()
    params = q.initial_params(3, seed=1)
    params[1:, -9:-1] = np.random.default_rng(0).normal(size=(2, 8))  # policies 1, 2: a non-zero last layer
    got = problem.evaluate(params)
    want = evaluate_greedy(FlatMLPQ(4, [8], [0.0, 1.0]), params, "CartPole-v1", 3, 40, 0.9, 5)
    assert got == want
    # Policy 0 is Q ≡ 0, which pushes left (action 0) always: a plain gymnasium loop.
    env = gymnasium.make("CartPole-v1", max_episode_steps=40)
    returns, discounted = [], []
    for j in range(3):
        env.reset(seed=5 * 1_000_003 + j)
        total = disc = 0.0
        for t in range(40):
            _, reward, terminated, truncated, _ = env.step(0)
            total, disc = total + reward, disc + 0.9**t * reward
            if terminated or truncated:
                break
        returns.append(total)
        discounted.append(disc)
    assert got[0]["return"] == pytest.approx(np.mean(returns))
    assert got[0]["discounted_return"] == pytest.approx(np.mean(discounted))
    assert got[1]["return"] != got[0]["return"] or got[2]["return"] != got[0]["return"]


def _cartpole_file(path, n_episodes, seed=0):
    """Random-policy CartPole-v1 transitions written by `Transitions.save` (as a run folder's dataset.npz)."""
    a = episodes_to_arrays(cartpole_episodes(n_episodes, seed))
    Transitions.from_arrays(
        a["observations"], a["actions"], a["rewards"], a["next_observations"], a["terminals"]
    ).save(str(path))


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_a_run_on_a_file_and_its_report_name_the_file_and_the_gym_id(tmp_path, monkeypatch):
    from pbo_tf.analysis import plotting
    from pbo_tf.cli.plot import PlotError, make_plot
    from pbo_tf.cli.report import make_report

    _cartpole_file(tmp_path / "cartpole_random.npz", n_episodes=4)
    parse_config(
        ["dataset/fqi.gin"],
        [f"DATASET = '{tmp_path / 'cartpole_random.npz'}'", "GYM_ID = 'CartPole-v1'", "K = 2",
         "EXTRA_ITERATIONS = 0", "MAX_EPOCHS = 2", "PATIENCE = 2", "BATCH_SIZE = 32", "HIDDEN = [4]",
         "DatasetProblem.eval_episodes = 2", "DatasetProblem.eval_max_steps = 30",
         "FQIConfig.jit_compile = False"],
    )  # fmt: skip
    lines = []
    metrics = run_experiment(str(tmp_path / "runs" / "random"), log=lines.append)
    label = "dataset cartpole_random.npz (CartPole-v1)"
    assert (metrics["env"], metrics["env_label"], metrics["gym_id"]) == ("dataset", label, "CartPole-v1")
    digest = DatasetProblem(path=str(tmp_path / "cartpole_random.npz"), gym_id="CartPole-v1").digest
    assert metrics["dataset"] == {
        "file": "cartpole_random.npz", "path": str(tmp_path / "cartpole_random.npz"), "sha256": digest,
    }  # fmt: skip
    # The main metric is the episode return: undiscounted (CartPole pays 1 a step, so it is the episode's
    # length), as the shipped gym files bind GymOnlineEnv.main_metric.
    assert metrics["main_metric"] == "return"
    for entry in metrics["curve"]:
        assert entry["return"] == entry["episode_length"] != entry["discounted_return"]
    curve = {c["k"]: c["return"] for c in metrics["curve"]}
    assert any(line.startswith(f"{label} / fqi: K=2, seed=0,") for line in lines)
    assert f": return at k=0: {curve[0]}, k=K: {curve[2]}," in lines[-1]

    # Another file's run beside it: what a report reads of a run is its metrics.json.
    def beside(name, **fields):
        folder = tmp_path / "runs" / name
        folder.mkdir()
        (folder / "metrics.json").write_text(json.dumps({**metrics, **fields}))

    other = "dataset cartpole_expert.npz (CartPole-v1)"
    beside("expert", env_label=other, dataset={"file": "cartpole_expert.npz", "sha256": "e" * 64})
    titles = []
    plot_curves = plotting.plot_curves

    def titled(*args, title=None, **kwargs):
        titles.append(title)
        return plot_curves(*args, title=title, **kwargs)

    monkeypatch.setattr(plotting, "plot_curves", titled)
    text = _read(make_report([str(tmp_path / "runs")], str(tmp_path / "report"), bootstrap_reps=20))
    assert [line for line in text.splitlines() if line.startswith("## ")] == [
        "## Summary", f"## {other}", f"## {label}",
    ]  # fmt: skip
    assert titles == [f"{other}, K = 2: return", f"{label}, K = 2: return"]
    summary = [line for line in text.splitlines() if line.startswith("| dataset")][:2]
    assert [row.split(" | ")[:6] for row in summary] == [
        [f"| {other}", "2", "fqi", "1", "—", "`return` (↑)"],
        [f"| {label}", "2", "fqi", "1", "—", "`return` (↑)"],
    ]
    assert (tmp_path / "report" / "dataset_cartpole_random.npz_CartPole-v1_k2.png").exists()
    with pytest.raises(PlotError, match=f"mix several envs \\({re.escape(other)}, {re.escape(label)}\\)"):
        make_plot([str(tmp_path / "runs")], str(tmp_path / "all.png"))
    _, table = make_plot([str(tmp_path / "runs" / "random")], str(tmp_path / "random.png"))
    assert label in table

    # A file of the same name in another folder, with other transitions: a section of its own.
    beside("elsewhere", dataset={"file": "cartpole_random.npz", "sha256": "f" * 64})
    text = _read(make_report([str(tmp_path / "runs")], str(tmp_path / "report"), bootstrap_reps=20))
    assert [line for line in text.splitlines() if line.startswith("## ")] == [
        "## Summary", f"## {other}", f"## {label} [data {digest[:8]}]", f"## {label} [data ffffffff]",
    ]  # fmt: skip
    with pytest.raises(PlotError, match="datasets of one name"):
        make_plot([str(tmp_path / "runs" / "random"), str(tmp_path / "runs" / "elsewhere")], "x.png")


def test_the_main_metric_is_bindable_among_the_metrics_evaluated(tmp_path):
    _cartpole_file(tmp_path / "cp.npz", n_episodes=2)
    path = str(tmp_path / "cp.npz")
    assert DatasetProblem(path=path, gym_id="CartPole-v1", main_metric="discounted_return").main_metric == (
        "discounted_return"
    )
    held = DatasetProblem(
        path=path, gym_id="CartPole-v1", holdout_fraction=0.2, main_metric="bellman_residual"
    )
    assert held.main_metric == "bellman_residual"
    assert DatasetProblem(path=path, holdout_fraction=0.2).label == "dataset cp.npz"
    with pytest.raises(ValueError, match=r"main_metric must be one of .*\['bellman_residual', "):
        DatasetProblem(path=path, holdout_fraction=0.2, main_metric="return")  # no gym id: no rollouts
    # Which metric is shown changes nothing in the results (a cosmetic binding): a folder fingerprinted
    # before the binding existed, or with the other metric bound, resumes.
    parse_config(["dataset/fqi.gin"], [f"DATASET = '{path}'", "GYM_ID = 'CartPole-v1'"])
    current = run_folder.fingerprint()
    assert current["cosmetic"]["DatasetProblem.main_metric"] is None
    before = run_folder.fingerprint(current["bindings"])  # the same bindings less DatasetProblem.main_metric
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "fingerprint.json").write_text(json.dumps(before))
    (tmp_path / "run" / "config.gin").write_text("")
    assert run_folder.check(str(tmp_path / "run"), current) == "resume"
    parse_config(
        ["dataset/fqi.gin"],
        [f"DATASET = '{path}'", "GYM_ID = 'CartPole-v1'", "DatasetProblem.main_metric = 'discounted_return'"],
    )
    assert run_folder.check(str(tmp_path / "run")) == "resume"


def _bad_files():
    """``(name, the file's arrays or bytes, DatasetProblem kwargs, the exact error line after the path)``."""
    n = 6
    ok = dict(
        observations=np.zeros((n, 2)), actions=np.zeros(n, int), rewards=np.zeros(n),
        next_observations=np.zeros((n, 2)), terminals=np.zeros(n),
    )  # fmt: skip

    def but(**changes):
        out = {k: v for k, v in ok.items() if k not in changes or changes[k] is not None}
        out.update({k: v for k, v in changes.items() if v is not None})
        return out

    nan_r = ok["rewards"].copy()
    nan_r[3] = np.nan
    inf_s = ok["observations"].copy()
    inf_s[4, 1] = np.inf
    return [
        ("missing file", None, {}, ": no such file"),
        ("not an npz", b"these are not arrays", {}, ": not a readable .npz file (not a zip archive)"),
        ("truncated", b"PK\x03\x04 cut short", {}, ": not a readable .npz file"),
        ("missing key", but(rewards=None), {},
         ": field 'reward' is missing (a key named one of ['reward', 'rewards']; the file has ['actions', "
         "'next_observations', 'observations', 'terminals'])"),
        ("lengths", but(rewards=np.zeros(n - 1)), {}, ": field 'rewards' has 5 rows, 'observations' has 6"),
        ("nan", but(rewards=nan_r), {}, ": field 'rewards' holds NaN or Inf (first at row 3)"),
        ("inf", but(observations=inf_s), {}, ": field 'observations' holds NaN or Inf (first at row 4)"),
        ("action outside", but(actions=np.array([0, 1, 2, 0, 1, 3])), {"n_actions": 3},
         ": field 'actions' holds the action 3 at row 5, outside the action set (indices 0..2)"),
        ("negative action", but(actions=np.array([0, 1, -1, 0, 1, 0])), {},
         ": field 'actions' holds the action -1, outside the action set (indices 0..n-1)"),
        ("continuous action", but(actions=np.array([0.0, 1.0, 0.5, 0, 1, 0])), {},
         ": field 'actions' is a continuous action column (row 2 holds 0.5); pbo_tf needs "
         "discrete actions, indices 0..n-1"),
        ("state shapes", but(next_observations=np.zeros((n, 3))), {},
         ": field 'next_observations' has shape [6, 3], 'observations' has [6, 2]: states of inconsistent "
         "shape"),
        ("images", but(observations=np.zeros((n, 2, 2)), next_observations=np.zeros((n, 2, 2))), {},
         ": field 'observations' has shape [6, 2, 2], expected [N] (integer states) or [N, d] (vectors)"),
        ("objects", but(rewards=np.array([None] * n, dtype=object)), {},
         ": holds Python objects (pickles), not arrays"),
        ("done", but(terminals=np.array([0, 0, 2, 0, 0, 1.0])), {},
         ": field 'terminals' holds 2 at row 2, expected 0 or 1"),
        ("state outside", {"state": np.array([0, 1, 2]), "action": np.zeros(3, int), "reward": np.zeros(3),
                           "next_state": np.array([1, 2, 3]), "done": np.zeros(3)}, {"n_states": 3},
         ": field 'next_state' holds the state 3, outside the table of n_states=3 (0..2)"),
        ("gym shape", ok, {"gym_id": "CartPole-v1"},
         ": field 'observations' has states of shape [2], CartPole-v1 observes [4]"),
    ]  # fmt: skip


@pytest.mark.parametrize("name, content, kwargs, message", _bad_files(), ids=[b[0] for b in _bad_files()])
def test_a_bad_file_is_one_line_naming_the_file_and_the_field(tmp_path, name, content, kwargs, message):
    path = str(tmp_path / "data.npz")
    if isinstance(content, bytes):
        (tmp_path / "data.npz").write_bytes(content)
    elif content is not None:
        np.savez(path, **content)
    with pytest.raises(DatasetFileError) as raised:
        DatasetProblem(path=path, **kwargs)
    # What a launcher prints (`pbo_tf.cli.common.describe`: gin's decoration of the message dropped).
    code, text = cli.describe(raised.value)
    assert code == cli.EXIT_USAGE and "\n" not in text
    if name == "truncated":
        assert text.startswith(f"DatasetProblem: dataset {path}{message} (")
    else:
        assert text == f"DatasetProblem: dataset {path}{message}"


def test_the_launcher_refuses_a_bad_file_in_one_line_before_training(tmp_path, capsys):
    from pbo_tf.cli import train

    np.savez(tmp_path / "bad.npz", observations=np.zeros((4, 2)), actions=[0, 1, 0.5, 1], rewards=np.zeros(4),
             next_observations=np.zeros((4, 2)), terminals=np.zeros(4))  # fmt: skip
    code = cli.call_main(
        train.run, train.FLAGS,
        ["pbo-train", "--gin_file=dataset/profqi.gin", f"--root_dir={tmp_path / 'run'}",
         f"--gin_bindings=DATASET='{tmp_path / 'bad.npz'}'"],
    )  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == cli.EXIT_USAGE
    assert err == (
        f"pbo-train: error: DatasetProblem: dataset {tmp_path / 'bad.npz'}: field 'actions' is a continuous "
        "action column (row 2 holds 0.5); pbo_tf needs discrete actions, indices 0..n-1"
    )
    assert not os.path.exists(tmp_path / "run" / "dataset.npz")


def test_a_minari_source_without_minari_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "minari", None)  # import minari raises ImportError
    with pytest.raises(ImportError) as raised:
        DatasetProblem(path="minari:cartpole/random-v0")
    assert cli.describe(raised.value) == (
        cli.EXIT_USAGE,
        "DatasetProblem: minari is not installed: a Minari dataset needs the minari extra, "
        "`pip install -e .[minari]`",
    )
    assert type(raised.value).__name__ == "MissingDependencyError"


def test_no_evaluation_is_refused(tmp_path):
    three_state_file(tmp_path / "chain.npz")
    with pytest.raises(ValueError, match="nothing to evaluate on: give a gym_id .* holdout_fraction > 0"):
        DatasetProblem(path=str(tmp_path / "chain.npz"), holdout_fraction=0.0)
    with pytest.raises(ValueError, match="rollouts in CartPole-v1 need vector observations"):
        DatasetProblem(path=str(tmp_path / "chain.npz"), gym_id="CartPole-v1")


def _program(name, *args):
    """``pbo-train`` / ``pbo-apply`` on ``args``, run in this process as the console script runs it."""
    from pbo_tf.cli import apply, train

    program = {"pbo-train": train, "pbo-apply": apply}[name]
    return cli.call_main(program.run, program.FLAGS, [name, *args])


def test_a_tiny_profqi_run_through_pbo_train_and_pbo_apply(tmp_path, capsys):
    rng = np.random.default_rng(0)
    states = rng.uniform(-1, 1, (100, 2))
    np.savez(
        tmp_path / "mine.npz", observations=states, actions=rng.integers(0, 2, 100),
        rewards=rng.normal(size=100), next_observations=states + rng.normal(0, 0.1, (100, 2)),
        terminals=np.arange(100) % 10 == 9,
    )  # fmt: skip
    run_dir = tmp_path / "run"
    bindings = [
        f"DATASET='{tmp_path / 'mine.npz'}'", "K=2", "REFRESHES=1", "PASSES_PER_REFRESH=1",
        "EXTRA_ITERATIONS=2", "BATCH_SIZE=20", "ProFQIConfig.w_size=4", "ProFQIConfig.w_batch_size=2",
        "ProFQIConfig.jit_compile=False",
    ]  # fmt: skip
    code = _program(
        "pbo-train", "--gin_file=dataset/profqi.gin", f"--root_dir={run_dir}",
        *(f"--gin_bindings={b}" for b in bindings),
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["env"], metrics["algorithm"], metrics["K"]) == ("dataset", "profqi", 2)
    assert [c["k"] for c in metrics["curve"]] == [0, 1, 2, 3, 4]
    assert metrics["reference"]["held_out_transitions"] == 20
    iterates = np.load(run_dir / "iterates.npz")["iterates"]
    assert iterates.shape == (5, FlatMLPQ(2, [30], [0.0, 1.0]).d)
    assert os.path.exists(run_dir / "operator" / "pbo.index")
    # Q ≡ 0 at k = 0: the residual is the held-out rewards' mean square.
    assert metrics["curve"][0]["bellman_residual"] == pytest.approx(
        metrics["reference"]["zero_q_bellman_residual"], rel=1e-6
    )
    assert _program("pbo-apply", f"--run_dir={run_dir}", "--k_max=6") == 0, capsys.readouterr().err
    out = json.loads((run_dir / "applied_k6.json").read_text())
    assert [c["k"] for c in out["curve"]] == list(range(7))
    for mine, run in zip(out["curve"][:5], metrics["curve"], strict=True):  # the run's numbers up to K + 2
        assert mine["bellman_residual"] == pytest.approx(run["bellman_residual"], rel=1e-5)


def _600_transitions(path):
    rng = np.random.default_rng(1)
    states = rng.uniform(-1, 1, (600, 2))
    np.savez(
        path, observations=states, actions=rng.integers(0, 2, 600), rewards=rng.normal(size=600),
        next_observations=states + rng.normal(0, 0.1, (600, 2)), terminals=np.arange(600) % 10 == 9,
    )  # fmt: skip


def test_a_dataset_smaller_than_the_batch_names_the_macro_and_the_held_out_share(tmp_path, capsys):
    """600 transitions, 120 (20%) held out: 480 to train on, fewer than the shipped BATCH_SIZE of 500."""
    _600_transitions(tmp_path / "small.npz")
    args = ["--gin_file=dataset/fqi.gin", f"--root_dir={tmp_path / 'run'}",
            f"--gin_bindings=DATASET='{tmp_path / 'small.npz'}'"]  # fmt: skip
    code = _program("pbo-train", *args)
    err = capsys.readouterr().err.strip()
    assert code == cli.EXIT_USAGE
    assert err == (
        "pbo-train: error: BATCH_SIZE = 500 transitions per Adam step is more than the 480 training "
        f"transitions (the 600 of {tmp_path / 'small.npz'} less the 120 held out "
        "(DatasetProblem.holdout_fraction = 0.2)): bind a smaller one, e.g. --gin_bindings='BATCH_SIZE=480'"
    )
    parse_config(["dataset/fqi.gin"], [f"DATASET='{tmp_path / 'small.npz'}'", "BATCH_SIZE=480"])
    problem = DatasetProblem(path=str(tmp_path / "small.npz"))
    assert len(problem.dataset(0)) == 480  # the size it names is accepted


def test_ifqi_on_a_users_dataset(tmp_path, capsys):
    """dataset/ifqi.gin: i-FQI's heads on the user's file, its curve k = 0..K (none past K), the Bellman
    residual on the held-out transitions."""
    _600_transitions(tmp_path / "mine.npz")
    bindings = [f"DATASET='{tmp_path / 'mine.npz'}'", "K=2", "REFRESHES=2", "PASSES_PER_REFRESH=1",
                "BATCH_SIZE=96", "IFQIConfig.jit_compile=False"]  # fmt: skip
    run_dir = tmp_path / "run"
    code = _program(
        "pbo-train", "--gin_file=dataset/ifqi.gin", f"--root_dir={run_dir}",
        *(f"--gin_bindings={b}" for b in bindings),
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["env"], metrics["algorithm"], metrics["K"]) == ("dataset", "ifqi", 2)
    values = {c["k"]: c["bellman_residual"] for c in metrics["curve"]}
    assert [k for k, v in values.items() if v is not None] == [0, 1, 2]  # no head past K
    assert metrics["reference"]["held_out_transitions"] == 120
    # Q ≡ 0 at k = 0: the held-out rewards' mean square; k = 1, 2: the residual of the run's heads on the
    # held-out rows of its seed's split (`DatasetProblem.evaluate`, checked by hand above).
    assert values[0] == pytest.approx(metrics["reference"]["zero_q_bellman_residual"], rel=1e-6)
    parse_config(["dataset/ifqi.gin"], bindings)
    problem = DatasetProblem(path=str(tmp_path / "mine.npz"))
    iterates = np.load(run_dir / "iterates.npz")["iterates"]
    assert iterates.shape[0] == 3
    got = problem.evaluate(iterates, problem.dataset(metrics["seed"]))
    assert not np.allclose(iterates[1], iterates[0]) and not np.allclose(iterates[2], iterates[1])
    for k in (0, 1, 2):
        assert values[k] == pytest.approx(got[k]["bellman_residual"], rel=1e-6), k
