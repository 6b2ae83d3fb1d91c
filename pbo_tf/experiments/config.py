"""Parsing gin files and bindings with errors that name the problem."""

from __future__ import annotations

import os
from collections.abc import Sequence

import gin

# Registers the configurables that gin files bind (Experiment, make_pbo, trainers, problems).
from pbo_tf.experiments import problems as _problems  # noqa: F401
from pbo_tf.experiments import runner as _runner  # noqa: F401

GIN_CONFIGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "gin_configs")


class GinConfigError(ValueError):
    """A gin file or binding could not be parsed or names something that does not exist."""


def parse_config(gin_files: Sequence[str], bindings: Sequence[str] = ()) -> None:
    """Clears gin and parses ``gin_files`` then ``bindings`` strictly (unknown names are errors).

    ``include`` lines are resolved against each file's folder, its parent, and the repository's
    ``gin_configs/`` folder, so ``include 'chain_walk/common.gin'`` works from anywhere.

    Raises:
      FileNotFoundError: a gin file does not exist.
      GinConfigError: a file or binding is malformed or binds an unknown configurable or parameter.
    """
    gin.clear_config()
    search = [GIN_CONFIGS_DIR]
    for path in gin_files:
        if not os.path.exists(path):
            raise FileNotFoundError(f"gin file {path!r} does not exist")
        folder = os.path.dirname(os.path.abspath(path))
        search += [folder, os.path.dirname(folder)]
    for folder in search:
        if folder not in gin.config._LOCATION_PREFIXES:  # noqa: SLF001 (gin has no public getter)
            gin.add_config_file_search_path(folder)
    for path in gin_files:
        try:
            gin.parse_config_file(path, skip_unknown=False)
        except Exception as e:  # gin raises ValueError, KeyError, SyntaxError, ... depending on the fault
            raise GinConfigError(f"cannot parse gin file {path!r}: {e}") from e
    for binding in bindings:
        try:
            gin.parse_config(binding, skip_unknown=False)
        except Exception as e:
            raise GinConfigError(f"bad gin binding {binding!r}: {e}") from e
