"""Any gymnasium environment with discrete actions and vector observations, by id.

* `online`: `GymOnlineEnv`, the online view of such an id (``OnlineExperiment.env = 'gym'``,
  ``GymOnlineEnv.gym_id = 'CartPole-v1'``): state size, action set and the Q network's input scaling read
  from its spaces;
* `evaluation`: batched greedy episodes of many parameter vectors and their returns (imports TensorFlow),
  the evaluation protocol of every online environment that is a plain gymnasium id (Lunar Lander too).
"""
