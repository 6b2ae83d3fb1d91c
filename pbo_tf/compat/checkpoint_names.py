"""The names under which ProDQN checkpoints hold the operator and its training state.

A `tf.train.Checkpoint` names a variable by the attribute path that reaches it. `pbo_tf.agents.ProDQNAgent`
held its operator, target operator, set W, cached target chain and fixed-point estimate as attributes of its
own before `pbo_tf.learner.PBOLearner` held them, so a checkpoint of the agent stores them as
``agent/_pbo/...``, ``agent/_target_pbo/...`` and so on. The agent keeps these attributes pointing at the
learner's objects (`mirror_learner`), so checkpoints written before and after the learner restore alike, and
`pbo_tf.experiments.reader` reads the trained operator of an online run folder by `OPERATOR`.
"""

from __future__ import annotations

#: The agent's attribute holding the trained operator in a checkpoint (``agent/_pbo/...``).
OPERATOR = "_pbo"

#: ``{agent attribute: PBOLearner attribute}``: what the agent keeps tracked under the names of its
#: checkpoints.
PRODQN_AGENT = {
    OPERATOR: "pbo",
    "_target_pbo": "target_pbo",
    "_target_chain_all": "cached_chain",
    "_fixed_point_estimate": "fixed_point_estimate",
    "_params": "w_set",
}


def mirror_learner(agent, learner) -> None:
    """Points the agent's checkpoint attributes (`PRODQN_AGENT`) at the learner's objects."""
    for attribute, source in PRODQN_AGENT.items():
        setattr(agent, attribute, getattr(learner, source))
