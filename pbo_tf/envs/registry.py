"""The one registry of environments: per name, its offline problem, its online spec and its gymnasium id.

The offline runner (`make_problem`, ``Experiment.problem = 'chain_walk'``), the online runner
(`make_online_env`, ``OnlineExperiment.env = 'lunar_lander'``) and the gymnasium registration
(`register_gymnasium`, called by ``import pbo_tf``) all read it. An entry names its classes as lazy
``"module:attr"`` strings, as gymnasium entry points do, so importing this module imports no environment
package and no TensorFlow; a class is imported when it is first asked for.

The built-in entries are at the bottom of this file, one `register` call per environment package
(`pbo_tf.envs.<env>`). A package outside pbo_tf makes the same call in a module of its own::

    # my_package/registration.py
    from pbo_tf.envs import registry

    registry.register(
        "my_env",
        problem="my_package.problem:MyEnvProblem",  # a pbo_tf.envs.base.Problem
        online="my_package.online:MyEnvOnline",  # a pbo_tf.envs.base.OnlineEnv
        gym_id="my_package/MyEnv-v0",
        entry_point="my_package.mdp:MyEnv",
        max_episode_steps=100,
    )

and names that module in the entry-point group `ENTRY_POINT_GROUP` (``pbo_tf.envs``) of its
``pyproject.toml``::

    [project.entry-points."pbo_tf.envs"]
    my_env = "my_package.registration"

An entry point names a module (importing it registers its environments) or a callable (``"module:func"``,
called with no arguments). The group is loaded once, on the first lookup (`names`, `entry`,
`make_problem`, `make_online_env`, `import_modules`, `load_entry_points`), so every program and every run's
``config.gin`` finds the package's environments without importing it; ``import pbo_tf`` itself loads no
entry point. A process can also import a registering module itself (the launchers' ``--import=module``).
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from typing import Any

import gymnasium

from pbo_tf.entry_points import EntryPointGroup

#: The gymnasium namespace of the built-in environments (``pbo_tf/ChainWalk-v0``, ...).
NAMESPACE = "pbo_tf"
#: The entry-point group in which packages outside pbo_tf declare their environments (`load_entry_points`).
ENTRY_POINT_GROUP = "pbo_tf.envs"


class EnvironmentImportError(ValueError):
    """A registered environment's problem or online module failed to import (`import_modules`)."""


class EntryPointError(ValueError):
    """An entry point of `ENTRY_POINT_GROUP` failed to load (its message names the distribution and the
    entry point)."""


@dataclasses.dataclass(frozen=True)
class EnvEntry:
    """One environment of the registry.

    Attributes:
      name: the name gin files give (``Experiment.problem``, ``OnlineExperiment.env``) and
        ``metrics.json["env"]`` records.
      problem: ``"module:Class"`` of its offline `pbo_tf.envs.base.Problem`, or None (no offline runs).
      online: ``"module:Class"`` of its `pbo_tf.envs.base.OnlineEnv`, or None (no online runs).
      gym_id: its gymnasium id, or None.
      entry_point: ``"module:Class"`` of the gymnasium environment registered under ``gym_id``; None when
        the id is registered by someone else (gymnasium's own ``LunarLander-v3``).
      max_episode_steps: the gymnasium registration's episode cut (None: none).
    """

    name: str
    problem: str | None = None
    online: str | None = None
    gym_id: str | None = None
    entry_point: str | None = None
    max_episode_steps: int | None = None


