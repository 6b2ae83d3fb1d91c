"""Reading a user's offline dataset into `Transitions`, with every check done before any training.

Two sources, named by one string (`read_source`):

* a path to an ``.npz`` file of five arrays, one row per transition (`NPZ_KEYS` lists the names each field
  may have: those `Transitions.save` writes, or the common ``observations`` / ``actions`` / ``rewards`` /
  ``next_observations`` / ``terminals``);
* ``"minari:<id or folder>"``: a Minari dataset (gymnasium's standard offline format, the optional ``minari``
  extra), by its id under ``MINARI_DATASETS_PATH`` (never downloaded) or by the path of its folder.

Each row is ``(s, a, r, s', done)``: ``s``, ``s'`` ``[N]`` integer states (a table) or ``[N, d]`` vectors;
``a`` ``[N]`` integer action indices 0..n−1 (a float column is accepted when every value is a whole number);
``r`` ``[N]``; ``done`` ``[N]`` in {0, 1} (1: terminal, no bootstrapping; a Minari episode's truncation is not
terminal). A file that breaks any of this raises `DatasetFileError`, one line naming the file and the field.
Minari is imported on first use.
"""

from __future__ import annotations

import dataclasses
import os
import zipfile
import zlib

import numpy as np

from pbo_tf.data.transitions import FIELDS, CorruptDatasetError, Transitions

#: The accepted ``.npz`` key names of each transition field (one of them per field).
NPZ_KEYS = {
    "state": ("state", "observations"),
    "action": ("action", "actions"),
    "reward": ("reward", "rewards"),
    "next_state": ("next_state", "next_observations"),
    "done": ("done", "terminals"),
}
#: The prefix of a source string that names a Minari dataset.
MINARI_PREFIX = "minari:"
MINARI_INSTALL = "pip install -e .[minari]"


class DatasetFileError(CorruptDatasetError):
    """A user's dataset cannot serve as an offline problem (the message names the file and the field)."""


@dataclasses.dataclass(frozen=True)
class SourceData:
    """What a source holds.

    Attributes:
      transitions: every transition of the source (canonical dtypes: int32 or float32 states).
      n_states: the number of discrete states its observation space declares (Minari), else None.
      n_actions: the number of actions its action space declares (Minari), else None.
      env_id: the gymnasium id of its environment spec (Minari), else None.
      max_episode_steps: that spec's episode cut, else None.
      keys: per field of `FIELDS`, the name it has in the source (for messages).
    """

    transitions: Transitions
    n_states: int | None = None
    n_actions: int | None = None
    env_id: str | None = None
    max_episode_steps: int | None = None
    keys: dict = dataclasses.field(default_factory=lambda: {field: field for field in FIELDS})


def read_source(source: str) -> SourceData:
    """The transitions of ``source``: an ``.npz`` path, or ``"minari:<id or folder>"``.

    Raises:
      DatasetFileError: the source is missing, unreadable or malformed (see the module docstring).
      pbo_tf.deps.MissingDependencyError: a Minari source without the ``minari`` package.
    """
    if not isinstance(source, str) or not source:
        raise DatasetFileError(f"the dataset must be an .npz path or '{MINARI_PREFIX}<id>', got {source!r}")
    if source.startswith(MINARI_PREFIX):
        return read_minari(source[len(MINARI_PREFIX) :])
    return read_npz(source)


def read_npz(path: str) -> SourceData:
    """The transitions of the ``.npz`` at ``path`` (keys: `NPZ_KEYS`), checked (`check_arrays`)."""
    if not os.path.isfile(path):
        raise DatasetFileError(f"dataset {path}: no such file")
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic[:4] != b"PK\x03\x04" and magic != b"\x93NUMPY":  # a zip archive (.npz), or one .npy array
        raise DatasetFileError(f"dataset {path}: not a readable .npz file (not a zip archive)")
    try:
        with np.load(path, allow_pickle=False) as data:
            if not hasattr(data, "files"):
                raise DatasetFileError(f"dataset {path}: a single .npy array, not an .npz of named arrays")
            arrays = {}
            for field, names in NPZ_KEYS.items():
                present = [n for n in names if n in data.files]
                if not present:
                    raise DatasetFileError(
                        f"dataset {path}: field {field!r} is missing (a key named one of {list(names)}; "
                        f"the file has {sorted(data.files)})"
                    )
                if len(present) > 1:
                    raise DatasetFileError(f"dataset {path}: field {field!r} is given twice, as {present}")
                arrays[field] = (present[0], data[present[0]])
    except DatasetFileError:
        raise
    except ValueError as e:
        if "pickle" in str(e):
            raise DatasetFileError(f"dataset {path}: holds Python objects (pickles), not arrays") from e
        raise DatasetFileError(f"dataset {path}: not a readable .npz file ({_first_line(e)})") from e
    except (OSError, KeyError, zipfile.BadZipFile, zlib.error, EOFError) as e:
        raise DatasetFileError(f"dataset {path}: not a readable .npz file ({_first_line(e)})") from e
    return SourceData(check_arrays(arrays, path), keys={field: key for field, (key, _) in arrays.items()})


