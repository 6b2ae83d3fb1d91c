"""Shared by the trainer and agent tests: a ProFQI trainer or a ProDQN agent from one flat set of keyword
arguments, the config's fields split off into its `ProFQIConfig` / `ProDQNConfig`."""

import dataclasses

import tensorflow as tf


def profqi_trainer(**kwargs):
    """A `ProFQITrainer` from its keyword arguments and its config's (`ProFQIConfig`, |W| from ``w_set``)."""
    from pbo_tf.configs import ProFQIConfig
    from pbo_tf.trainers.profqi import ProFQITrainer

    fields = {f.name for f in dataclasses.fields(ProFQIConfig)}
    config = {k: kwargs.pop(k) for k in list(kwargs) if k in fields}
    config.setdefault("w_size", len(kwargs["w_set"]))
    return ProFQITrainer(config=ProFQIConfig(**config), **kwargs)


def prodqn_agent(time_step_spec, action_spec, q_family, pbo, params, K, gamma, optimizer, **kwargs):
    """A `ProDQNAgent` from the positional runtime objects, K and its config's keyword fields
    (`ProDQNConfig`; |W| from ``params``); ``lr_schedule_steps`` sets the refreshes of one training step
    each, and ε is `linear_epsilon` over ``epsilon_decay_train_steps`` (default 1000) training steps."""
    from pbo_tf.agents.prodqn import ProDQNAgent, linear_epsilon
    from pbo_tf.configs import ProDQNConfig

    fields = {f.name for f in dataclasses.fields(ProDQNConfig)}
    config = {k: kwargs.pop(k) for k in list(kwargs) if k in fields}
    lr_steps = kwargs.pop("lr_schedule_steps", None)
    if lr_steps is not None:
        config.setdefault("train_steps_per_refresh", 1)
        config["refreshes"] = lr_steps // config["train_steps_per_refresh"]
    config.setdefault("refreshes", 1)
    counter = kwargs.setdefault("train_step_counter", tf.compat.v1.train.get_or_create_global_step())
    epsilon = (
        kwargs.pop("epsilon_decay_train_steps", 1000),
        kwargs.pop("epsilon_start", 1.0),
        kwargs.pop("epsilon_end", 0.01),
    )
    given = kwargs.pop("epsilon_greedy", None)
    kwargs.setdefault("epsilon", linear_epsilon(counter, *epsilon) if given is None else given)
    config = ProDQNConfig(K=K, w_size=len(params), **config)
    return ProDQNAgent(
        time_step_spec=time_step_spec, action_spec=action_spec, q_family=q_family, pbo=pbo, w_set=params,
        gamma=gamma, optimizer=optimizer, config=config, **kwargs,
    )  # fmt: skip
