"""Any gymnasium environment with discrete actions and vector observations, by id.

* `evaluation`: batched greedy episodes of many parameter vectors and their returns (imports TensorFlow),
  the evaluation protocol of every online environment that is a plain gymnasium id (Lunar Lander too).
"""
