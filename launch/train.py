r"""Runs one experiment from a gin file.

  python launch/train.py --gin_file=gin_configs/chain_walk/profqi.gin --root_dir=runs/cw/profqi/0 \
      --gin_bindings='SEED=0' --gin_bindings='EPOCHS=100' [--intra_op_threads=1]

One entry point for every experiment: offline gin files (FQI / ProFQI / oracle) run
`pbo_tf.experiments.runner.Experiment`; online gin files (those binding ``OnlineExperiment.*``: DQN and
ProDQN on TF-Agents) run `pbo_tf.experiments.online.OnlineExperiment`. Both write the run folder described
in their module. A folder whose metrics.json exists is complete and skipped; an interrupted run resumes
from its last checkpoint.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags, logging  # noqa: E402

import pbo_tf  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from pbo_tf.experiments.config import parse_config, set_threads  # noqa: E402
from pbo_tf.experiments.runner import Experiment  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("root_dir", None, "Run folder (created if missing).")
flags.DEFINE_multi_string("gin_file", None, "Gin config file(s), parsed in order.")
flags.DEFINE_multi_string("gin_bindings", [], "Extra gin bindings, e.g. 'K=9' or 'EPOCHS=10'.")
flags.DEFINE_integer(
    "intra_op_threads", 0, "Threads of one op / XLA program on the CPU (0 = all cores; 1 is faster for FQI)."
)
flags.DEFINE_integer("inter_op_threads", 0, "Ops (e.g. batched seeds' loops) run side by side (0 = default).")
flags.mark_flags_as_required(["root_dir", "gin_file"])


def main(argv):
    del argv
    set_threads(FLAGS.intra_op_threads, FLAGS.inter_op_threads)
    parse_config(FLAGS.gin_file, FLAGS.gin_bindings)
    log = lambda m: print(m, flush=True)  # noqa: E731
    if is_online_config():
        from pbo_tf.experiments.online import OnlineExperiment

        OnlineExperiment(root_dir=FLAGS.root_dir, log=log).run()
    else:
        Experiment(root_dir=FLAGS.root_dir, log=log).run()


def is_online_config() -> bool:
    """Whether the parsed gin config is an online experiment (it binds ``OnlineExperiment.*``)."""
    import gin

    return "OnlineExperiment." in gin.config_str()


if __name__ == "__main__":
    logging.set_verbosity(logging.WARNING)
    app.run(main)
