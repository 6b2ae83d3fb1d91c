"""TF-Agents agents: ProDQN (a `TFAgent` learning a PBO online) and the DQN baseline (`DqnAgent`)."""

from pbo_tf.agents.dqn import make_dqn_agent
from pbo_tf.agents.networks import FlatQNetwork, PBOQNetwork, clone_pbo
from pbo_tf.agents.prodqn import ProDQNAgent, ProDQNLossInfo, experience_to_batch, linear_epsilon

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
