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


def set_threads(intra_op: int = 0, inter_op: int = 0) -> None:
    """Sets TensorFlow's CPU thread pools; 0 keeps TensorFlow's default (one thread per core).

    ``intra_op`` is the pool that one op, or one XLA program on the CPU, splits its work over. The small
    compiled programs of FQI (one gradient step ≈ 0.3 MFLOP) ran 1.4–2.2× faster per step with one thread
    than with two on the 2-core machine: handing tiny pieces of work between threads costs more than it
    saves (`launch/benchmark.py --cases=threads`). Larger steps (car-on-hill ProFQI, ≈ 0.9 GFLOP) gain from
    all the cores, so the default stays. With one intra-op thread, cores are filled by running several
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
