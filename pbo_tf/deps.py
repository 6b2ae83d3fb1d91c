"""TF-Agents 0.19.0 and gym 0.23.0: the dependencies pip cannot install together with pbo_tf.

Their package metadata pins versions that conflict with TensorFlow 2.21 and gymnasium 1.4 (gym <= 0.23,
older numpy and cloudpickle ranges), so pip's resolver refuses them as requirements of pbo_tf, although
their code runs on this stack. They are installed apart, with ``pip install --no-deps``
(`TF_AGENTS_INSTALL`; BUILD.md). The modules that need them (the agents, the TF-Agents environment
adapter, online experiments, ``pbo-play``) import them inside ``try`` and pass an `ImportError` to
`raise_missing_tf_agents`, so that a missing one is a one-line `MissingDependencyError` naming the command.
The rest of pbo_tf (offline experiments, plotting) does not need them.
"""

from __future__ import annotations

from typing import NoReturn

TF_AGENTS_INSTALL = "pip install --no-deps tf-agents==0.19.0 gym==0.23.0"
_MODULES = ("tf_agents", "gym")


class MissingDependencyError(ImportError):
    """TF-Agents or gym is not installed (the message names the install command)."""


def raise_missing_tf_agents(error: ImportError) -> NoReturn:
    """Raises `MissingDependencyError` when ``error`` (raised by importing TF-Agents) says that TF-Agents
    or gym is missing; any other import error is raised unchanged."""
    missing = (error.name or "").split(".")[0]
    if missing not in _MODULES:
        raise error
    raise MissingDependencyError(
        f"{missing} is not installed: pbo_tf's agents and online experiments need TF-Agents 0.19.0 and "
        f"gym 0.23.0, which pip cannot install as requirements of pbo_tf; install them with "
        f"`{TF_AGENTS_INSTALL}`",
        name=missing,
    ) from error
