"""Functional Q families: flat parameters ``[n_w, d]`` × inputs ``[B, …]`` → Q values ``[n_w, B(, |A|)]``."""

from pbo_tf.q.base import QFamily, ShapeMismatchError, check_params, first_argmax
from pbo_tf.q.lqr import LQRQ
from pbo_tf.q.mlp import FlatMLPQ, LayerLayout
from pbo_tf.q.multi_head import MultiHeadQ
from pbo_tf.q.per_action import PerActionMLPQ
from pbo_tf.q.table import TableQ

__all__ = [
    "QFamily",
    "ShapeMismatchError",
    "check_params",
    "first_argmax",
    "LQRQ",
    "FlatMLPQ",
    "LayerLayout",
    "MultiHeadQ",
    "PerActionMLPQ",
    "TableQ",
]
