"""Loss terms: the PBO loss as a weighted list of small objects, each returning its own metrics.

A term is called with one `pbo_tf.loss_terms.context.LossContext` and returns ``(loss, metrics)``: a scalar
and a dict of named scalars. `combine_terms` adds the terms up, ``L = Σ_i weight_i · loss_i``, and names
every metric after its term: ``<name>`` is the term's loss (before its weight) and ``<name>/<key>`` each of
its metrics. Those names reach TensorBoard (``loss_terms/<name>``), the progress lines (`progress_text`)
and ``metrics.json`` (``loss_terms``) offline and online without any trainer or agent knowing the term.

A term that keeps state between gradient steps (an estimate recomputed at each target refresh, a variable
that ramps a weight) returns a copy of itself holding that state from `LossTerm.bind`, so the S seeds of a
batched run, which share one config and so one term object, each train with their own. A stateless term
writes ``__call__`` alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

from pbo_tf.loss_terms.context import LossContext


def is_one(weight) -> bool:
    """Whether ``weight`` is the Python number 1 (the term is then added unscaled)."""
    return isinstance(weight, (int, float)) and not isinstance(weight, bool) and weight == 1


class LossTerm:
    """One term of the PBO loss (see the module docstring).

    Subclasses set ``name`` (the metrics' prefix) and implement ``__call__(context) -> (loss, metrics)``;
    a term with state overrides `bind` and `on_refresh`, and may override `records`, `monitor` and
    `diagnose`.

    Args:
      weight: the term's weight in the sum, a finite number >= 0.

    Raises:
      ValueError: a weight that is not a finite number >= 0.
    """

    #: the term's name: its loss is the metric ``<name>``, its metrics ``<name>/<key>``.
    name = "term"
    #: which of the term's own metrics the progress lines show (None: all of them); its loss always shows.
    progress_metrics: Sequence[str] | None = None

    def __init__(self, weight: float = 1.0):
        if isinstance(weight, (int, float)) and not isinstance(weight, bool):
            if not 0 <= weight < float("inf"):
                raise ValueError(f"{type(self).__name__}.weight must be a finite number >= 0, got {weight!r}")
            weight = float(weight)
        elif not tf.is_tensor(weight):
            raise ValueError(f"{type(self).__name__}.weight must be a finite number >= 0, got {weight!r}")
        self.weight = weight

    def __call__(self, context: LossContext) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """The term's loss (a differentiable scalar) and its metrics (named scalars) on one gradient step."""
        raise NotImplementedError

    def bind(self, learner) -> LossTerm:
        """The term as one learner (`pbo_tf.learner.PBOLearner`: its operators, Q family, W, ω₀ and K) uses
        it; checks the options against them. Stateless terms return themselves."""
        return self

    def on_refresh(self, learner, progress) -> None:
        """Called after each target refresh ``φ̄ ← φ`` with the run's progress (a fraction, or None where the
        owner does not count it)."""

    def records(self) -> dict:
        """What ``metrics.json`` records of the term's options beside the operator ({} by default)."""
        return {}

    def monitor(self) -> tuple[dict, str] | None:
        """The term's state now, ``(scalars, text)`` for TensorBoard and the progress line, or None."""
        return None

    def diagnose(self, nonfinite_q: Callable[[tf.Tensor, str], str]) -> str:
        """What is non-finite in the term's state, in words ("" when nothing is)."""
        return ""


def combine_terms(terms: Sequence[LossTerm], context: LossContext) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """``L = Σ_i weight_i · loss_i`` over ``terms`` in order, and every term's metrics under its name
    (``<name>``: its loss before the weight; ``<name>/<key>``: its own metrics). Before each term,
    ``context.loss_so_far`` is set to the weighted sum of the terms before it."""
    total, metrics = None, {}
    for term in terms:
        context.loss_so_far = tf.zeros([]) if total is None else total
        value, own = term(context)
        metrics[term.name] = value
        metrics.update({f"{term.name}/{key}": metric for key, metric in own.items()})
        weighted = value if is_one(term.weight) else term.weight * value
        total = weighted if total is None else total + weighted
    return total, metrics


def check_terms(terms, owner: str) -> tuple[LossTerm, ...]:
    """``terms`` as a tuple of `LossTerm` objects with distinct names, checked.

    Raises:
      ValueError: no term, something that is not a term, or two terms of one name (naming ``owner``).
    """
    if isinstance(terms, LossTerm):
        terms = (terms,)
    terms = tuple(terms)
    if not terms:
        raise ValueError(f"{owner} needs at least one loss term, e.g. [@BellmanTerm()]")
    for term in terms:
        if not isinstance(term, LossTerm):
            raise ValueError(f"{owner} takes pbo_tf.loss_terms.LossTerm objects, got {term!r}")
    names = [term.name for term in terms]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"{owner} has two loss terms named {twice[0]!r}: give one another name")
    return terms


def summary_scalars(metrics: dict) -> dict[str, float]:
    """The TensorBoard tags of the terms' metrics: ``loss_terms/<metric>``."""
    return {f"loss_terms/{key}": float(value) for key, value in metrics.items()}


def progress_text(terms: Sequence[LossTerm], metrics: dict) -> str:
    """The terms' part of a progress line: each term's loss and the metrics it shows
    (``bellman 0.0123, fixed_point 0.456``); "" without metrics."""
    parts = []
    for term in terms:
        if term.name not in metrics:
            continue
        parts.append(f"{term.name} {float(metrics[term.name]):.4g}")
        prefix = f"{term.name}/"
        for key, value in metrics.items():
            own = key[len(prefix) :] if key.startswith(prefix) else None
            if own is not None and (term.progress_metrics is None or own in term.progress_metrics):
                parts.append(f"{key} {float(value):.4g}")
    return ", ".join(parts)
