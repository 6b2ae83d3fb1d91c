"""Parameterised projected Bellman operators (Keras layers, ``[n_w, d] → [n_w, d]``)."""

from pbo_tf.operators.base import PBO
from pbo_tf.operators.deep import DeepPBO
from pbo_tf.operators.linear import LinearPBO
from pbo_tf.operators.structured import LQRPBO, TabularPBO, oracle_lqr_pbo, oracle_tabular_pbo

__all__ = ["PBO", "DeepPBO", "LinearPBO", "LQRPBO", "TabularPBO", "oracle_lqr_pbo", "oracle_tabular_pbo"]
