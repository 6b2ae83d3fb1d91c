"""Parameterised projected Bellman operators (Keras layers, ``[n_w, d] → [n_w, d]``)."""

from pbo_tf.operators.base import PBO, apply_stacked, chain_stacked
from pbo_tf.operators.deep import DeepPBO
from pbo_tf.operators.linear import LinearPBO
from pbo_tf.operators.structured import LQRPBO, TabularPBO, oracle_lqr_pbo, oracle_tabular_pbo

__all__ = [
    "PBO",
    "apply_stacked",
    "chain_stacked",
    "DeepPBO",
    "LinearPBO",
    "LQRPBO",
    "TabularPBO",
    "oracle_lqr_pbo",
    "oracle_tabular_pbo",
]
