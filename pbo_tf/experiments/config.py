"""Parsing gin files and bindings with errors that name the problem.

`parse_config` parses strictly and then checks what gin itself lets through: a binding that sets a macro no
gin file defines (a typo such as ``EPOCH=3``), a reference to a macro nothing defines (``%EPOCHS``), and a
value whose type does not match its parameter's annotation (``K='abc'``, ``ProFQITrainer.refreshes=2.5``).
`resolved_bindings` lists every binding with its macros substituted, the operative config that
`pbo_tf.experiments.run_folder` fingerprints.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

import gin

# Registers the configurables that gin files bind (Experiment, make_pbo, trainers, problems).
from pbo_tf.experiments import problems as _problems  # noqa: F401
from pbo_tf.experiments import runner as _runner  # noqa: F401

GIN_CONFIGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "gin_configs")

_MACRO = "gin.macro"
#: A binding that sets a macro: a bare name (no configurable, no scope) followed by ``=``.
_MACRO_BINDING = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=")
_MACRO_USE = re.compile(r"%([A-Za-z_][A-Za-z0-9_./]*)")
#: Annotations `check_binding_types` understands (anything else is not checked).
_SIMPLE_TYPES = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,), "None": (type(None),)}


class GinConfigError(ValueError):
    """A gin file or binding could not be parsed or names something that does not exist."""


def parse_config(gin_files: Sequence[str], bindings: Sequence[str] = ()) -> None:
    """Clears gin and parses ``gin_files`` then ``bindings`` strictly (unknown names are errors).

    ``include`` lines are resolved against each file's folder, its parent, and the repository's
    ``gin_configs/`` folder, so ``include 'chain_walk/common.gin'`` works from anywhere.

    Raises:
      FileNotFoundError: a gin file does not exist.
      GinConfigError: a file or binding is malformed, binds an unknown configurable or parameter, sets a
        macro that no gin file defines, uses an undefined macro or binds a value of the wrong type.
    """
    gin.clear_config()
    search = [GIN_CONFIGS_DIR]
    for path in gin_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"gin file {path!r} does not exist")
        if os.path.isdir(path):
            raise GinConfigError(f"gin file {path!r} is a folder, expected a .gin file")
        folder = os.path.dirname(os.path.abspath(path))
        search += [folder, os.path.dirname(folder)]
    for folder in search:
        if folder not in gin.config._LOCATION_PREFIXES:  # noqa: SLF001 (gin has no public getter)
            gin.add_config_file_search_path(folder)
    with _quiet_gin_search():
        for path in gin_files:
            try:
                gin.parse_config_file(path, skip_unknown=False)
            except Exception as e:  # gin raises ValueError, KeyError, SyntaxError, ... depending on the fault
                raise GinConfigError(f"cannot parse gin file {path!r}: {_first_line(e)}") from e
    file_macros = set(macros())
    for binding in bindings:
        _check_macro_binding(binding, bindings, file_macros)
        try:
            gin.parse_config(binding, skip_unknown=False)
        except Exception as e:
            raise GinConfigError(f"bad gin binding {binding!r}: {_first_line(e)}") from e
    check_macro_uses()
    check_binding_types()


def is_online_config() -> bool:
    """Whether the parsed gin config is an online experiment (it binds ``OnlineExperiment.*``)."""
    return "OnlineExperiment." in gin.config_str()


def macros() -> dict[str, Any]:
    """The macros the parsed config defines, ``{name: value}`` (values as bound, not resolved)."""
    return {
        scope: params.get("value") for (scope, selector), params in _config().items() if selector == _MACRO
    }


def resolved_bindings() -> dict[str, Any]:
    """Every binding of the parsed config as ``{"[scope/]Configurable.param": value}``, macros substituted
    (``Experiment.K = %K`` with ``K = 5`` gives ``Experiment.K: 5``); references to other configurables are
    kept as their text (``@name``). Macros themselves are not listed: only what they set counts."""
    out = {}
    defined = macros()
    for (scope, selector), params in _config().items():
        if selector == _MACRO:
            continue
        name = selector.rsplit(".", 1)[-1]
        prefix = f"{scope}/" if scope else ""
        for param, value in params.items():
            out[f"{prefix}{name}.{param}"] = _resolve(value, defined)
    return dict(sorted(out.items()))


def check_macro_uses() -> None:
    """Raises `GinConfigError` when a binding uses a macro (``%NAME``) that nothing defines."""
    defined = macros()
    for (_, selector), params in _config().items():
        for param, value in params.items():
            for ref in _references(value):
                if _is_macro(ref) and ref.scopes[-1] not in defined:
                    name = selector.rsplit(".", 1)[-1]
                    raise GinConfigError(
                        f"{name}.{param} uses the macro %{ref.scopes[-1]}, which no gin file or binding "
                        f"defines; defined macros: {sorted(defined) or 'none'}"
                    )


def check_binding_types() -> None:
    """Raises `GinConfigError` when a bound value does not match its parameter's annotation.

    Only plain annotations are checked (``int``, ``float``, ``bool``, ``str``, ``None`` and their unions);
    an ``int`` is a ``float`` but a ``bool`` is not an ``int``.
    """
    defined = macros()
    for (_, selector), params in _config().items():
        if selector == _MACRO:
            continue
        configurable = gin.config._REGISTRY.get_match(selector)  # noqa: SLF001
        if configurable is None:
            continue
        try:
            signature = inspect.signature(configurable.wrapped)
        except (TypeError, ValueError):
            continue
        for param, value in params.items():
            if param not in signature.parameters or _references(value, skip_macros=True):
                continue
            allowed = _allowed_types(signature.parameters[param].annotation)
            via = "".join(f" = %{ref.scopes[-1]}" for ref in _references(value) if _is_macro(ref))
            value = _resolve(value, defined)
            if allowed is None or value is gin.REQUIRED:
                continue
            ok = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
            if not ok:
                name = selector.rsplit(".", 1)[-1]
                expected = " or ".join(
                    sorted({t.__name__ if t is not type(None) else "None" for t in allowed})
                )
                raise GinConfigError(
                    f"{name}.{param}{via} = {value!r}: expected {expected}, got {type(value).__name__}"
                )


# ------------------------------------------------------------------------------------------ helpers
def _config() -> dict:
    return gin.config._CONFIG  # noqa: SLF001 (gin has no public iterator over its bindings)


def _first_line(error: BaseException) -> str:
    """gin's message without the location lines it appends (the caller names the file or binding)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _check_macro_binding(binding: str, bindings: Sequence[str], file_macros: set[str]) -> None:
    """A binding ``NAME=value`` must set a macro that a gin file defines (or that another binding uses)."""
    match = _MACRO_BINDING.match(binding)
    if match is None or binding.lstrip().startswith(("import ", "include ")):
        return
    name = match.group(1)
    used = {use for other in bindings for use in _MACRO_USE.findall(other)}
    if name in file_macros or name in used:
        return
    raise GinConfigError(
        f"bad gin binding {binding!r}: no gin file defines the macro {name} (a typo?); the macros these "
        f"files define: {', '.join(sorted(file_macros)) or 'none'}"
    )


