"""Parsing gin files and bindings with errors that name the problem.

`parse_config` parses strictly and then checks what gin itself lets through: a binding that sets a macro no
gin file defines (a typo such as ``EPOCH=3``), a reference to a macro nothing defines (``%EPOCHS``), and a
value whose type does not match its parameter's annotation (``K='abc'``, ``ProFQIConfig.refreshes=2.5``).
`resolved_bindings` lists every binding with its macros substituted, the operative config that
`pbo_tf.experiments.run_folder` fingerprints. This module registers no configurable: each gin family's
``common.gin`` imports the modules whose names it binds (``import pbo_tf.experiments.runner``).
"""

from __future__ import annotations

import contextlib
import importlib.resources
import inspect
import logging
import os
import re
from collections.abc import Sequence
from typing import Any

import gin
from gin import config_parser

from pbo_tf.compat import gin_names as migration

_log = logging.getLogger(__name__)


def _gin_configs_dir() -> str:
    """The gin configs shipped with pbo_tf: the ``gin_configs/`` folder of the checkout this package was
    imported from (a source tree on ``sys.path``, an editable install, a git worktree of either), else the
    package data ``pbo_tf.gin_configs`` of an installed wheel."""
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.isfile(os.path.join(checkout, "setup.py")) and os.path.isdir(
        os.path.join(checkout, "gin_configs")
    ):
        return os.path.join(checkout, "gin_configs")
    return str(importlib.resources.files("pbo_tf.gin_configs"))


#: The folder of the shipped gin configs, ``<env>/<algorithm>.gin``.
GIN_CONFIGS_DIR = _gin_configs_dir()

_MACRO = "gin.macro"
#: A binding that sets a macro: a bare name (no configurable, no scope) followed by ``=``.
_MACRO_BINDING = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=")
_MACRO_USE = re.compile(r"%([A-Za-z_][A-Za-z0-9_./]*)")
#: Annotations `check_binding_types` understands (anything else is not checked).
_SIMPLE_TYPES = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,), "None": (type(None),)}


class GinConfigError(ValueError):
    """A gin file or binding could not be parsed or names something that does not exist."""


def parse_config(gin_files: Sequence[str], bindings: Sequence[str] = (), log=None) -> None:
    """Clears gin and parses ``gin_files`` then ``bindings`` strictly (unknown names are errors).

    A gin file is a path or a name under the shipped configs (`resolve_gin_file`; ``log``, when given,
    receives one line naming the shipped file a name was resolved to). ``include`` lines are
    resolved here, not by gin (`find_include`): against the including file's folder, its parent, the
    current folder and the shipped configs, so ``include 'chain_walk/common.gin'`` works from anywhere.

    Raises:
      FileNotFoundError: a gin file does not exist.
      GinConfigError: two files bind different algorithms, a file or binding is malformed, includes a
        file that cannot be found, binds an unknown configurable or parameter, sets a macro that no gin
        file defines, uses an undefined macro or binds a value of the wrong type.
    """
    gin.clear_config()
    paths = [resolve_gin_file(path, log) for path in gin_files]
    algorithm = None  # the algorithm's builder, which some old names depend on (`migration`)
    bound = {}  # file -> the algorithm it binds
    for path in paths:
        own = migration.algorithm_of(_expanded_text(path))
        if own is not None:
            bound[path] = own
        algorithm = own or algorithm
    if len(set(bound.values())) > 1:
        listed = ", ".join(f"{os.path.basename(p)} @{a}" for p, a in bound.items())
        raise GinConfigError(
            f"the gin files bind different algorithms ({listed}): a run trains one; pbo-sweep takes several "
            "--gin_file and runs each"
        )
    for binding in bindings:
        algorithm = migration.algorithm_of(binding, algorithm)
    for path in paths:
        _parse_gin_file(path, algorithm=algorithm)
    file_macros = set(macros())
    for binding in bindings:
        _check_macro_binding(binding, bindings, file_macros)
        try:
            text = _migrate(binding, algorithm, f"gin binding {binding!r}")
            gin.parse_config(text, skip_unknown=False)
        except GinConfigError:
            raise
        except Exception as e:
            raise GinConfigError(f"bad gin binding {binding!r}: {_first_line(e)}") from e
    check_macro_uses()
    check_binding_types()


