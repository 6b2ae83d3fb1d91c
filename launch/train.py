r"""Runs one experiment from a gin file.

  python launch/train.py --gin_file=gin_configs/chain_walk/profqi.gin --root_dir=runs/cw/profqi/0 \
      --gin_bindings='SEED=0' --gin_bindings='REFRESHES=100' [--intra_op_threads=1] [--overwrite]

One entry point for every experiment: offline gin files (FQI / ProFQI / oracle) run
`pbo_tf.experiments.runner.Experiment`; online gin files (those binding ``OnlineExperiment.*``: DQN and
ProDQN on TF-Agents) run `pbo_tf.experiments.online.OnlineExperiment`. Both write the run folder described
in their module. A folder whose metrics.json exists is complete and skipped; an interrupted run resumes
from its last checkpoint. A folder that holds another experiment (another config fingerprint) is refused,
unless --overwrite moves it aside (`pbo_tf.experiments.run_folder`).

Errors are one line on stderr; exit code 2 for a usage or config error, 3 when training diverged (see
`pbo_tf.experiments.cli`; --verbose prints the traceback).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import flags, logging  # noqa: E402

import pbo_tf  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from pbo_tf.experiments import cli  # noqa: E402

FLAGS = flags.FlagValues()
flags.DEFINE_string("root_dir", None, "Run folder (created if missing).", flag_values=FLAGS)
flags.DEFINE_multi_string("gin_file", None, "Gin config file(s), parsed in order.", flag_values=FLAGS)
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
    "overwrite",
    False,
    "A run folder that holds another experiment is moved aside to <root_dir>.old-<time> (never deleted) "
    "and the run starts afresh.",
    flag_values=FLAGS,
)
cli.define_common_flags(FLAGS)
flags.mark_flags_as_required(["root_dir", "gin_file"], flag_values=FLAGS)


def main(argv):
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    from pbo_tf.experiments.config import is_online_config, parse_config, set_threads

    set_threads(FLAGS.intra_op_threads, FLAGS.inter_op_threads)
    parse_config(FLAGS.gin_file, FLAGS.gin_bindings)
    log = lambda m: print(m, flush=True)  # noqa: E731
    if is_online_config():
        from pbo_tf.experiments.online import OnlineExperiment

        OnlineExperiment(root_dir=FLAGS.root_dir, log=log, overwrite=FLAGS.overwrite).run()
    else:
        from pbo_tf.experiments.runner import Experiment

        Experiment(root_dir=FLAGS.root_dir, log=log, overwrite=FLAGS.overwrite).run()


if __name__ == "__main__":
    logging.set_verbosity(logging.WARNING)
    cli.run_main(main, FLAGS)