def check_arrays(arrays: dict[str, tuple[str, np.ndarray]], where: str) -> Transitions:
    """Checks the five fields and builds `Transitions` from them.

    Args:
      arrays: per field of `FIELDS`, ``(the name it had in the source, its array)``.
      where: the source's name, for messages.

    Raises:
      DatasetFileError: a field is not numeric, is empty, has another number of rows than the states, has
        the wrong shape, holds NaN or Inf, or (actions) negative or non-integer values, or (done) values
        other than 0 and 1; the states and next states differ in shape.
    """
    out = {}
    for field in FIELDS:
        key, value = arrays[field]
        value = np.asarray(value)
        label = f"dataset {where}: field {key!r}"
        if value.dtype == bool:
            value = value.astype(np.int8)
        if not (np.issubdtype(value.dtype, np.integer) or np.issubdtype(value.dtype, np.floating)):
            raise DatasetFileError(f"{label} has dtype {value.dtype}, expected numbers")
        if value.ndim == 0:
            raise DatasetFileError(f"{label} is a scalar, expected one row per transition")
        if np.issubdtype(value.dtype, np.floating) and not np.all(np.isfinite(value)):
            row = int(np.argmin(np.isfinite(value).reshape(len(value), -1).all(axis=1)))
            raise DatasetFileError(f"{label} holds NaN or Inf (first at row {row})")
        out[field] = (key, value)
    state_key, state = out["state"]
    n = len(state)
    if n == 0:
        raise DatasetFileError(f"dataset {where}: field {state_key!r} is empty (no transitions)")
    for field in FIELDS[1:]:
        key, value = out[field]
        if len(value) != n:
            raise DatasetFileError(
                f"dataset {where}: field {key!r} has {len(value)} rows, {state_key!r} has {n}"
            )
    next_key, next_state = out["next_state"]
    if state.ndim > 2:
        raise DatasetFileError(
            f"dataset {where}: field {state_key!r} has shape {list(state.shape)}, expected [N] (integer "
            "states) or [N, d] (vectors)"
        )
    if next_state.shape != state.shape:
        raise DatasetFileError(
            f"dataset {where}: field {next_key!r} has shape {list(next_state.shape)}, {state_key!r} has "
            f"{list(state.shape)}: states of inconsistent shape"
        )
    if np.issubdtype(state.dtype, np.integer) != np.issubdtype(next_state.dtype, np.integer):
        raise DatasetFileError(
            f"dataset {where}: field {next_key!r} has dtype {next_state.dtype}, {state_key!r} has "
            f"{state.dtype}: one is integer states, the other not"
        )
    tabular = state.ndim == 1 and np.issubdtype(state.dtype, np.integer)
    if tabular:
        low = min(int(state.min()), int(next_state.min()))
        if low < 0:
            bad = state_key if int(state.min()) < 0 else next_key
            raise DatasetFileError(f"dataset {where}: field {bad!r} holds the negative state {low}")
    elif state.ndim == 1:  # a scalar real state: a vector of one
        state, next_state = state[:, None], next_state[:, None]
    columns = {}
    for field in ("action", "reward", "done"):
        key, value = out[field]
        if value.ndim == 2 and value.shape[1] == 1:
            value = value[:, 0]
        if value.ndim != 1:
            raise DatasetFileError(
                f"dataset {where}: field {key!r} has shape {list(value.shape)}, expected [{n}] (one value "
                "per transition)"
            )
        columns[field] = (key, value)
    action_key, action = columns["action"]
    if np.issubdtype(action.dtype, np.floating):
        if not np.all(action == np.round(action)):
            row = int(np.argmax(action != np.round(action)))
            raise DatasetFileError(
                f"dataset {where}: field {action_key!r} is a continuous action column (row {row} holds "
                f"{float(action[row]):g}); pbo_tf needs discrete actions, indices 0..n-1"
            )
        action = action.astype(np.int64)
    if int(action.min()) < 0:
        raise DatasetFileError(
            f"dataset {where}: field {action_key!r} holds the action {int(action.min())}, outside the action "
            "set (indices 0..n-1)"
        )
    done_key, done = columns["done"]
    if not np.all((done == 0) | (done == 1)):
        row = int(np.argmax((done != 0) & (done != 1)))
        raise DatasetFileError(
            f"dataset {where}: field {done_key!r} holds {float(done[row]):g} at row {row}, expected 0 or 1"
        )
    state_dtype = np.int32 if tabular else np.float32
    return Transitions.from_arrays(
        state=state.astype(state_dtype),
        action=action.astype(np.int32),
        reward=columns["reward"][1].astype(np.float32),
        next_state=next_state.astype(state_dtype),
        done=done.astype(np.float32),
    )


