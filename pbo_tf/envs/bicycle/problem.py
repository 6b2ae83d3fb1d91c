"""Bicycle's offline problem (paper Sec. 6.1): `BicycleProblem`, named ``bicycle`` in the registry."""

from __future__ import annotations

import gin

from pbo_tf.envs.base import Problem
from pbo_tf.envs.bicycle import mdp as bicycle
from pbo_tf.envs.bicycle.evaluation import evaluate_params
from pbo_tf.q import FlatMLPQ


@gin.configurable
class BicycleProblem(Problem):
    """Bicycle balancing (paper Sec. 6.1, offline): MLP Q on (ω, ω̇, θ, θ̇, d/0.02, T/2), 70 000 random
    transitions in 20-step episodes, evaluation by noisy rollouts from upright (paper appendix "Bicycle").

    Args:
      hidden: hidden widths of the Q network (paper: [30]).
      n_transitions, episode_length: the offline dataset.
      n_rollouts, max_steps: evaluation (paper: 100 rollouts of up to 50 000 steps = 500 s).
      eval_seed: seed of the evaluation noise (the same for every k and run: curves compare like with like).
    """

    name = "bicycle"
    main_metric = "balancing_time_s"
    # the paper's schedule (appendix Tables 1-2), for metrics['budget']
    paper_budget = dict(
        refreshes=500, passes_per_refresh=20, w_batches=2, d_batches=70, fqi_epochs=1200,
        ifqi_refreshes=1000, ifqi_passes_per_refresh=40,
    )  # fmt: skip

    def __init__(
        self,
        hidden=(30,),
        n_transitions: int = 70_000,
        episode_length: int = 20,
        n_rollouts: int = 100,
        max_steps: int = 50_000,
        eval_seed: int = 0,
    ):
        self.env = bicycle
        self.gamma = bicycle.GAMMA
        self.hidden = [int(h) for h in hidden]
        self.n_transitions, self.episode_length = int(n_transitions), int(episode_length)
        self.n_rollouts, self.max_steps, self.eval_seed = int(n_rollouts), int(max_steps), int(eval_seed)

    def q_family(self):
        return FlatMLPQ(4, self.hidden, self.env.ACTION_ENCODING)

    def dataset(self, seed):
        return self.env.collect_dataset(seed, self.n_transitions, self.episode_length)

    def dataset_layout(self):
        n_actions = len(self.env.ACTION_ENCODING)
        return dict(
            size=self.n_transitions,
            state_shape=(4,),
            integer_states=False,
            integer_actions=True,
            n_actions=n_actions,
        )

    def reference(self, dataset=None):
        return {"max_balancing_time_s": self.max_steps * self.env.DT}

    def evaluate(self, params, dataset=None):
        return evaluate_params(
            self.q_family(),
            params,
            n_rollouts=self.n_rollouts,
            max_steps=self.max_steps,
            gamma=self.gamma,
            seed=self.eval_seed,
        )
