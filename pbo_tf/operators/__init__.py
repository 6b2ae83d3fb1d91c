"""Parameterised projected Bellman operators (Keras layers, ``[n_w, d] → [n_w, d]``).

The gin-bound factory of the experiments (`make_pbo`, `WSampler`) is `pbo_tf.operators.factory`, which
this package does not import: the operators themselves know nothing of gin. `pbo_tf.operators.registry`
holds the kinds ``make_pbo.kind`` names, pbo_tf's and those other packages register (their entry points).
"""

from pbo_tf.operators.base import PBO, apply_stacked, chain_stacked
from pbo_tf.operators.conv import ConvPBO
from pbo_tf.operators.deep import DeepPBO
from pbo_tf.operators.equivariant import EquivariantPBO
from pbo_tf.operators.linear import LinearPBO
from pbo_tf.operators.structured import LQRPBO, TabularPBO, oracle_lqr_pbo, oracle_tabular_pbo

__all__ = [
    "PBO",
    "apply_stacked",
    "chain_stacked",
    "ConvPBO",
    "DeepPBO",
    "EquivariantPBO",
    "LinearPBO",
    "LQRPBO",
    "TabularPBO",
    "oracle_lqr_pbo",
    "oracle_tabular_pbo",
]
