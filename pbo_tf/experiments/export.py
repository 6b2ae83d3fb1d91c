"""Trained results as SavedModels that load with TensorFlow alone: the operator and the greedy policy.

* `save_operator`: a trained PBO ``Λ`` as a SavedModel with ``apply(omega [n, d], k) -> Λ^k(omega)``,
  ``iterate(omega, k) -> [k + 1, n, d]`` (int32 ``k``) and the variable ``omega0``;
* `save_policy`: a TF-Agents policy as a `PolicySaver` SavedModel (``pbo-play`` plays it;
  ``tf.saved_model.load(path).action(time_step)`` needs TensorFlow and TF-Agents, not pbo_tf);
* `greedy_policy` and `policy_specs`: the greedy policy of ``Q_ω`` of an offline problem's Q family, in the
  problem's gymnasium environment (`Problem.env_id`, made with `Problem.gym_kwargs`);
* `export_trained`: both, and ``export.json``, into one folder (``pbo-apply --export``).

The online runner saves its agent's greedy policy with `save_policy`
(`pbo_tf.experiments.online.OnlineExperiment.export_policy`). Every folder is written aside and then swapped
in, so an interrupted export leaves the previous one whole.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
import warnings

import numpy as np
import tensorflow as tf

from pbo_tf.io import write_json_atomic


class ExportError(ValueError):
    """The problem's gymnasium environment, in which its greedy policy acts, cannot be made."""


# ------------------------------------------------------------------------------------------ operator
def operator_module(pbo, omega0: np.ndarray, d: int) -> tf.Module:
    """A `tf.Module` with ``apply(omega, k)``, ``iterate(omega, k)`` and ``omega0``, for
    `tf.saved_model.save`. It tracks the operator's variables, not the Keras layer, so loading it needs
    TensorFlow only.

    Args:
      pbo: the operator (a `pbo_tf.operators.base.PBO`), mapping ``[n, d]`` to ``[n, d]``.
      omega0: the vector ``[d]`` (or vectors ``[n, d]``) stored as the variable ``omega0``.
      d: the Q family's number of parameters.
    """
    signature = [tf.TensorSpec([None, d], tf.float32, name="omega"), tf.TensorSpec([], tf.int32, name="k")]

    def apply(omega, k):
        tf.debugging.assert_non_negative(k, message="k must be >= 0")
        _, out = tf.while_loop(lambda i, _: i < k, lambda i, w: (i + 1, pbo(w)), (tf.constant(0), omega))
        return out

    def iterate(omega, k):
        tf.debugging.assert_non_negative(k, message="k must be >= 0")
        out = tf.TensorArray(tf.float32, size=k + 1, element_shape=tf.TensorShape([None, d]))
        out = out.write(0, omega)

        def body(i, w, out):
            w = pbo(w)
            return i + 1, w, out.write(i + 1, w)

        _, _, out = tf.while_loop(lambda i, *_: i < k, body, (tf.constant(0), omega, out))
        return out.stack()

    module = tf.Module(name="pbo_operator")
    module.operator_variables = list(pbo.variables)
    module.omega0 = tf.Variable(omega0, trainable=False, name="omega0")
    module.apply = tf.function(apply, input_signature=signature)
    module.iterate = tf.function(iterate, input_signature=signature)
    return module


def save_operator(path: str, pbo, omega0: np.ndarray, d: int) -> str:
    """Writes `operator_module` of ``pbo`` as a SavedModel into ``path`` (replaced whole); returns it."""
    with _quiet_saving(), _replaced_dir(path) as tmp:
        tf.saved_model.save(operator_module(pbo, omega0, d), tmp)
    return path


# -------------------------------------------------------------------------------------------- policy
def policy_specs(problem):
    """``((time_step_spec, action_spec), None)`` of the problem's gymnasium environment
    (``gymnasium.make(problem.env_id, **problem.gym_kwargs())`` through `pbo_tf.envs.to_tf_agents`), in
    which the greedy policy of a Q of the problem's family acts; ``(None, why)`` when there is none:
    no gymnasium id, actions that are not discrete, or observations that are not the problem's states
    (`Problem.dataset_layout`).

    Raises:
      ExportError: the problem names a gymnasium environment that cannot be made.
    """
    from tf_agents.specs import tensor_spec

    from pbo_tf.envs import make, to_tf_agents

    env_id = problem.env_id
    if env_id is None:
        return None, (
            f"no gymnasium id registered for problem {problem.name} (its registry entry has no gym_id and "
            f"{type(problem).__name__}.env_id is None)"
        )
    try:
        env = to_tf_agents(make(env_id, **problem.gym_kwargs()))
    except Exception as e:  # unknown id, bad kwargs, a failing constructor
        message = re.sub(r"\s+", " ", str(e)).strip() or "(no message)"
        raise ExportError(
            f"cannot make {problem.name}'s gymnasium environment {env_id!r} with {problem.gym_kwargs()}: "
            f"{message}"
        ) from e
    action_spec = tensor_spec.from_spec(env.action_spec())
    time_step_spec = tensor_spec.from_spec(env.time_step_spec())
    layout = problem.dataset_layout()
    if not action_spec.dtype.is_integer or action_spec.shape.rank != 0:
        return None, (
            f"{problem.name}'s actions are not discrete ({env_id}'s actions are {action_spec.dtype.name} "
            f"of shape {list(action_spec.shape)})"
        )
    n_actions = int(action_spec.maximum) - int(action_spec.minimum) + 1
    if n_actions != layout["n_actions"]:
        return None, f"{env_id} has {n_actions} actions, {problem.name}'s Q family {layout['n_actions']}"
    observation = time_step_spec.observation
    if tuple(observation.shape) != tuple(layout["state_shape"]):
        return None, (
            f"observation shape mismatch: {env_id} observations have shape {list(observation.shape)}, "
            f"{problem.name}'s states {list(layout['state_shape'])}"
        )
    if np.issubdtype(observation.dtype.as_numpy_dtype, np.integer) != layout["integer_states"]:
        kind = "integer" if layout["integer_states"] else "real"
        return None, (
            f"observation dtype mismatch: {env_id} observations are {observation.dtype.name}, "
            f"{problem.name}'s states {kind}"
        )
    return (time_step_spec, action_spec), None


