"""TF-Agents agents: ProDQN (a `TFAgent` learning a PBO online) and the DQN baseline (`DqnAgent`).

The gin-bound builders that make them for an online run (``@ProDQN``, ``@DQN``) are `pbo_tf.agents.builders`,
which this package does not import.
"""

from pbo_tf.agents.dqn import make_dqn_agent
from pbo_tf.agents.networks import FlatQNetwork, PBOQNetwork, clone_pbo
from pbo_tf.agents.prodqn import ProDQNAgent, ProDQNLossInfo
from pbo_tf.agents.replay import experience_to_batch, linear_epsilon

__all__ = [
    "FlatQNetwork",
    "PBOQNetwork",
    "ProDQNAgent",
    "ProDQNLossInfo",
    "clone_pbo",
    "experience_to_batch",
    "linear_epsilon",
    "make_dqn_agent",
]