def resolve_gin_file(path: str, log=None) -> str:
    """The gin file ``path`` names: ``path`` itself when it is a file, else the shipped config of that
    name, relative to `GIN_CONFIGS_DIR` (``chain_walk/profqi.gin``, or ``gin_configs/chain_walk/profqi.gin``
    as the documentation writes it from the repository root), so an installed pbo_tf runs its configs
    from any folder. ``log`` (a callable taking a line), when given, is told which shipped file a name
    that is not a file as given was resolved to.

    Raises:
      FileNotFoundError: neither exists.
      GinConfigError: ``path`` is a folder.
    """
    if os.path.isdir(path):
        raise GinConfigError(f"gin file {path!r} is a folder, expected a .gin file")
    if os.path.isfile(path) or os.path.isabs(path):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"gin file {path!r} does not exist")
        return path
    name = os.path.normpath(path)
    head, _, rest = name.partition(os.sep)
    for candidate in (name, rest if head == "gin_configs" else ""):
        shipped = os.path.join(GIN_CONFIGS_DIR, candidate)
        if candidate and os.path.isfile(shipped):
            if log is not None:
                log(f"gin file {path!r} is not a file here: using the shipped config {shipped}")
            return shipped
    raise FileNotFoundError(
        f"gin file {path!r} does not exist, neither as a path nor under the shipped configs {GIN_CONFIGS_DIR}"
    )


def find_include(name: str, including: str) -> str:
    """The file that ``include '<name>'`` in the gin file ``including`` reads: ``name`` itself when it is
    absolute, else the first of the including file's folder, its parent, the current folder and
    `GIN_CONFIGS_DIR` that holds it.

    gin's own search would try its prefixes one after the other and log an ERROR "Path not found" for each
    that does not hold the file, so `parse_config` resolves includes here and gin never searches.

    Raises:
      GinConfigError: no such file.
    """
    if os.path.isabs(name):
        folders = [""]
    else:
        folder = os.path.dirname(os.path.abspath(including))
        folders = list(dict.fromkeys([folder, os.path.dirname(folder), os.getcwd(), GIN_CONFIGS_DIR]))
    for folder in folders:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise GinConfigError(
        f"gin file {including!r} includes {name!r}, which is in none of: {', '.join(folders)}"
    )


def macros() -> dict[str, Any]:
    """The macros the parsed config defines, ``{name: value}`` (values as bound, not resolved)."""
    return {
        scope: params.get("value") for (scope, selector), params in _config().items() if selector == _MACRO
    }


def resolved_bindings() -> dict[str, Any]:
    """Every binding of the parsed config as ``{"[scope/]Configurable.param": value}``, macros substituted
    (``FQIConfig.K = %K`` with ``K = 5`` gives ``FQIConfig.K: 5``); references to other configurables are
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
    """gin's message without the location lines it appends (the caller names the file or binding); an
    unknown configurable's message says how one of another package's environment is found."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    first = lines[0] if lines else type(error).__name__
    if first.startswith("No configurable matching '"):
        first += (
            " (the configurables of another package's environment exist once its module is imported: by the "
            "gin file, by pbo_tf's registry through the package's 'pbo_tf.envs' entry point, or with "
            "--import=<module>)"
        )
    return first


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


class _StatementsOnly(config_parser.ParserDelegate):
    """Reads references and macros as None: `_parse_gin_file` scans a file only for its includes."""

    def configurable_reference(self, scoped_configurable_name, evaluate):
        return None

    def macro(self, macro_name):
        return None