_ENTRIES: dict[str, EnvEntry] = {}
#: The entry points of `ENTRY_POINT_GROUP` that `load_entry_points` loads, with the state of that loading
#: (`pbo_tf.entry_points.EntryPointGroup.state`: the `EntryPointError` of an entry point that failed is
#: raised again on every later lookup); None until the first lookup, and a fresh start when set back to None.
_entry_points_state: EntryPointGroup | None = None
#: ``name -> gym_id`` of the entries this registry registers with gymnasium (kept up to date by `register`
#: and `unregister`; `pbo_tf.envs.ENV_IDS` is this dict).
ENV_IDS: dict[str, str] = {}

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: How an environment outside pbo_tf is found, appended to the unknown-name errors.
_HINT = (
    f" (another package's environments are found through its {ENTRY_POINT_GROUP!r} entry point, or with "
    "--import=<the module that registers them>)"
)
_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def register(
    name: str,
    *,
    problem: str | None = None,
    online: str | None = None,
    gym_id: str | None = None,
    entry_point: str | None = None,
    max_episode_steps: int | None = None,
) -> EnvEntry:
    """Adds the environment ``name`` (see `EnvEntry`); with an ``entry_point``, also registers ``gym_id``
    with gymnasium (an id gymnasium already has is left as it is).

    Returns:
      The new entry.

    Raises:
      ValueError: ``name`` is taken or not a lower-case identifier, a reference is not ``"module:attr"``,
        the entry names neither a problem, an online spec nor a gymnasium id, or an ``entry_point`` has
        no ``gym_id``.
    """
    if not _NAME.match(name):
        raise ValueError(f"environment name {name!r} must be a lower-case identifier, e.g. 'chain_walk'")
    if name in _ENTRIES:
        raise ValueError(f"environment {name!r} is already registered: {_ENTRIES[name]}")
    for key, value in dict(problem=problem, online=online, entry_point=entry_point).items():
        if value is not None and not _REFERENCE.match(value):
            raise ValueError(f"{key}={value!r} must be a lazy reference 'package.module:Name'")
    if problem is None and online is None and gym_id is None:
        raise ValueError(f"environment {name!r} names no problem, online spec or gymnasium id")
    if entry_point is not None and gym_id is None:
        raise ValueError(f"environment {name!r} has an entry_point but no gym_id to register it under")
    new = EnvEntry(name, problem, online, gym_id, entry_point, max_episode_steps)
    _ENTRIES[name] = new
    if entry_point is not None:
        ENV_IDS[name] = gym_id
        _register_gymnasium(new)
    return new


def unregister(name: str) -> None:
    """Removes the environment ``name`` and the gymnasium id it registered (for tests and notebooks).

    Raises:
      ValueError: no such environment.
    """
    removed = entry(name)
    del _ENTRIES[name]
    if removed.entry_point is not None:
        del ENV_IDS[name]
        gymnasium.registry.pop(removed.gym_id, None)


def entry(name: str) -> EnvEntry:
    """The entry of ``name``.

    Raises:
      ValueError: unknown name, listing the known ones.
    """
    load_entry_points()
    if name not in _ENTRIES:
        raise ValueError(f"unknown environment {name!r}; known environments: {names()}{_HINT}")
    return _ENTRIES[name]


def names(kind: str | None = None) -> list[str]:
    """The sorted names of every environment, or of those with a ``kind`` (``"problem"``, ``"online"``)."""
    if kind not in (None, "problem", "online"):
        raise ValueError(f"kind must be None, 'problem' or 'online', got {kind!r}")
    load_entry_points()
    return sorted(n for n, e in _ENTRIES.items() if kind is None or getattr(e, kind) is not None)


def load(reference: str) -> Any:
    """The object a lazy ``"module:attr"`` reference names (its module imported on first use)."""
    module, _, attr = reference.partition(":")
    return getattr(importlib.import_module(module), attr)


def make_problem(name: str):
    """The offline `pbo_tf.envs.base.Problem` called ``name`` (its gin bindings applied).

    Raises:
      ValueError: no environment of that name has an offline problem; the message lists those that do.
    """
    if name not in names("problem"):
        raise ValueError(f"unknown environment {name!r}; known environments: {names('problem')}{_HINT}")
    return load(_ENTRIES[name].problem)()


def make_online_env(name: str):
    """The `pbo_tf.envs.base.OnlineEnv` called ``name`` (its gin bindings applied).

    Raises:
      ValueError: no environment of that name has an online spec; the message lists those that do.
    """
    if name not in names("online"):
        raise ValueError(f"unknown online environment {name!r}; known: {names('online')}{_HINT}")
    return load(_ENTRIES[name].online)()


