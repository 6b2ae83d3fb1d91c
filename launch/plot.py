r"""Plots the learning curves of finished runs and prints a summary table.

  python launch/plot.py --root_dir=runs/chain_walk --output=figures/chain_walk.png

The same program as the console script ``pbo-plot``: `pbo_tf.cli.plot` (its docstring and ``--help`` list
the flags). This file runs it from a checkout, installed or not.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pbo_tf.cli.plot import main  # noqa: E402

if __name__ == "__main__":
    main()