def _migrate(text: str, algorithm: str | None, where: str) -> str:
    """``text`` with the old names of earlier run folders read as today's (`migration.migrate_text`)."""
    try:
        text, notes = migration.migrate_text(text, algorithm, where)
    except migration.MigrationError as e:
        raise GinConfigError(str(e)) from e
    for note in notes:
        _log.info("%s: %s", where, note)
    return text


def _expanded_text(path: str, depth: int = 0) -> str:
    """The gin file's text with its includes expanded in place (for `migration.algorithm_of`; an include
    that cannot be found or read is left to `_parse_gin_file` to report)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    out = []
    for line in lines:
        match = re.match(r"^\s*include\s+['\"]([^'\"]+)['\"]", line)
        if match and depth < 20:
            with contextlib.suppress(GinConfigError):
                out.append(_expanded_text(find_include(match.group(1), path), depth + 1))
        else:
            out.append(line)
    return "\n".join(out)


def _parse_gin_file(path: str, included_by: tuple[str, ...] = (), algorithm: str | None = None) -> None:
    """Parses the gin file ``path`` into gin's config, its ``include`` statements in their place: the text
    between includes goes to `gin.parse_config`, each included file (`find_include`) to this function."""
    where = f"gin file {path!r}" + (f" (included by {included_by[-1]!r})" if included_by else "")
    if os.path.realpath(path) in map(os.path.realpath, included_by):
        raise GinConfigError(f"{where} includes itself: {' -> '.join([*included_by, path])}")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        includes = [
            (statement.location.line_num, statement.filename)
            for statement in config_parser.ConfigParser(text, _StatementsOnly())
            if isinstance(statement, config_parser.IncludeStatement)
        ]
    except OSError as e:
        raise GinConfigError(f"cannot read {where}: {e.strerror or e}") from e
    except Exception as e:  # gin's SyntaxError, ... (the file is named here)
        raise GinConfigError(f"cannot parse {where}: {_first_line(e)}") from e
    lines = text.splitlines(keepends=True)
    start = 0
    for line_num, name in includes:  # an include is one line; line_num counts from 1
        _parse_gin_lines(lines, start, line_num - 1, where, algorithm)
        _parse_gin_file(find_include(name, path), (*included_by, path), algorithm)
        start = line_num
    _parse_gin_lines(lines, start, len(lines), where, algorithm)


def _parse_gin_lines(lines: list[str], start: int, stop: int, where: str, algorithm: str | None) -> None:
    # Blank lines in front keep gin's line numbers (in --verbose tracebacks) those of the file.
    text = _migrate("".join(lines[start:stop]), algorithm, where)
    try:
        gin.parse_config("\n" * start + text, skip_unknown=False)
    except Exception as e:  # gin raises ValueError, KeyError, SyntaxError, ... depending on the fault
        raise GinConfigError(f"cannot parse {where}: {_first_line(e)}") from e


def set_determinism() -> None:
    """Makes TensorFlow's ops deterministic (`tf.config.experimental.enable_op_determinism`): the same run
    twice on the same machine and software gives the same numbers, at some cost in speed (ops such as
    scatter-adds and, on a GPU, some reductions and cuDNN kernels run their deterministic variants; an op
    without one raises an error naming it). Every random op pbo_tf runs is seeded from the run's seed.
    ``pbo-train --deterministic`` calls it; it is not part of a run's config or fingerprint (it changes how
    the ops run, not the experiment), so a run folder resumes with or without it."""
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()


def set_threads(intra_op: int = 0, inter_op: int = 0) -> None:
    """Sets TensorFlow's CPU thread pools; 0 keeps TensorFlow's default (one thread per core).

    ``intra_op`` is the pool that one op, or one XLA program on the CPU, splits its work over. The small
    compiled programs of FQI (one gradient step ≈ 0.3 MFLOP) run faster with one thread than with several:
    handing tiny pieces of work between threads costs more than it saves (`benchmarks/benchmark.py
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
