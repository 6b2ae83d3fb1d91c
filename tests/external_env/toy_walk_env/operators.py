"""An operator kind outside pbo_tf, ``toy_state_affine`` (the module the ``pbo_tf.operators`` entry point
names): ``Λ(ω) = a ⊙ ω + c`` with one learned slope and offset per state, shared by the state's actions,
for the tabular family (it reads the table's shape off the family)."""

import gin
import tensorflow as tf
import tf_keras

from pbo_tf.operators import registry
from pbo_tf.operators.base import PBO
from pbo_tf.q import TableQ


@registry.register("toy_state_affine", q_family=TableQ)
@gin.configurable(denylist=["q_family", "init_std", "seed"])
class StateAffinePBO(PBO):
    """``Λ(ω)[s, a] = slope[s] · ω[s, a] + offset[s]`` on the row-major table ``ω [n_w, N·|A|]``.

    Args:
      q_family: the `TableQ` family (N states, |A| actions).
      slope: the slopes' initial value.
      init_std: std of the offsets' truncated-normal initialisation.
      seed: seed of that initialisation.
    """

    def __init__(self, q_family, slope: float = 0.5, init_std: float = 1e-5, seed=None, **kwargs):
        super().__init__(q_family.d, **kwargs)
        self.n_states, self.n_actions = q_family.n_states, q_family.n_actions
        self.slope_init, self.init_std = float(slope), float(init_std)
        self.slope = self.add_weight(
            name="slope", shape=[self.n_states], initializer=tf_keras.initializers.Constant(self.slope_init)
        )
        self.offset = self.add_weight(
            name="offset",
            shape=[self.n_states],
            initializer=tf_keras.initializers.TruncatedNormal(stddev=self.init_std, seed=seed),
        )

    def apply(self, params):
        table = tf.reshape(params, [-1, self.n_states, self.n_actions])
        out = self.slope[None, :, None] * table + self.offset[None, :, None]
        return tf.reshape(out, [-1, self.d])

    def get_config(self):
        return {"d": self.d, "slope": self.slope_init, "init_std": self.init_std, "name": self.name}
