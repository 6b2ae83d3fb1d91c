r"""Runs one experiment from a gin file.

  pbo-train --gin_file=gin_configs/chain_walk/profqi.gin --root_dir=runs/cw/profqi/0 \
      --gin_bindings='SEED=0' --gin_bindings='REFRESHES=100' [--intra_op_threads=1] [--overwrite]

(or ``python launch/train.py ...`` in a checkout). ``--gin_file`` is a path, or a name relative to the gin
configs shipped with pbo_tf (``chain_walk/profqi.gin``; `pbo_tf.experiments.config.resolve_gin_file`), and
then the run prints one line naming the shipped file it used; ``pbo-configs`` lists the shipped configs.
The environment may be another package's: one with a ``pbo_tf.envs`` entry point is found by itself, one
without by ``--import=<the module that registers it>`` (`pbo_tf.envs.registry`, docs/own_environment.md).

One entry point for every experiment (`pbo_tf.experiments.run_experiment`): the gin config names its
runner (``make_experiment.runner``), the offline `pbo_tf.experiments.runner.Experiment` (FQI / ProFQI /
oracle) by default, `pbo_tf.experiments.online.OnlineExperiment` (DQN and ProDQN on TF-Agents) in the
online families. Both write the run folder described in their module. A folder whose metrics.json exists
is complete and skipped; an interrupted run resumes from its last checkpoint. A folder that holds another
experiment (another config fingerprint) is refused, unless --overwrite moves it aside
(`pbo_tf.experiments.run_folder`).

Errors are one line on stderr; exit code 2 for a usage or config error, 3 when training diverged (see
`pbo_tf.cli.common`; --verbose prints the traceback). Ctrl-C (exit code 130) and SIGTERM (143) stop the run
with one line naming the checkpoint a rerun of the same command resumes from.
"""

from absl import flags, logging

import pbo_tf  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from pbo_tf.cli import common as cli

FLAGS = flags.FlagValues()
flags.DEFINE_string("root_dir", None, "Run folder (created if missing).", flag_values=FLAGS)
flags.DEFINE_multi_string(
    "gin_file",
    None,
    "Gin config file(s), parsed in order: paths, or names under the shipped configs (chain_walk/fqi.gin; "
    "pbo-configs lists them).",
    flag_values=FLAGS,
)
flags.DEFINE_multi_string(
    "gin_bindings", [], "Extra gin bindings, e.g. 'K=9' or 'REFRESHES=10'.", flag_values=FLAGS
)
flags.DEFINE_integer(
    "intra_op_threads",
    0,
    "Threads of one op / XLA program on the CPU (0 = all cores; 1 is faster for FQI).",
    flag_values=FLAGS,
)
flags.DEFINE_integer(
    "inter_op_threads",
    0,
    "Ops (e.g. batched seeds' loops) run side by side (0 = default).",
    flag_values=FLAGS,
)
flags.DEFINE_boolean(
    "deterministic",
    False,
    "Deterministic TensorFlow ops (tf.config.experimental.enable_op_determinism): a rerun of the same "
    "command on the same machine gives the same metrics, somewhat slower.",
    flag_values=FLAGS,
)
flags.DEFINE_boolean(
    "overwrite",
    False,
    "A run folder that holds another experiment is moved aside to <root_dir>.old-<time> (never deleted) "
    "and the run starts afresh.",
    flag_values=FLAGS,
)
cli.define_common_flags(FLAGS)
flags.mark_flags_as_required(["root_dir", "gin_file"], flag_values=FLAGS)


def run(argv: list[str]) -> None:
    """Trains the experiment the flags describe (``argv``: the arguments left after the flags)."""
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    from pbo_tf.experiments import run_experiment
    from pbo_tf.experiments.config import parse_config, set_determinism, set_threads
    from pbo_tf.experiments.run_folder import resume_text

    set_threads(FLAGS.intra_op_threads, FLAGS.inter_op_threads)
    if FLAGS.deterministic:
        set_determinism()
    parse_config(FLAGS.gin_file, FLAGS.gin_bindings, log=lambda m: print(m, flush=True))
    with cli.signals_interrupt():
        try:
            run_experiment(FLAGS.root_dir, log=lambda m: print(m, flush=True), overwrite=FLAGS.overwrite)
        except KeyboardInterrupt as e:
            how, code = cli.interruption(e)
            raise cli.Interrupted(f"{how}: {resume_text(FLAGS.root_dir)}", code) from e


def main(argv: list[str] | None = None) -> None:
    """The ``pbo-train`` console script: parses ``argv`` (default ``sys.argv``), runs, exits."""
    logging.set_verbosity(logging.WARNING)
    cli.run_main(run, FLAGS, argv)


if __name__ == "__main__":
    main()
