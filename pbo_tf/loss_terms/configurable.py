"""The built-in loss terms bound to gin (``@BellmanTerm()``, ``@FixedPointTerm()``, ``FixedPointTerm.*``).

The builders of ProFQI and ProDQN (`pbo_tf.trainers.builders`, `pbo_tf.agents.builders`) import this module,
so one gin file lists the terms of either algorithm the same way::

    ProFQIConfig.loss_terms = [@BellmanTerm(), @FixedPointTerm()]
    FixedPointTerm.iterations = 30

The package ``pbo_tf.loss_terms`` does not import it (gin binds at the edges). A term of your own is bound
the same way: decorate it with ``@gin.configurable`` (or pass it to ``gin.external_configurable``).
"""

from __future__ import annotations

import gin

from pbo_tf.loss_terms.bellman import BellmanTerm
from pbo_tf.loss_terms.fixed_point import FixedPointTerm

ConfiguredBellmanTerm = gin.external_configurable(BellmanTerm, name="BellmanTerm", module="pbo_tf")
ConfiguredFixedPointTerm = gin.external_configurable(FixedPointTerm, name="FixedPointTerm", module="pbo_tf")


def check_bound_terms(terms, owner: str) -> None:
    """Refuses gin bindings of a built-in term that ``terms`` (a config's ``loss_terms``, named ``owner``)
    does not hold, which would be silently ignored: a term of that class must be listed, with the bound
    values (the default list's `BellmanTerm` was not built by gin and holds the defaults).

    Raises:
      ValueError: one line naming the binding and the term to list.
    """
    for name in ("BellmanTerm", "FixedPointTerm"):
        bound = gin.get_bindings(name)
        if not bound:
            continue
        # matched by class name: the gin-built term is an instance of the class gin registered
        same = [term for term in terms if any(cls.__name__ == name for cls in type(term).__mro__)]
        plain = {
            key: value for key, value in sorted(bound.items()) if isinstance(value, (bool, int, float, str))
        }
        if any(all(getattr(term, key, None) == value for key, value in plain.items()) for term in same):
            continue
        key = next(
            (k for k, v in plain.items() if all(getattr(t, k, None) != v for t in same)), sorted(bound)[0]
        )
        listed = ", ".join(f"@{type(term).__name__}()" for term in terms)
        raise ValueError(
            f"{name}.{key} = {bound[key]!r} is bound but {owner} = [{listed}] holds no {name} built with it: "
            f"list @{name}() there (e.g. {owner} = [@BellmanTerm(), @FixedPointTerm()])"
        )
