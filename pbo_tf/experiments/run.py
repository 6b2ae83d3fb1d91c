"""The experiment a gin config describes, chosen by a binding: `make_experiment` and `run_experiment`.

Each gin family names its runner in its ``common.gin``: offline families leave the default, the offline
`pbo_tf.experiments.runner.Experiment`; online ones bind ``make_experiment.runner = @OnlineExperiment``
(`pbo_tf.experiments.online`). Launchers parse the config and call `run_experiment`; tools that only check a
config build the experiment with `make_experiment` without running it.
"""

from __future__ import annotations

from collections.abc import Callable

import gin

from pbo_tf.experiments.runner import Experiment


@gin.configurable(denylist=["root_dir", "log", "overwrite"])
def make_experiment(
    root_dir: str,
    log: Callable[[str], None] | None = print,
    overwrite: bool = False,
    runner: Callable = Experiment,
):
    """The parsed config's experiment in the run folder ``root_dir``, built but not run.

    Args:
      root_dir: the run folder.
      log: progress printer (None silences).
      overwrite: a run folder of another experiment is moved aside instead of refused.
      runner: the experiment class (``@OnlineExperiment`` for the online families).
    """
    return runner(root_dir=root_dir, log=log, overwrite=overwrite)


def run_experiment(root_dir: str, log: Callable[[str], None] | None = print, overwrite: bool = False):
    """Runs the parsed config's experiment (`make_experiment`) in ``root_dir``; returns its metrics dict, or
    None when the run stopped early (``max_train_steps_this_call``)."""
    return make_experiment(root_dir, log=log, overwrite=overwrite).run()
