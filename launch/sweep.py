r"""Launches many runs (gin files × seeds), skipping finished ones.

  python launch/sweep.py --root_dir=runs/chain_walk_k5 --seeds=0,1,2 --parallel=2 \
      --gin_file=gin_configs/chain_walk/fqi.gin --gin_file=gin_configs/chain_walk/profqi.gin \
      --gin_bindings='K=5'

The same program as the console script ``pbo-sweep``: `pbo_tf.cli.sweep` (its docstring and ``--help`` list
the flags). This file runs it from a checkout, installed or not.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pbo_tf.cli.sweep import main  # noqa: E402

if __name__ == "__main__":
    main()
