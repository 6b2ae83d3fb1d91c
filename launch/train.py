r"""Runs one experiment from a gin file.

  python launch/train.py --gin_file=gin_configs/chain_walk/profqi.gin --root_dir=runs/cw/profqi/0 \
      --gin_bindings='SEED=0' --gin_bindings='REFRESHES=100' [--intra_op_threads=1] [--overwrite]

The same program as the console script ``pbo-train``: `pbo_tf.cli.train` (its docstring and ``--help`` list
the flags). This file runs it from a checkout, installed or not.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pbo_tf.cli.train import main  # noqa: E402

if __name__ == "__main__":
    main()
