"""Loading one entry-point group once per process: the shared part of the registries' ``load_entry_points``
(`pbo_tf.envs.registry`, group ``pbo_tf.envs``; `pbo_tf.operators.registry`, group ``pbo_tf.operators``).

This module imports nothing but the standard library (no pbo_tf module, no gin, no TensorFlow), so either
registry may import it.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any


class EntryPointGroup:
    """The entry points of one group, loaded once: a module entry point is imported, a callable one
    (``"module:func"``) is also called; either registers what it declares with its registry.

    Attributes:
      group: the entry-point group (``pbo_tf.envs``).
      error: the exception class a failed entry point raises (the registry's ``EntryPointError``).
      state: None (not tried yet), ``"loading"``, ``"loaded"``, or the ``error`` of the entry point that
        failed (raised again by every later `load`).
    """

    def __init__(self, group: str, error: type[Exception]):
        self.group, self.error = group, error
        self.state: Any = None

    def load(self) -> None:
        """Loads every entry point of the group, the first time only; a call made while they load (a
        registering module may look names up) returns at once.

        Raises:
          error: an entry point failed to import, to run, or to register; the one-line message names its
            distribution, the entry point and the error. The entry points loaded before it stay
            registered, and every later call raises the same error.
        """
        if self.state in ("loading", "loaded"):
            return
        if isinstance(self.state, self.error):
            raise self.state
        self.state = "loading"
        try:
            for point in importlib.metadata.entry_points(group=self.group):
                try:
                    loaded = point.load()
                    if callable(loaded):
                        loaded()
                except Exception as e:
                    raise self.error(self._failure(point, e)) from e
        except self.error as e:
            self.state = e
            raise
        except BaseException:
            self.state = None
            raise
        self.state = "loaded"

    def _failure(self, point: importlib.metadata.EntryPoint, error: Exception) -> str:
        """The one-line message of ``point`` failing with ``error``."""
        dist = f"{point.dist.name} {point.dist.version}" if point.dist is not None else "unknown"
        message = " ".join(f"{type(error).__name__}: {error}".split())
        return (
            f"the {self.group} entry point '{point.name} = {point.value}' of the distribution {dist} "
            f"failed to load: {message}"
        )
