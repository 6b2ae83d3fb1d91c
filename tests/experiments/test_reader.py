"""`pbo_tf.experiments.reader`: a finished run folder read back against the files the runner wrote.

A tiny batched chain-walk ProFQI run (seeds 3 and 4) and a tiny FQI run: the reader's seeds, seed folders,
curves, config, iterates and datasets are the files' own bytes and arrays, its experiment is the run's, and
its operator continues the saved iterates; an unfinished, diverged, FQI or online run is refused in one
line that names the folder and the problem.
"""

import json
import os
import shutil

import numpy as np
import pytest

from pbo_tf.analysis import results
from pbo_tf.data.transitions import Transitions
from pbo_tf.experiments.config import GIN_CONFIGS_DIR
from pbo_tf.experiments.reader import RunError, RunReader, load_trained_operator, read_records, read_runs
from pbo_tf.experiments.runner import Experiment
from tests.experiments.runner_sizes import run_tiny

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: A committed online run folder (config.gin and metrics.json).
ONLINE_RUN = os.path.join(REPO, "results", "gym_online", "runs", "gym", "dqn", "seed_0")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    gin = os.path.join(GIN_CONFIGS_DIR, "chain_walk")
    binding = ["Experiment.seed = 3", "NUM_SEEDS = 2", "ProFQIConfig.jit_compile = False"]
    run_tiny(os.path.join(gin, "profqi.gin"), root / "profqi", binding)
    run_tiny(os.path.join(gin, "fqi.gin"), root / "fqi")
    return root


def test_the_reader_returns_the_runs_own_seeds_curves_config_and_iterates(runs):
    root = runs / "profqi"
    run = RunReader(str(root))
    with open(root / "metrics.json", encoding="utf-8") as f:
        metrics = json.load(f)
    assert (run.env, run.setting, run.seeds) == ("chain_walk", "offline", [3, 4])
    assert run.seed() == 3  # the first seed by default
    for seed, entry in zip([3, 4], metrics["per_seed"], strict=True):
        assert run.seed_dir(seed) == str(root / f"seed_{seed}")
        assert run.curve(seed) == entry["curve"]
        assert run.seed_metrics(seed)["reference"] == entry["reference"]
        with np.load(root / f"seed_{seed}" / "iterates.npz") as saved:
            np.testing.assert_array_equal(run.iterates(seed), saved["iterates"])
            np.testing.assert_array_equal(run.fixed_point(seed), saved["fixed_point"])
    assert not np.array_equal(run.iterates(3), run.iterates(4))  # each seed's own file
    assert run.config_text == (root / "config.gin").read_text(encoding="utf-8")
    assert run.metrics["curve"] == metrics["curve"] and run.metrics["seeds"] == [3, 4]
    with pytest.raises(ValueError, match=r"trained seeds \[3, 4\], not 7"):
        run.seed_dir(7)


def test_a_seed_folder_of_a_batched_run_reads_as_that_seed_of_the_run(runs, tmp_path):
    """Given ``seed_<s>/`` of a batched run (no metrics.json of its own), the reader reads the run above it
    with ``s`` as its default seed: seed s's curve, iterates and operator, as `RunReader(run).…(s)`;
    `pbo-apply`'s check takes the folder's seed and refuses another one; a seed folder the run did not
    train is refused in one line."""
    from pbo_tf.cli.apply import ApplyError, check_run

    root = runs / "profqi"
    whole = RunReader(str(root))
    for seed in (3, 4):
        one = RunReader(str(root / f"seed_{seed}"))
        assert (one.root, one.seeds, one.seed(), one.default_seed) == (str(root), [3, 4], seed, seed)
        assert one.seed_dir() == str(root / f"seed_{seed}") and one.curve() == whole.curve(seed)
        np.testing.assert_array_equal(one.iterates(), whole.iterates(seed))
        _, _, omega0 = one.operator()
        np.testing.assert_array_equal(omega0, whole.iterates(seed)[0])
        assert one.curve(3) == whole.curve(3)  # another seed can still be asked for by name
        reader, chosen = check_run(str(root / f"seed_{seed}"), None)
        assert chosen == seed and reader.root == str(root)
    assert np.array_equal(load_trained_operator(str(root / "seed_4"))[2], whole.iterates(4)[0])
    with pytest.raises(ApplyError, match=r"--seed=3: .*seed_4' is the folder of seed 4$"):
        check_run(str(root / "seed_4"), 3)
    copy = tmp_path / "profqi"
    shutil.copytree(root, copy)
    (copy / "seed_9").mkdir()
    with pytest.raises(RunError) as error:
        RunReader(str(copy / "seed_9"))
    assert str(error.value) == f"{str(copy / 'seed_9')!r} is not one of its batched run's seeds [3, 4]"
    shutil.copytree(root / "seed_3", tmp_path / "seed_3")  # a seed folder outside a run: not a run
    with pytest.raises(RunError, match="has no metrics.json: not a run folder"):
        RunReader(str(tmp_path / "seed_3"))


