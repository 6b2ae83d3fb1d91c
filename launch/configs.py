r"""Lists the shipped gin configs with their one-line descriptions.

  python launch/configs.py [--filter=car_on_hill]

The same program as the console script ``pbo-configs``: `pbo_tf.cli.configs` (its docstring and ``--help``
list the flags). This file runs it from a checkout, installed or not.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pbo_tf.cli.configs import main  # noqa: E402

if __name__ == "__main__":
    main()
