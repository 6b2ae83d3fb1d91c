"""The PBO loss as a weighted list of terms (`LossTerm`), each a small object returning its own metrics.

Built in: `BellmanTerm` (Eq. 3) and `FixedPointTerm` (Eq. 4, closed form and deep estimate). A new term is a
`LossTerm` subclass with a ``name`` and ``__call__(context) -> (loss, metrics)``; listed in an algorithm's
config (``ProFQIConfig.loss_terms = [@BellmanTerm(), @MyTerm()]``) it trains ProFQI and ProDQN alike, and
its metrics reach TensorBoard, the progress lines and ``metrics.json`` by themselves
(docs/new_loss_term_or_operator.md).
"""

from pbo_tf.loss_terms.base import LossTerm, check_terms, combine_terms, progress_text, summary_scalars
from pbo_tf.loss_terms.bellman import NORMALISATIONS, BellmanTerm
from pbo_tf.loss_terms.context import LossContext, chain_targets, prediction_chain, target_chain
from pbo_tf.loss_terms.fixed_point import FixedPointTerm

#: The terms of the paper's loss as the configs default to it: Eq. (3) alone.
PAPER_TERMS = (BellmanTerm(),)

__all__ = [
    "NORMALISATIONS",
    "PAPER_TERMS",
    "BellmanTerm",
    "FixedPointTerm",
    "LossContext",
    "LossTerm",
    "chain_targets",
    "check_terms",
    "combine_terms",
    "prediction_chain",
    "progress_text",
    "summary_scalars",
    "target_chain",
]
