r"""Writes a reproduction report (figures, tables, report.md) of the runs under a folder.

  python launch/report.py --root_dir=runs/paper --output_dir=reports/paper

The same program as the console script ``pbo-report``: `pbo_tf.cli.report` (its docstring and ``--help``
list the flags). This file runs it from a checkout, installed or not.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pbo_tf.cli.report import main  # noqa: E402

if __name__ == "__main__":
    main()