# ------------------------------------------------------------------------------------------------ Minari
def import_minari():
    """The ``minari`` module.

    Raises:
      pbo_tf.deps.MissingDependencyError: it is not installed (the message names the extra to install).
    """
    try:
        import minari
    except ImportError as e:
        from pbo_tf.deps import MissingDependencyError

        raise MissingDependencyError(
            f"minari is not installed: a Minari dataset needs the minari extra, `{MINARI_INSTALL}`",
            name="minari",
        ) from e
    return minari


def open_minari(name: str):
    """The `minari.MinariDataset` of ``name``: the path of a dataset folder (the one holding ``data/``, or
    ``data/`` itself), else a dataset id under Minari's local root (``MINARI_DATASETS_PATH``, default
    ``~/.minari/datasets``). Nothing is downloaded."""
    minari = import_minari()
    where = f"{MINARI_PREFIX}{name}"
    if os.path.isdir(name):
        data_path = os.path.join(name, "data") if os.path.isdir(os.path.join(name, "data")) else name
        try:
            return minari.MinariDataset(data_path)
        except Exception as e:  # Minari raises several kinds for a folder that is not a dataset
            raise DatasetFileError(f"dataset {where}: not a Minari dataset folder ({_first_line(e)})") from e
    from minari.storage import get_dataset_path

    if name not in minari.list_local_datasets():
        raise DatasetFileError(
            f"dataset {where}: no such local Minari dataset under {str(get_dataset_path())!r} (nothing is "
            "downloaded: `minari download` it first, or give its folder)"
        )
    try:
        return minari.load_dataset(name, download=False)
    except Exception as e:
        raise DatasetFileError(f"dataset {where}: unreadable Minari dataset ({_first_line(e)})") from e


def read_minari(name: str) -> SourceData:
    """Every transition of the Minari dataset ``name`` (see `open_minari`), episode after episode: within
    an episode of T steps, ``s = observations[:-1]``, ``s' = observations[1:]``, ``done = terminations``."""
    import gymnasium

    where = f"{MINARI_PREFIX}{name}"
    dataset = open_minari(name)
    obs_space, action_space = dataset.observation_space, dataset.action_space
    if not isinstance(action_space, gymnasium.spaces.Discrete):
        raise DatasetFileError(
            f"dataset {where}: field 'actions' is continuous ({action_space}); pbo_tf needs a Discrete "
            "action space"
        )
    if not isinstance(obs_space, (gymnasium.spaces.Box, gymnasium.spaces.Discrete)):
        raise DatasetFileError(
            f"dataset {where}: field 'observations' is a {type(obs_space).__name__} space; pbo_tf reads "
            "Box (vectors) and Discrete (integer states) observations"
        )
    parts = {field: [] for field in FIELDS}
    for episode in dataset.iterate_episodes():
        obs = np.asarray(episode.observations)
        parts["state"].append(obs[:-1])
        parts["next_state"].append(obs[1:])
        parts["action"].append(np.asarray(episode.actions))
        parts["reward"].append(np.asarray(episode.rewards))
        parts["done"].append(np.asarray(episode.terminations))
    if not parts["state"]:
        raise DatasetFileError(f"dataset {where}: field 'observations' is empty (no episodes)")
    names = {"state": "observations", "action": "actions", "reward": "rewards", "next_state": "observations"}
    names["done"] = "terminations"
    arrays = {field: (names[field], np.concatenate(parts[field])) for field in FIELDS}
    if isinstance(obs_space, gymnasium.spaces.Discrete):
        arrays["state"] = ("observations", arrays["state"][1] - int(obs_space.start))
        arrays["next_state"] = ("observations", arrays["next_state"][1] - int(obs_space.start))
    arrays["action"] = ("actions", arrays["action"][1] - int(action_space.start))  # indices 0..n-1
    transitions = check_arrays(arrays, where)
    spec = dataset.env_spec
    return SourceData(
        transitions,
        keys={field: key for field, (key, _) in arrays.items()},
        n_states=int(obs_space.n) if isinstance(obs_space, gymnasium.spaces.Discrete) else None,
        n_actions=int(action_space.n),
        env_id=None if spec is None else spec.id,
        max_episode_steps=None if spec is None else spec.max_episode_steps,
    )


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