def import_modules(kind: str) -> None:
    """Imports the module of every entry's ``kind`` (``"problem"`` or ``"online"``), so that gin knows
    their configurables (``ChainWalkProblem.n_states``, ``LunarLanderEnv.hidden``) before it parses a
    config; the runners call it when they are imported.

    Raises:
      EnvironmentImportError: a module failed to import (the message names the environment and module).
      EntryPointError: an entry point failed to load (`load_entry_points`).
    """
    for name in names(kind):
        module = getattr(_ENTRIES[name], kind).partition(":")[0]
        try:
            importlib.import_module(module)
        except Exception as e:
            message = " ".join(f"{type(e).__name__}: {e}".split())
            raise EnvironmentImportError(
                f"the {kind} module {module!r} of the environment {name!r} failed to import: {message}"
            ) from e


def load_entry_points() -> None:
    """Loads every entry point of the group `ENTRY_POINT_GROUP` (``pbo_tf.envs``), once per process: a
    module entry point is imported, a callable one (``"module:func"``) is also called; either registers
    its environments with `register`. Every lookup of this module calls it first.

    Raises:
      EntryPointError: an entry point failed to import, to run, or to register (e.g. a name already
        taken); the one-line message names its distribution, the entry point and the error. The entry
        points loaded before it stay registered, and every later call raises the same error.
    """
    global _entry_points_state
    if _entry_points_state is None:
        _entry_points_state = EntryPointGroup(ENTRY_POINT_GROUP, EntryPointError)
    _entry_points_state.load()


def register_gymnasium() -> None:
    """Registers the gymnasium id of every entry registered so far with an ``entry_point`` (it loads no
    entry point: `pbo_tf.envs.make` does); ids already registered are skipped."""
    for registered in _ENTRIES.values():
        if registered.entry_point is not None:
            _register_gymnasium(registered)


def _register_gymnasium(registered: EnvEntry) -> None:
    if registered.gym_id not in gymnasium.registry:
        gymnasium.register(
            id=registered.gym_id,
            entry_point=registered.entry_point,
            max_episode_steps=registered.max_episode_steps,
        )


# The built-in environments, one package each (pbo_tf/envs/<name>/) and one gin folder each
# (gin_configs/<name>/, bicycle: bicycle_offline/ and bicycle_online/).
register(
    "chain_walk",
    problem="pbo_tf.envs.chain_walk.problem:ChainWalkProblem",
    gym_id=f"{NAMESPACE}/ChainWalk-v0",
    entry_point="pbo_tf.envs.chain_walk:ChainWalkEnv",
    max_episode_steps=100,  # chain-walk never terminates by itself
)
register(
    "lqr",
    problem="pbo_tf.envs.lqr.problem:LQRProblem",
    gym_id=f"{NAMESPACE}/LQR-v0",
    entry_point="pbo_tf.envs.lqr:LQREnv",
    max_episode_steps=100,  # LQR never terminates by itself
)
register(
    "car_on_hill",
    problem="pbo_tf.envs.car_on_hill.problem:CarOnHillProblem",
    gym_id=f"{NAMESPACE}/CarOnHill-v0",
    entry_point="pbo_tf.envs.car_on_hill:CarOnHillEnv",
    max_episode_steps=100,  # the paper's horizon
)
register(
    "bicycle",
    problem="pbo_tf.envs.bicycle.problem:BicycleProblem",
    online="pbo_tf.envs.bicycle.online:BicycleOnlineEnv",
    gym_id=f"{NAMESPACE}/Bicycle-v0",
    entry_point="pbo_tf.envs.bicycle:BicycleEnv",
    max_episode_steps=50_000,  # 500 s, the evaluation horizon
)
register("lunar_lander", online="pbo_tf.envs.lunar_lander.online:LunarLanderEnv", gym_id="LunarLander-v3")
register("dataset", problem="pbo_tf.envs.dataset.problem:DatasetProblem")
register("gym", online="pbo_tf.envs.gym.online:GymOnlineEnv")  # any gymnasium id: GymOnlineEnv.gym_id