def online_policy_specs(env, seed: int):
    """`policy_specs` of an online run's environment (`pbo_tf.envs.base.OnlineEnv`): the specs of its
    training environment (``env.tf_env(seed)``), in which its greedy policies act; ``(None, why)`` when its
    actions are not discrete.

    Raises:
      ExportError: the environment cannot be made.
    """
    from tf_agents.specs import tensor_spec

    try:
        tf_env = env.tf_env(seed)
    except Exception as e:  # unknown id, a failing constructor
        message = re.sub(r"\s+", " ", str(e)).strip() or "(no message)"
        raise ExportError(f"cannot make {env.name}'s gymnasium environment {env.env_id!r}: {message}") from e
    action_spec = tensor_spec.from_spec(tf_env.action_spec())
    time_step_spec = tensor_spec.from_spec(tf_env.time_step_spec())
    tf_env.close()
    if not action_spec.dtype.is_integer or action_spec.shape.rank != 0:
        return None, (
            f"{env.name}'s actions are not discrete ({env.env_id}'s actions are {action_spec.dtype.name} "
            f"of shape {list(action_spec.shape)})"
        )
    return (time_step_spec, action_spec), None


def greedy_policy(specs, q_family, params: np.ndarray):
    """The TF-Agents greedy policy of ``Q_params`` (``params [d]``) in the environment of ``specs``, the
    ``(time_step_spec, action_spec)`` of `policy_specs`."""
    from tf_agents.policies import greedy_policy as greedy
    from tf_agents.policies import q_policy

    from pbo_tf.agents.networks import FlatQNetwork

    time_step_spec, action_spec = specs
    network = FlatQNetwork(time_step_spec.observation, q_family, initial_params=params)
    return greedy.GreedyPolicy(q_policy.QPolicy(time_step_spec, action_spec, q_network=network))


def save_policy(policy, path: str, train_step=None) -> str:
    """Writes ``policy`` as a TF-Agents `PolicySaver` SavedModel (unbatched; ``train_step``, a variable,
    saved with it) into ``path`` (replaced whole); returns ``path``."""
    from tf_agents.policies import policy_saver

    with _quiet_saving(), _replaced_dir(path) as tmp:
        policy_saver.PolicySaver(policy, batch_size=None, train_step=train_step).save(tmp)
    return path


# ------------------------------------------------------------------------------------------ together
def export_trained(
    directory: str, specs, pbo, q_family, start: np.ndarray, export_k: int, info: dict
) -> dict:
    """Writes ``directory/operator`` (`save_operator`, with ``start`` as ``omega0``), ``directory/policy``
    (the greedy policy of ``Q_{Λ^export_k(start)}``, when ``specs``, `policy_specs`' pair, is not None) and
    ``directory/export.json`` (``info`` with ``export_k`` and the folders written).

    Returns:
      ``{"operator": path, "policy": path or None}``.
    """
    os.makedirs(directory, exist_ok=True)
    written = {"operator": save_operator(os.path.join(directory, "operator"), pbo, start, q_family.d)}
    written["policy"] = None
    if specs is not None:
        omega_k = pbo.iterate(tf.constant(start[None]), export_k)[-1, 0].numpy()
        policy = greedy_policy(specs, q_family, omega_k)
        written["policy"] = save_policy(policy, os.path.join(directory, "policy"))
    description = dict(info, export_k=export_k, operator="operator", policy=written["policy"] and "policy")
    write_json_atomic(os.path.join(directory, "export.json"), description)
    return written


# ------------------------------------------------------------------------------------------- helpers
@contextlib.contextmanager
def _quiet_saving():
    """Keeps TensorFlow's and TF-Agents' saving notes (sanitised argument names, unbuilt Keras layers, spec
    encodings) off the output; errors still show."""
    loggers = [logging.getLogger(name) for name in ("absl", "tensorflow")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


class _replaced_dir:
    """``with _replaced_dir(path) as tmp:`` fill ``tmp``; on success it replaces ``path``."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self) -> str:
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        self.tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(self.path)}.", suffix=".tmp")
        return self.tmp

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        old = None
        if os.path.exists(self.path):
            old = self.tmp + ".old"
            os.replace(self.path, old)
        os.replace(self.tmp, self.path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
