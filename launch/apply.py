r"""Applies a finished offline run's trained operator for more iterations, without new samples.

  python launch/apply.py --run_dir=runs/cw/profqi --k_max=50 [--export=exported/cw --export_k=20]

The same program as the console script ``pbo-apply``: `pbo_tf.cli.apply` (its docstring and ``--help`` list
the flags). This file runs it from a checkout, installed or not.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pbo_tf.cli.apply import main  # noqa: E402

if __name__ == "__main__":
    main()
