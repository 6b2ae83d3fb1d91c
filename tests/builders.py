"""Shared by the trainer and agent tests: a trainer or an agent from one flat set of keyword arguments, the
config's fields split off into its config (`pbo_tf.configs`)."""

import dataclasses

import tensorflow as tf


def _split(config_class, kwargs: dict) -> dict:
    """Pops the fields of ``config_class`` out of ``kwargs`` and returns them."""
    fields = {f.name for f in dataclasses.fields(config_class)}
    return {k: kwargs.pop(k) for k in list(kwargs) if k in fields}


def profqi_trainer(**kwargs):
    """A `ProFQITrainer` from its keyword arguments and its config's (`ProFQIConfig`, |W| from ``w_set``)."""
    from pbo_tf.configs import ProFQIConfig
    from pbo_tf.trainers.profqi import ProFQITrainer

    config = _split(ProFQIConfig, kwargs)
    config.setdefault("w_size", len(kwargs["w_set"]))
    return ProFQITrainer(config=ProFQIConfig(**config), **kwargs)


def fqi_trainer(**kwargs):
    """An `FQITrainer` from its keyword arguments and its config's (`FQIConfig`)."""
    from pbo_tf.configs import FQIConfig
    from pbo_tf.trainers.fqi import FQITrainer

    return FQITrainer(config=FQIConfig(**_split(FQIConfig, kwargs)), **kwargs)


def ifqi_trainer(**kwargs):
    """An `IFQITrainer` from its keyword arguments and its config's (`IFQIConfig`)."""
    from pbo_tf.configs import IFQIConfig
    from pbo_tf.trainers.ifqi import IFQITrainer

    return IFQITrainer(config=IFQIConfig(**_split(IFQIConfig, kwargs)), **kwargs)


def dqn_agent(**kwargs):
    """`make_dqn_agent` from its keyword arguments and its config's (`DQNConfig`; K default 1)."""
    from pbo_tf.agents.dqn import make_dqn_agent
    from pbo_tf.configs import DQNConfig

    config = _split(DQNConfig, kwargs)
    config.setdefault("K", 1)
    return make_dqn_agent(config=DQNConfig(**config), **kwargs)


def idqn_agent(**kwargs):
    """An `IDQNAgent` from its keyword arguments and its config's (`IDQNConfig`; refreshes default 1, ε 0.1
    unless given)."""
    from pbo_tf.agents.idqn import IDQNAgent
    from pbo_tf.configs import IDQNConfig

    config = _split(IDQNConfig, kwargs)
    config.setdefault("refreshes", 1)
    config.setdefault("train_steps_per_refresh", 1)
    kwargs.setdefault("epsilon", 0.1)
    return IDQNAgent(config=IDQNConfig(**config), **kwargs)


def prodqn_agent(time_step_spec, action_spec, q_family, pbo, params, K, gamma, optimizer, **kwargs):
    """A `ProDQNAgent` from the positional runtime objects, K and its config's keyword fields
    (`ProDQNConfig`; |W| from ``params``); ``lr_schedule_steps`` sets the refreshes of one training step
    each, and ε is `linear_epsilon` over ``epsilon_decay_train_steps`` (default 1000) training steps."""
    from pbo_tf.agents.prodqn import ProDQNAgent
    from pbo_tf.agents.replay import linear_epsilon
    from pbo_tf.configs import ProDQNConfig

    config = _split(ProDQNConfig, kwargs)
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
