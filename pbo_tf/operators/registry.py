"""The registry of operator kinds: per kind (``make_pbo.kind``), the builder that makes the operator from
the Q family.

`pbo_tf.operators.factory.make_pbo` builds every operator through `build`, so a kind registered here is
built, trained, saved, reloaded and exported like the built-in ones (``linear``, ``deep``, ``structured``,
``oracle``, ``conv`` and ``equivariant``, all registered at the bottom of this file, so every lookup lists
them whatever was imported before). A builder is a
`pbo_tf.operators.base.PBO` subclass or any callable returning one, called with the Q family itself, so it
can read the family's structure
(`pbo_tf.q.FlatMLPQ.layout`: each layer's kernel and bias shapes and offsets in ``ω``)::

    # my_package/operators.py
    import gin
    from pbo_tf.operators import registry
    from pbo_tf.operators.base import PBO
    from pbo_tf.q import FlatMLPQ

    @registry.register("my_kind", q_family=FlatMLPQ)
    @gin.configurable(denylist=["q_family", "init_std", "seed"])  # its own options: MyPBO.rank = 4
    class MyPBO(PBO):
        def __init__(self, q_family, rank=4, init_std=1e-3, seed=None, **kwargs):
            super().__init__(q_family.d, **kwargs)
            ...

The builder is called as ``builder(q_family, **common, **options)``. ``common`` holds those of the common
arguments `COMMON_ARGUMENTS` its signature names (``name`` also when it takes ``**kwargs``, as a Keras layer
does): ``problem`` (the offline problem, or None in online runs), ``init_std``, ``seed`` (of its random
initialisation, `pbo_tf.operators.base.initializer_seeds`; None draws from the global generator), ``name``
and ``w_set`` (the set W ``[n_W, d]``, e.g. for a standardisation; None when a checkpoint restores the
operator). ``options`` are the `make_pbo` options the kind declares (`OperatorKind.options`: the deep
kind's ``hidden_multiples``, ``activation``, ...); a plug-in's own options are best bound on its own gin
configurable, as above. A builder raising `NotImplementedError` says the problem has no such operator.

A package outside pbo_tf names the module that registers its kinds in the entry-point group
`ENTRY_POINT_GROUP` (``pbo_tf.operators``) of its ``pyproject.toml``::

    [project.entry-points."pbo_tf.operators"]
    my_kind = "my_package.operators"

An entry point names a module (importing it registers its kinds) or a callable (``"module:func"``, called
with no arguments). The group is loaded once, on the first lookup (`kind`, `names`, `build`,
`load_entry_points`); `pbo_tf.operators.factory` looks it up when it is imported, so the kinds' gin
configurables exist before any gin file (a run's ``config.gin`` too) is parsed. A process can also import
the registering module itself (the programs' ``--import=module``, an ``import`` line of a gin file).
This module imports neither gin nor TensorFlow.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Callable
from typing import Any

from pbo_tf.entry_points import EntryPointGroup

#: The entry-point group in which packages outside pbo_tf declare their operator kinds.
ENTRY_POINT_GROUP = "pbo_tf.operators"
#: The arguments every builder may take besides the Q family and its options (see the module docstring).
COMMON_ARGUMENTS = ("problem", "init_std", "seed", "name", "w_set")


class EntryPointError(ValueError):
    """An entry point of `ENTRY_POINT_GROUP` failed to load (its message names the distribution and the
    entry point)."""


@dataclasses.dataclass(frozen=True)
class OperatorKind:
    """One kind of the registry.

    Attributes:
      name: the name ``make_pbo.kind`` gives.
      builder: the class or callable that builds the operator (see the module docstring), or a lazy
        ``"module:attr"`` reference to it.
      options: the `make_pbo` options it takes (``hidden_multiples``, ``activation``, ...).
      needs_problem: whether it needs the offline problem (None in online runs is refused).
      q_family: the Q family class it needs, or a tuple of them (one of them), each of which may be a lazy
        ``"module:Class"`` reference; None: any family.
    """

    name: str
    builder: Callable | str
    options: tuple[str, ...] = ()
    needs_problem: bool = False
    q_family: type | str | tuple[type | str, ...] | None = None

    def load_builder(self) -> Callable:
        """The builder, imported first when it is a lazy reference."""
        return _load(self.builder)

    def load_q_family(self) -> tuple[type, ...] | None:
        """The Q family classes it needs (those given as lazy references imported first), or None."""
        if self.q_family is None:
            return None
        families = self.q_family if isinstance(self.q_family, tuple) else (self.q_family,)
        return tuple(_load(f) for f in families)


_KINDS: dict[str, OperatorKind] = {}
#: The entry points of `ENTRY_POINT_GROUP` that `load_entry_points` loads, with the state of that loading
#: (`pbo_tf.entry_points.EntryPointGroup.state`: the `EntryPointError` of an entry point that failed is
#: raised again on every later lookup); None until the first lookup, and a fresh start when set back to None.
_entry_points_state: EntryPointGroup | None = None

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
#: How an operator kind outside pbo_tf is found, appended to the unknown-kind error.
_HINT = (
    f" (another package's kinds are found through its {ENTRY_POINT_GROUP!r} entry point, or with "
    "--import=<the module that registers them>)"
)


def register(
    name: str,
    builder: Callable | str | None = None,
    *,
    options: tuple[str, ...] | list[str] = (),
    needs_problem: bool = False,
    q_family: type | str | tuple[type | str, ...] | None = None,
):
    """Adds the operator kind ``name`` (see `OperatorKind`). Without ``builder`` it is a class decorator:
    ``@register("my_kind")`` registers the class it decorates and returns it unchanged.

    Returns:
      The new `OperatorKind`, or the decorator.

    Raises:
      ValueError: ``name`` is taken or not a lower-case identifier, the builder is neither callable nor a
        ``"module:attr"`` reference, or ``q_family`` is not a class, a ``"module:Class"`` reference or a
        tuple of them.
    """
    if builder is None:

        def decorator(target):
            register(name, target, options=options, needs_problem=needs_problem, q_family=q_family)
            return target

        return decorator
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"operator kind {name!r} must be a lower-case identifier, e.g. 'low_rank'")
    if name in _KINDS:
        raise ValueError(f"operator kind {name!r} is already registered: {_KINDS[name]}")
    if isinstance(builder, str) and not _REFERENCE.match(builder):
        raise ValueError(f"builder={builder!r} must be a lazy reference 'package.module:Name'")
    if not isinstance(builder, str) and not callable(builder):
        raise ValueError(f"the builder of operator kind {name!r} is not callable: {type(builder).__name__}")
    families = q_family if isinstance(q_family, tuple) else (q_family,)
    valid = [f for f in families if isinstance(f, type) or (isinstance(f, str) and _REFERENCE.match(f))]
    if q_family is not None and len(valid) < len(families):
        raise ValueError(
            f"q_family of operator kind {name!r} must be a class, a lazy reference 'package.module:Class' "
            "or a tuple of them"
        )
    new = OperatorKind(name, builder, tuple(options), bool(needs_problem), q_family)
    _KINDS[name] = new
    return new


def unregister(name: str) -> None:
    """Removes the kind ``name`` (for tests and notebooks).

    Raises:
      ValueError: no such kind.
    """
    kind(name)
    del _KINDS[name]


def kind(name: str) -> OperatorKind:
    """The registered kind ``name``.

    Raises:
      ValueError: unknown kind, listing the known ones.
    """
    load_entry_points()
    if name not in _KINDS:
        raise ValueError(f"unknown PBO kind {name!r}; known kinds: {names()}{_HINT}")
    return _KINDS[name]


def names(needs_problem: bool | None = None) -> list[str]:
    """The names of every kind in registration order (the built-in ones first), or of those that need
    (``True``) or do not need (``False``) an offline problem."""
    load_entry_points()
    return [n for n, k in _KINDS.items() if needs_problem is None or k.needs_problem == needs_problem]


def build(
    kind_name: str,
    q_family,
    *,
    problem=None,
    init_std: float = 5e-6,
    seed: int | None = None,
    name: str | None = None,
    w_set=None,
    **options,
):
    """The operator of kind ``kind_name`` for ``q_family``: its builder called with the Q family, the
    common arguments its signature takes and ``options`` (see the module docstring).

    Returns:
      The operator, a `pbo_tf.operators.base.PBO` mapping ``[n_w, d] → [n_w, d]`` with ``d = q_family.d``.

    Raises:
      ValueError: an unknown kind; a kind that needs an offline problem without one, or a Q family of
        another class; an option the kind does not take; the problem has no such operator (its builder
        raised `NotImplementedError`).
    """
    entry = kind(kind_name)
    if entry.needs_problem and problem is None:
        online = names(needs_problem=False)
        raise ValueError(f"kind={kind_name!r} needs an offline problem; the kinds of online runs: {online}")
    families = entry.load_q_family()
    if families is not None and not isinstance(q_family, families):
        wanted = " or ".join(f.__name__ for f in families)
        raise ValueError(f"kind={kind_name!r} needs a {wanted} Q family, got {type(q_family).__name__}")
    unknown = sorted(set(options) - set(entry.options))
    if unknown:
        known = list(entry.options)
        raise ValueError(f"kind={kind_name!r} takes no option {unknown[0]!r}; its options: {known}")
    builder = entry.load_builder()
    common = dict(problem=problem, init_std=init_std, seed=None if seed is None else int(seed), name=name)
    common["w_set"] = w_set
    accepted, var_keyword = _parameters(builder)
    kwargs = {k: v for k, v in common.items() if k in accepted or (k == "name" and var_keyword)}
    try:
        return builder(q_family, **kwargs, **options)
    except NotImplementedError as e:
        raise ValueError(
            f"kind={kind_name!r}: {e}; the kinds every problem has: {names(needs_problem=False)}"
        ) from e


def load_entry_points() -> None:
    """Loads every entry point of the group `ENTRY_POINT_GROUP` (``pbo_tf.operators``), once per process:
    a module entry point is imported, a callable one (``"module:func"``) is also called; either registers
    its kinds with `register`. Every lookup of this module calls it first.

    Raises:
      EntryPointError: an entry point failed to import, to run, or to register (e.g. a kind already
        taken); the one-line message names its distribution, the entry point and the error. The entry
        points loaded before it stay registered, and every later call raises the same error.
    """
    global _entry_points_state
    if _entry_points_state is None:
        _entry_points_state = EntryPointGroup(ENTRY_POINT_GROUP, EntryPointError)
    _entry_points_state.load()


def _load(target: Any) -> Any:
    """``target`` itself, or the object it names when it is a lazy ``"module:attr"`` reference (its module
    imported on first use)."""
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)
    return target


def _parameters(builder: Callable) -> tuple[set[str], bool]:
    """The keyword parameters ``builder`` names (a class: its ``__init__``'s) and whether it takes
    ``**kwargs``."""
    try:
        signature = inspect.signature(builder)
    except (TypeError, ValueError):  # a builtin without a signature: give it the common arguments
        return set(COMMON_ARGUMENTS), False
    named = {
        p.name
        for p in signature.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    var_keyword = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    return named, var_keyword


# The built-in kinds (their builders are in the operators' modules, imported on first use).
#: The options of the deep kind, which `make_pbo` takes as its own (``make_pbo.hidden_multiples``, ...).
DEEP_OPTIONS = (
    "hidden_multiples",
    "hidden_units",
    "compute_dtype",
    "activation",
    "kernel_init",
    "residual",
    "standardise",
)
register("linear", "pbo_tf.operators.linear:build_linear")
register("deep", "pbo_tf.operators.deep:build_deep", options=DEEP_OPTIONS)
register("structured", "pbo_tf.operators.structured:build_structured", needs_problem=True)
register("oracle", "pbo_tf.operators.structured:build_oracle", needs_problem=True)
# The operators that scale to large d (docs/faithfulness.md, DESIGN §8), each with its options on a gin
# configurable of its own (``ConvPBO.channels``, ``EquivariantPBO.channels``): their builders are those
# configurables, which `pbo_tf.operators.factory` makes (it binds gin; this module imports neither it nor gin,
# the references are imported when such an operator is first built).
register("conv", "pbo_tf.operators.factory:conv_builder")
register("equivariant", "pbo_tf.operators.factory:equivariant_builder", q_family="pbo_tf.q:FlatMLPQ")