def _is_macro(ref) -> bool:
    return ref.configurable.selector == _MACRO


def _references(value, skip_macros: bool = False) -> list:
    """The `gin.config.ConfigurableReference`\\ s inside ``value`` (nested lists, tuples and dicts), macro
    references left out when ``skip_macros``."""
    found = []
    if isinstance(value, gin.config.ConfigurableReference):
        if not (skip_macros and _is_macro(value)):
            found.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            found += _references(item, skip_macros)
    elif isinstance(value, dict):
        for item in value.values():
            found += _references(item, skip_macros)
    return found


def _resolve(value, defined: dict, depth: int = 0):
    """``value`` with macro references replaced by the macros' values (recursively)."""
    if depth > 50:
        raise GinConfigError("the gin macros refer to one another in a cycle")
    if isinstance(value, gin.config.ConfigurableReference):
        if _is_macro(value) and value.scopes[-1] in defined:
            return _resolve(defined[value.scopes[-1]], defined, depth + 1)
        return f"@{value.scoped_selector}{'()' if value.evaluate else ''}"
    if isinstance(value, list):
        return [_resolve(v, defined, depth) for v in value]
    if isinstance(value, tuple):
        return tuple(_resolve(v, defined, depth) for v in value)
    if isinstance(value, dict):
        return {k: _resolve(v, defined, depth) for k, v in value.items()}
    return value


def _allowed_types(annotation) -> tuple[type, ...] | None:
    """The types a plain annotation allows (``"int | None"`` → ``(int, NoneType)``); None when it is not
    plain (generics, classes, no annotation)."""
    if annotation is inspect.Parameter.empty:
        return None
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", None)
    if not isinstance(text, str):
        return None
    allowed: tuple[type, ...] = ()
    for part in text.split("|"):
        types = _SIMPLE_TYPES.get(part.strip())
        if types is None:
            return None
        allowed += types
    return allowed


class _DropGinSearchMisses(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Path not found")


@contextlib.contextmanager
def _quiet_gin_search() -> Iterator[None]:
    """Silences gin's "Path not found" log line for each include prefix it tries before the one that works."""
    drop = _DropGinSearchMisses()
    root = logging.getLogger()
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def set_threads(intra_op: int = 0, inter_op: int = 0) -> None:
    """Sets TensorFlow's CPU thread pools; 0 keeps TensorFlow's default (one thread per core).

    ``intra_op`` is the pool that one op, or one XLA program on the CPU, splits its work over. The small
    compiled programs of FQI (one gradient step ≈ 0.3 MFLOP) run faster with one thread than with several:
    handing tiny pieces of work between threads costs more than it saves (`launch/benchmark.py
    --cases=threads` measures it). Larger steps (car-on-hill ProFQI, ≈ 0.9 GFLOP) gain from all the cores,
    so the default stays. With one intra-op thread, cores are filled by running several
    processes (`launch/sweep.py --parallel`) or several seeds in one graph (``NUM_SEEDS``: their loops run
    side by side on the ``inter_op`` pool).

    Must be called before TensorFlow runs its first op.

    Raises:
      ValueError: a negative count.
      RuntimeError: TensorFlow has already started (the pools are fixed from then on).
    """
    import tensorflow as tf

    if intra_op < 0 or inter_op < 0:
        raise ValueError(f"thread counts must be >= 0 (0 = TensorFlow's default), got {intra_op}, {inter_op}")
    try:
        if intra_op:
            tf.config.threading.set_intra_op_parallelism_threads(intra_op)
        if inter_op:
            tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError as e:
        raise RuntimeError(
            f"cannot set TensorFlow's thread pools to intra_op={intra_op}, inter_op={inter_op}: TensorFlow "
            f"has already run an op; set them first thing in the process ({e})"
        ) from e