def test_the_reader_builds_the_runs_experiment_once_and_reads_its_dataset_and_operator(runs):
    root = runs / "profqi"
    run = RunReader(str(root))
    experiment = run.experiment()
    assert isinstance(experiment, Experiment) and experiment is run.experiment()
    assert (experiment.problem.name, experiment.K, experiment.seeds) == ("chain_walk", 2, [3, 4])
    # the writer's seed folders are the reader's
    assert [experiment.seed_dir(s) for s in (3, 4)] == [run.seed_dir(s) for s in (3, 4)]
    for seed in (3, 4):
        data = run.dataset(seed)
        saved = Transitions.load(str(root / f"seed_{seed}" / "dataset.npz"))
        for key in ("state", "action", "reward", "next_state", "done"):
            np.testing.assert_array_equal(np.asarray(getattr(data, key)), np.asarray(getattr(saved, key)))
        pbo, q, omega0 = run.operator(seed)
        iterates = run.iterates(seed)
        assert q.d == iterates.shape[1] == 40
        np.testing.assert_array_equal(omega0, iterates[0])
        chain = pbo.iterate(omega0[None], len(iterates) - 1)[:, 0].numpy()
        np.testing.assert_allclose(chain, iterates, rtol=1e-6, atol=1e-7)
    # load_trained_operator is the reader's operator
    pbo, _, omega0 = load_trained_operator(str(root), seed=4)
    np.testing.assert_allclose(pbo.iterate(omega0[None], 5)[:, 0].numpy(), run.iterates(4), rtol=1e-6)


def test_every_run_under_some_folders_is_read_once_one_record_per_seed(runs, tmp_path):
    """`read_runs` finds each finished folder once (a root inside another root adds nothing) and skips an
    unfinished one; `read_records` is one record per seed, each seed's metrics with its folder: what
    `pbo_tf.analysis.results.load_runs` gives, record for record."""
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "log.txt").write_text("refresh 1/10\n")
    roots = [str(runs), str(runs / "profqi"), str(unfinished)]
    readers = read_runs(roots)
    assert [r.root for r in readers] == [str(runs / "fqi"), str(runs / "profqi")]
    records = read_records(roots)
    assert [(r["algorithm"], r["seed"]) for r in records] == [("fqi", 0), ("profqi", 3), ("profqi", 4)]
    assert records[1:] == readers[1].records() and records[2]["seed_dir"] == str(runs / "profqi" / "seed_4")
    assert records[2]["curve"] == readers[1].curve(4)
    assert records == results.load_runs(roots)


def test_an_unfinished_diverged_fqi_or_online_run_is_refused_in_one_line(runs, tmp_path):
    def refused(error, *pieces):
        message = str(error.value)
        assert "\n" not in message and all(piece in message for piece in pieces), message

    with pytest.raises(RunError) as error:
        RunReader(str(tmp_path / "nope"))
    refused(error, repr(str(tmp_path / "nope")), "does not exist or is not a directory")
    unfinished = tmp_path / "unfinished"
    shutil.copytree(runs / "profqi", unfinished)
    os.remove(unfinished / "metrics.json")
    with pytest.raises(RunError) as error:
        RunReader(str(unfinished))
    refused(error, repr(str(unfinished)), "has no metrics.json: not a run folder, or the run is unfinished")
    with pytest.raises(FileNotFoundError) as error:
        load_trained_operator(str(unfinished))
    refused(error, "holds no trained operator: it has no metrics.json")
    (unfinished / "failure.json").write_text("{}")
    with pytest.raises(RunError) as error:
        RunReader(str(unfinished))
    refused(error, "has no metrics.json: the run diverged (see its failure.json)")

    fqi = RunReader(str(runs / "fqi"))
    assert fqi.curve()[0]["k"] == 0 and fqi.iterates().shape == (3, 40)  # K + 1 iterates, no operator
    with pytest.raises(FileNotFoundError) as error:
        fqi.operator()
    refused(error, repr(str(runs / "fqi")), "holds no trained operator (fqi has none)")

    online = RunReader(ONLINE_RUN)
    assert (online.setting, online.seeds, online.seed_dir()) == ("online", [0], ONLINE_RUN)
    with pytest.raises(RunError) as error:
        online.dataset()
    refused(error, repr(ONLINE_RUN), "is an online run", "saved no dataset")
