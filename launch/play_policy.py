r"""Runs an exported greedy policy (a run's D/policy/ SavedModel) in gymnasium.

  python launch/play_policy.py --policy_dir=runs/ll/lunar_lander/prodqn/seed_0/policy \
      --env=LunarLander-v3 --episodes=5

The same program as the console script ``pbo-play``: `pbo_tf.cli.play` (its docstring and ``--help`` list
the flags). This file runs it from a checkout, installed or not.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pbo_tf.cli.play import main  # noqa: E402

if __name__ == "__main__":
    main()
