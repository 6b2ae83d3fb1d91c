"""TF-Agents `Network`s over the functional Q families: the DQN baseline's Q network and ProDQN's PBO network.

Both networks output ``Q(s, ·)`` for every discrete action, ``[B, |A|]`` (any number of outer dimensions is
accepted: ``[B, T, …]`` observations give ``[B, T, |A|]``), so TF-Agents' own `QPolicy`, `GreedyPolicy`,
`EpsilonGreedyPolicy`, `DqnAgent`, drivers and `PolicySaver` use them unchanged.

* `FlatQNetwork`: ``Q_ω`` with one trainable flat parameter vector ``ω [d]`` (a single ``tf.Variable``).
  `Network.copy` re-runs the constructor with the same arguments, so a copy (e.g. `DqnAgent`'s target
  network) owns its own ``ω`` variable, initialised to the same values.
* `PBOQNetwork`: ``Q_{Λ_φ^k(ω_0)}`` with ``ω_0 [d]`` fixed (non-trainable variable), ``k`` an int32
  non-trainable variable ``apply_k`` (change it at evaluation time with `PBOQNetwork.set_apply_k`; the
  compiled policy functions read the variable, so nothing is retraced), and the PBO's weights as the only
  trainable variables. The iteration is a ``tf.while_loop``, so ``k`` may exceed the K of training.
  With ``cache_omega_k=True`` the network keeps ``Λ_φ^k(ω_0)`` in a non-trainable variable that its owner
  refreshes (`PBOQNetwork.refresh`) whenever ``φ`` changes — `ProDQNAgent` does so at the end of every
  training step, after its Adam steps — so that acting costs one Q evaluation instead of k PBO
  applications (at the lunar-lander shape one application reads the 25M PBO weights, and the collect
  policy acts ``steps_per_update`` times per training step).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras

try:
    from tf_agents.networks import network
except ImportError as error:  # TF-Agents and gym are installed apart (pbo_tf.deps)
    from pbo_tf.deps import raise_missing_tf_agents

    raise_missing_tf_agents(error)

from pbo_tf.operators.base import PBO
from pbo_tf.q.base import QFamily


def clone_pbo(pbo: PBO, name: str | None = None) -> PBO:
    """A second PBO of the same configuration, built, holding a copy of ``pbo``'s current weights.

    Uses the layer's ``get_config`` / ``from_config`` (every PBO in `pbo_tf.operators` implements it).
    The weights are copied once; the two operators are independent from then on.
    """
    config = dict(pbo.get_config())
    config["name"] = name or f"{pbo.name}_copy"
    clone = type(pbo).from_config(config)
    pbo.ensure_built()
    clone.ensure_built()
    if len(clone.weights) != len(pbo.weights):
        raise ValueError(f"cannot clone {type(pbo).__name__}: its config does not rebuild the same weights")
    for target, source in zip(clone.weights, pbo.weights, strict=True):
        target.assign(source)
    return clone


def _observation_rank(input_tensor_spec) -> int | None:
    if input_tensor_spec is None:
        return None
    flat = tf.nest.flatten(input_tensor_spec)
    if len(flat) != 1:
        raise ValueError(f"the Q families take one observation tensor, got the spec {input_tensor_spec}")
    return flat[0].shape.rank


def _q_of_params(q_family: QFamily, params: tf.Tensor, observation, observation_rank: int | None):
    """``Q_ω(s, ·)`` for one parameter vector ``[1, d]`` and observations ``[outer…, obs…]``.

    Returns ``[outer…, |A|]``; with no spec the observation is taken to have one outer (batch) dimension.
    """
    observation = tf.convert_to_tensor(observation)
    rank = observation.shape.rank
    n_outer = 1 if observation_rank is None else rank - observation_rank
    if n_outer < 1:
        raise ValueError(
            f"observations of shape {observation.shape.as_list()} have no batch dimension "
            f"(the spec has rank {observation_rank})"
        )
    dynamic = tf.shape(observation)
    outer = dynamic[:n_outer]
    flat = tf.reshape(observation, tf.concat([[-1], dynamic[n_outer:]], axis=0))
    q = q_family.q_all(params, flat)[0]  # [N, |A|]
    out = tf.reshape(q, tf.concat([outer, [q_family.n_actions]], axis=0))
    return tf.ensure_shape(out, observation.shape[:n_outer].concatenate([q_family.n_actions]))


class FlatQNetwork(network.Network):
    """``Q_ω(s, ·)`` of a `QFamily` with a trainable flat parameter vector ``ω`` (the DQN baseline's network).

    Args:
      input_tensor_spec: the observation spec (one tensor).
      q_family: the Q family (shared, weightless; a copy reuses it).
      seed: ``ω`` starts at ``q_family.initial_params(1, seed)[0]`` (= W[0] of that seed), unless
        ``initial_params`` is given.
      initial_params: explicit initial ``ω`` (``[d]``), e.g. the W[0] a ProDQN run of the same seed uses.
      name: the network's name.
    """

    def __init__(
        self,
        input_tensor_spec,
        q_family: QFamily,
        seed: int = 0,
        initial_params=None,
        name: str = "FlatQNetwork",
    ):
        super().__init__(input_tensor_spec=input_tensor_spec, state_spec=(), name=name)
        self._q_family = q_family
        self._observation_rank = _observation_rank(input_tensor_spec)
        if initial_params is None:
            initial_params = q_family.initial_params(1, seed)[0]
        initial_params = np.asarray(initial_params, dtype=np.float32).reshape(-1)
        if initial_params.shape != (q_family.d,):
            raise ValueError(f"initial_params must have {q_family.d} entries, got {initial_params.shape}")
        self._omega = self.add_weight(
            name="omega",
            shape=(q_family.d,),
            dtype=tf.float32,
            initializer=tf_keras.initializers.Constant(initial_params),
            trainable=True,
        )

    @property
    def q_family(self) -> QFamily:
        return self._q_family

    @property
    def omega(self) -> tf.Variable:
        """The flat parameter vector ``ω [d]`` (a trainable variable)."""
        return self._omega

    def call(self, observation, step_type=None, network_state=(), training=False):
        del step_type, training  # Q_ω is stateless and has no train/eval differences
        q = _q_of_params(self._q_family, self._omega[None], observation, self._observation_rank)
        return q, network_state


class PBOQNetwork(network.Network):
    """``Q_{Λ_φ^k(ω_0)}(s, ·)``: ProDQN's policy network.

    Args:
      input_tensor_spec: the observation spec (one tensor).
      q_family: the Q family.
      pbo: the operator ``Λ_φ`` (a built tf_keras layer; its weights are this network's trainable variables).
      omega_0: the starting parameters ``ω_0 [d]`` (W[0]), held in a non-trainable variable.
      apply_k: initial number of applications ``k`` (>= 0), held in a non-trainable int32 variable.
      cache_omega_k: keep ``Λ^k(ω_0)`` in a variable (see the module docstring); `call` then reads the
        cache, which `refresh` and `set_apply_k` update. Assigning the PBO's weights or ``apply_k`` directly
        leaves the cache stale until the next `refresh`.
      name: the network's name.

    `copy` gives a network with its own PBO (same configuration, a copy of the current weights, see
    `clone_pbo`) unless a ``pbo`` is passed, and its own ``ω_0`` and ``apply_k`` variables.
    """

    def __init__(
        self,
        input_tensor_spec,
        q_family: QFamily,
        pbo: PBO,
        omega_0,
        apply_k: int,
        cache_omega_k: bool = False,
        name: str = "PBOQNetwork",
    ):
        super().__init__(input_tensor_spec=input_tensor_spec, state_spec=(), name=name)
        if pbo.d != q_family.d:
            raise ValueError(f"the PBO acts on d={pbo.d} parameters but the Q family has d={q_family.d}")
        if int(apply_k) < 0:
            raise ValueError(f"apply_k must be >= 0, got {apply_k}")
        omega_0 = np.asarray(omega_0, dtype=np.float32).reshape(-1)
        if omega_0.shape != (q_family.d,):
            raise ValueError(f"omega_0 must have {q_family.d} entries, got {omega_0.shape}")
        pbo.ensure_built()
        self._q_family = q_family
        self._pbo = pbo
        self._observation_rank = _observation_rank(input_tensor_spec)
        self._omega_0 = self.add_weight(
            name="omega_0",
            shape=(q_family.d,),
            dtype=tf.float32,
            initializer=tf_keras.initializers.Constant(omega_0),
            trainable=False,
        )
        self._apply_k = self.add_weight(
            name="apply_k",
            shape=(),
            dtype=tf.int32,
            initializer=tf_keras.initializers.Constant(int(apply_k)),
            trainable=False,
        )
        self._cache_omega_k = bool(cache_omega_k)
        if self._cache_omega_k:
            self._omega_k_cache = self.add_weight(
                name="omega_k_cache",
                shape=(q_family.d,),
                dtype=tf.float32,
                initializer="zeros",
                trainable=False,
            )
            self.refresh()

    @property
    def q_family(self) -> QFamily:
        return self._q_family

    @property
    def pbo(self) -> PBO:
        return self._pbo

    @property
    def omega_0(self) -> tf.Variable:
        return self._omega_0

    @property
    def apply_k(self) -> tf.Variable:
        """The number of PBO applications ``k`` the network evaluates (int32 variable)."""
        return self._apply_k

    @property
    def caches_omega_k(self) -> bool:
        return self._cache_omega_k

    def set_apply_k(self, k: int) -> None:
        """Evaluates ``Q_{Λ^k(ω_0)}`` from now on (no retracing: compiled functions read the variable)."""
        if int(k) < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self._apply_k.assign(int(k))
        self.refresh()

    def refresh(self):
        """Recomputes the cached ``Λ_φ^k(ω_0)`` (no-op without the cache); call it after ``φ`` changes."""
        if not self._cache_omega_k:
            return tf.no_op()
        return self._omega_k_cache.assign(self.compute_omega_k()[0])

    def omega_k(self) -> tf.Tensor:
        """``Λ_φ^k(ω_0)`` as `call` uses it (the cache, when enabled): ``[1, d]``."""
        if self._cache_omega_k:
            return self._omega_k_cache[None]
        return self.compute_omega_k()

    def compute_omega_k(self) -> tf.Tensor:
        """``Λ_φ^k(ω_0)`` for the current ``k = apply_k``, applying the PBO k times: ``[1, d]``."""

        def body(i, params):
            return i + 1, self._pbo(params)

        _, params = tf.while_loop(
            lambda i, _: i < self._apply_k,
            body,
            (tf.constant(0, tf.int32), self._omega_0[None]),
        )
        return params

    def call(self, observation, step_type=None, network_state=(), training=False):
        del step_type, training
        q = _q_of_params(self._q_family, self.omega_k(), observation, self._observation_rank)
        return q, network_state

    def copy(self, **kwargs):
        if "pbo" not in kwargs:
            kwargs["pbo"] = clone_pbo(self._pbo, name=f"{self._pbo.name}_{kwargs.get('name', 'copy')}")
        if "omega_0" not in kwargs:
            kwargs["omega_0"] = self._omega_0.numpy()
        if "apply_k" not in kwargs:
            kwargs["apply_k"] = int(self._apply_k.numpy())
        kwargs.setdefault("cache_omega_k", self._cache_omega_k)
        return super().copy(**kwargs)
