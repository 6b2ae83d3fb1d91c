"""A run folder belongs to one experiment: the fingerprint of its config, the check on every (re)launch,
moving a folder aside, and the record of a failed run.

The fingerprint (``D/fingerprint.json``) is the SHA-256 of the operative bindings
(`pbo_tf.experiments.config.resolved_bindings`: every ``Configurable.param`` bound by the gin files and
bindings, macros substituted) less the cosmetic ones (`COSMETIC_PARAMETERS`: how often to checkpoint, log,
summarise or evaluate, how many evaluation environments run together, how much of the run one call trains,
which metric the progress lines and reports show), which change nothing in the results. The file keeps
the bindings it was made from, so a refusal can name the bindings that differ.

`RunFolder` is the run folder as the experiments use it (the offline
`pbo_tf.experiments.runner.Experiment` and the online `pbo_tf.experiments.online.OnlineExperiment`): its
paths, the finished check, the claim, the gin config files, ``metrics.json`` and the failure record.

`claim` is called by `RunFolder.claim` before anything is written, and by the sweep launcher for each of
its folders:

* a missing or empty folder (nothing but a sweep's ``log.txt``) is new: the fingerprint is written;
* a folder with the same fingerprint is resumed, or skipped when complete (``metrics.json``);
* a folder with another fingerprint is refused (`RunFolderConflict`, naming the differing bindings), and so
  is any other non-empty folder without a fingerprint, unless ``overwrite``: then it is moved aside to
  ``D.old-<time>`` (never deleted) and the run starts afresh.

A run that diverged writes ``D/failure.json`` (`write_failure`) instead of ``metrics.json``; a later
successful run removes it (`clear_failure`). `latest_checkpoints` and `resume_text` say which checkpoints a
rerun of an interrupted run resumes from.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from typing import Any

from pbo_tf.analysis.results import CONFIG_FILENAME, METRICS_FILENAME, seed_folder_name
from pbo_tf.compat.gin_names import MigrationError, migrate_bindings
from pbo_tf.io import write_json_atomic, write_text_atomic
from pbo_tf.progress_log import PROGRESS_FILE

FINGERPRINT_FILE = "fingerprint.json"
FAILURE_FILE = "failure.json"
METRICS_FILE = METRICS_FILENAME
ITERATES_FILE = "iterates.npz"
DATASET_FILE = "dataset.npz"
#: What a run writes in its folder (or a seed's) and the readers take for the run's own.
RUN_FILES = (
    METRICS_FILE, CONFIG_FILENAME, FINGERPRINT_FILE, FAILURE_FILE, PROGRESS_FILE, ITERATES_FILE,
    DATASET_FILE, "policy_maps.npz", "checkpoints",
)  # fmt: skip
#: Files that a folder may hold and still count as empty (`launch/sweep.py` opens the log before the run).
IGNORED_FILES = frozenset({"log.txt"})
#: Parameters (of any configurable) that do not change a run's results.
COSMETIC_PARAMETERS = frozenset(
    {
        "checkpoint_every_s",
        "progress_every_s",
        "checkpoint_interval",
        "checkpoint_interval_s",
        "log_interval",
        "log_interval_s",
        "summary_interval",
        "max_train_steps_this_call",
        "eval_max_envs",
        "eval_every",
        "eval_interval",
        "eval_episodes",
        "main_metric",  # every metric is in the curve whichever one the lines and reports show
    }
)


class RunFolderError(ValueError):
    """The run folder cannot be used (it cannot be created or written)."""


class RunFolderConflict(RunFolderError):
    """The run folder holds another experiment (another fingerprint)."""


def is_cosmetic(key: str) -> bool:
    """Whether the binding ``[scope/]Configurable.param`` is cosmetic (see `COSMETIC_PARAMETERS`)."""
    return key.rsplit(".", 1)[-1] in COSMETIC_PARAMETERS


def run_files_in(folder: str) -> list[str]:
    """The run files (`RUN_FILES`, and a trained operator's checkpoint ``operator/pbo.index``) that
    ``folder`` holds: a run folder or a seed's, which a tool must not write its own outputs over."""
    found = [name for name in RUN_FILES if os.path.exists(os.path.join(folder, name))]
    if os.path.exists(os.path.join(folder, "operator", "pbo.index")):
        found.append(os.path.join("operator", "pbo.index"))
    return found


def fingerprint(bindings: dict[str, Any] | None = None) -> dict:
    """``{"hash", "bindings", "cosmetic"}`` of ``bindings`` (default: the parsed gin config's resolved
    bindings); ``hash`` covers the operative (non-cosmetic) bindings only."""
    if bindings is None:
        from pbo_tf.experiments.config import resolved_bindings

        bindings = resolved_bindings()
    bindings = {key: _jsonable(value) for key, value in sorted(bindings.items())}
    operative = {key: value for key, value in bindings.items() if not is_cosmetic(key)}
    text = json.dumps(operative, sort_keys=True, separators=(",", ":"))
    return {
        "hash": hashlib.sha256(text.encode()).hexdigest(),
        "bindings": operative,
        "cosmetic": {key: value for key, value in bindings.items() if is_cosmetic(key)},
    }


def read_fingerprint(root: str) -> dict | None:
    """The folder's recorded fingerprint, or None when it has none.

    Raises:
      RunFolderError: ``fingerprint.json`` is unreadable or malformed.
    """
    path = os.path.join(root, FINGERPRINT_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            recorded = json.load(f)
        if not isinstance(recorded.get("hash"), str) or not isinstance(recorded.get("bindings"), dict):
            raise ValueError("no 'hash' or 'bindings'")
    except (OSError, ValueError, AttributeError) as e:
        raise RunFolderError(
            f"{path} is corrupt ({e}); pass --overwrite to move the folder aside and start afresh"
        ) from e
    return recorded


def folder_state(root: str) -> str:
    """``"new"`` (missing or empty), ``"complete"`` (``metrics.json``) or ``"started"``."""
    if not os.path.isdir(root):
        if os.path.exists(root):
            raise RunFolderError(f"run folder {root!r} is a file, not a folder")
        return "new"
    entries = set(os.listdir(root)) - IGNORED_FILES
    if not entries:
        return "new"
    return "complete" if METRICS_FILE in entries else "started"


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``"key: <value in the folder> in the folder, <value> now"`` for every operative binding that differs
    (a binding absent on one side is ``unset``)."""
    out = []
    for key in sorted(set(recorded) | set(current)):
        if is_cosmetic(key):
            continue
        old, new = recorded.get(key, _UNSET), current.get(key, _UNSET)
        if _jsonable(old) != _jsonable(new):
            out.append(f"{key}: {_show(old)} in the folder, {_show(new)} now")
    return out


def check(root: str, current: dict | None = None, overwrite: bool = False, log=None) -> str:
    """Whether ``root`` can take the experiment of fingerprint ``current`` (default: the parsed config's).

    Returns:
      ``"new"``, ``"resume"`` or ``"complete"``. With ``overwrite``, a folder of another experiment is moved
      aside first (and the result is ``"new"``).

    Raises:
      RunFolderConflict: the folder holds another experiment (and not ``overwrite``).
      RunFolderError: the folder is a file or its fingerprint is unreadable.
    """
    current = fingerprint() if current is None else current
    state = folder_state(root)
    if state == "new":
        return "new"
    problem = _conflict(root, current)
    if problem is None:
        return "complete" if state == "complete" else "resume"
    if not overwrite:
        raise RunFolderConflict(f"{problem}; pass --overwrite to move it aside and start afresh")
    moved = move_aside(root)
    if log is not None:
        log(f"{root} held another experiment ({problem.split(': ', 1)[-1]}): moved it to {moved}")
    return "new"


def claim(root: str, current: dict | None = None, overwrite: bool = False, log=None) -> str:
    """`check`, then creates the folder and records the fingerprint (when the folder is new).

    Raises:
      RunFolderConflict, RunFolderError: as `check`, or the folder cannot be created or written.
    """
    current = fingerprint() if current is None else current
    status = check(root, current, overwrite, log)
    try:
        os.makedirs(root, exist_ok=True)
        if read_fingerprint(root) is None:
            write_text_atomic(os.path.join(root, FINGERPRINT_FILE), json.dumps(current, indent=1) + "\n")
    except OSError as e:
        raise RunFolderError(f"cannot write the run folder {root!r}: {e.strerror or e}") from e
    if status != "complete" and not os.access(root, os.W_OK):
        raise RunFolderError(f"cannot write the run folder {root!r}: permission denied")
    return status


def move_aside(root: str) -> str:
    """Renames ``root`` to ``root.old-<YYYYmmdd-HHMMSS>`` (with a counter if taken); returns the new path."""
    base = f"{os.path.normpath(root)}.old-{time.strftime('%Y%m%d-%H%M%S')}"
    target, n = base, 1
    while os.path.exists(target):
        target, n = f"{base}-{n}", n + 1
    try:
        os.rename(root, target)
    except OSError as e:
        raise RunFolderError(
            f"cannot move the run folder {root!r} aside to {target!r}: {e.strerror or e}"
        ) from e
    return target


def write_failure(root: str, error: BaseException, **details) -> str:
    """Records a failed run in ``root/failure.json`` (``status``, ``message``, ``time`` and ``details``,
    e.g. ``where`` and ``train_step``); returns its path."""
    path = os.path.join(root, FAILURE_FILE)
    record = {
        "status": "diverged" if isinstance(error, FloatingPointError) else "failed",
        "error": type(error).__name__,
        "message": str(error),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **{key: _jsonable(value) for key, value in details.items()},
    }
    write_text_atomic(path, json.dumps(record, indent=1) + "\n")
    return path


def clear_failure(root: str) -> None:
    """Removes ``root/failure.json`` (a run that finished after an earlier failure)."""
    path = os.path.join(root, FAILURE_FILE)
    if os.path.exists(path):
        os.remove(path)


#: What `claim` and the run's build write before it trains (the dataset is drawn again from the seed): all
#: that a claim that never trained leaves.
CLAIM_FILES = (FINGERPRINT_FILE, CONFIG_FILENAME, DATASET_FILE)


def release_claim(root: str) -> bool:
    """Removes a claim that never trained: `CLAIM_FILES` (``fingerprint.json``, ``config.gin``, the drawn
    ``dataset.npz``) when, with empty folders and `IGNORED_FILES`, they are all that ``root`` holds (a run
    refused by a check made after its claim, such as a batch larger than its dataset), and the empty folders,
    so that the corrected run starts afresh instead of being refused as another experiment. Anything else in
    the folder keeps it whole. Returns whether it removed the claim."""
    if not os.path.isdir(root):
        return False
    for dirpath, _, files in os.walk(root):  # (its first entry is ``root`` itself, as given)
        if any(not (dirpath == root and name in (*CLAIM_FILES, *IGNORED_FILES)) for name in files):
            return False
    for name in CLAIM_FILES:
        path = os.path.join(root, name)
        if os.path.exists(path):
            os.remove(path)
    for dirpath, _, _ in sorted(os.walk(root), key=lambda entry: -len(entry[0])):  # the deepest first
        if dirpath != root:
            os.rmdir(dirpath)  # (every one is empty by now)
    return True


CHECKPOINT_INDEX = "checkpoint"
_INDEX_LATEST = re.compile(r'^model_checkpoint_path:\s*"([^"]+)"', re.MULTILINE)


def latest_checkpoints(root: str) -> list[str]:
    """The checkpoint each ``checkpoints/`` folder under ``root`` restores on a rerun (what its
    ``checkpoint`` index names: TensorFlow writes the index last, so it names a complete checkpoint), in
    path order; a batched run has one per seed (``seed_<s>/checkpoints``). Unreadable indices are left out."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        if os.path.basename(folder) != "checkpoints" or CHECKPOINT_INDEX not in files:
            continue
        try:
            with open(os.path.join(folder, CHECKPOINT_INDEX), encoding="utf-8") as f:
                match = _INDEX_LATEST.search(f.read())
        except (OSError, UnicodeDecodeError):
            continue
        if match:
            out.append(os.path.join(folder, match.group(1)))
    return out


def resume_text(root: str) -> str:
    """What a rerun into ``root`` resumes from, in words: ``"a rerun resumes from <checkpoint>"`` (one
    checkpoint), ``"... from ckpt-N of each of the 5 seeds (<root>/seed_*/checkpoints)"``, the list when
    the seeds differ, or that no checkpoint was written yet."""
    found = latest_checkpoints(root)
    if not found:
        return f"no checkpoint was written yet in {root}: a rerun starts afresh"
    if len(found) == 1:
        return f"a rerun resumes from {found[0]}"
    names = {os.path.basename(p) for p in found}
    if len(names) == 1:
        where = os.path.join(root, seed_folder_name("*"), "checkpoints")
        return f"a rerun resumes from {names.pop()} of each of the {len(found)} seeds ({where})"
    return "a rerun resumes from " + ", ".join(found)


class RunFolder:
    """The run folder ``root`` of one experiment (see the module docstring).

    Args:
      root: the folder.
      overwrite: `claim` moves a folder of another experiment aside instead of refusing it.
      log: progress printer (None silences).
    """

    def __init__(self, root: str, overwrite: bool = False, log=None):
        self.root = root
        self.overwrite = bool(overwrite)
        self.log = log
        self._status = None

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def complete(self) -> bool:
        """Whether the run finished (``metrics.json`` exists)."""
        return os.path.exists(self.path(METRICS_FILE))

    def claim(self) -> str:
        """`claim` of the folder for the parsed gin config, once per object, before anything is written into
        it; returns ``"new"``, ``"resume"`` or ``"complete"``."""
        if self._status is None:
            self._status = claim(self.root, overwrite=self.overwrite, log=self.log)
        return self._status

    def write_config(self, operative: bool = False) -> None:
        """Writes ``config.gin``: the parsed gin config (at the start), or gin's operative config (at the
        end, every parameter the run used)."""
        import gin

        text = gin.operative_config_str() if operative else gin.config_str()
        write_text_atomic(self.path("config.gin"), text)

    def load_metrics(self) -> dict:
        """The finished run's ``metrics.json`` (`pbo_tf.analysis.results.load_metrics`)."""
        from pbo_tf.analysis import results

        return results.load_metrics(self.root)

    def finish(self, metrics: dict) -> None:
        """Writes the operative ``config.gin``, then ``metrics.json`` (last and atomically: the folder is
        complete from then on), and removes an earlier run's ``failure.json``."""
        self.write_config(operative=True)
        write_json_atomic(self.path(METRICS_FILE), metrics)
        clear_failure(self.root)

    def record_failure(self, error: BaseException, **details) -> str:
        """`write_failure` into this folder; returns the path of ``failure.json``."""
        return write_failure(self.root, error, **details)


# ------------------------------------------------------------------------------------------ helpers
class _Unset:
    def __repr__(self) -> str:
        return "unset"


_UNSET = _Unset()


def _show(value) -> str:
    return "unset" if value is _UNSET else json.dumps(_jsonable(value))


def _jsonable(value):
    """Tuples as lists, NumPy scalars as Python numbers, anything else JSON cannot hold as its repr."""
    if value is _UNSET or value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (TypeError, ValueError):
            pass
    return repr(value)


def _conflict(root: str, current: dict) -> str | None:
    """Why ``root`` (not new) cannot take the experiment ``current``, or None when it can."""
    recorded = read_fingerprint(root)
    if recorded is not None:
        if recorded["hash"] == current["hash"]:
            return None
        try:  # a folder recorded under earlier gin names (`pbo_tf.compat.gin_names`)
            migrated = migrate_bindings(recorded["bindings"])
        except MigrationError as e:
            return f"run folder {root} holds another experiment: {e}"
        if fingerprint(migrated)["hash"] == current["hash"]:
            return None
        diff = differences(migrated, current["bindings"]) or ["the fingerprints differ"]
        return f"run folder {root} holds another experiment: {'; '.join(diff)}"
    return (
        f"run folder {root} is not empty and has no {FINGERPRINT_FILE} (not a run folder of this experiment)"
    )


class InRunFolder:
    """What the offline and online runners share about their folder: `folder` (a `RunFolder`) and its
    shortcuts. The runner sets ``root_dir``, ``overwrite`` and ``log``."""

    root_dir: str
    overwrite: bool
    log: Any

    @functools.cached_property
    def folder(self) -> RunFolder:
        """The run folder."""
        return RunFolder(self.root_dir, overwrite=self.overwrite, log=self.log)

    def path(self, *parts: str) -> str:
        return self.folder.path(*parts)

    @property
    def complete(self) -> bool:
        return self.folder.complete

    def claim_folder(self) -> str:
        """Checks that the run folder holds this experiment, or creates it (`RunFolder.claim`), once per
        object, before anything is written into it; returns ``"new"``, ``"resume"`` or ``"complete"``."""
        return self.folder.claim()
