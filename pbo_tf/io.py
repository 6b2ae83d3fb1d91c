"""Atomic file writes: every file a run produces is written to a temp file in the same folder, flushed,
fsynced and renamed over the destination, so a killed run never leaves a half-written file behind."""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import tempfile
from collections.abc import Iterator
from typing import IO, Any

import numpy as np


def _fsync_directory(directory: str) -> None:
    """Best-effort fsync of a directory so that a rename in it is durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w") -> Iterator[IO]:
    """``with atomic_open(path, "w" | "wb") as f:`` — ``path`` appears complete or not at all.

    The parent folder is created if needed; on an exception the temp file is removed and ``path`` is
    left as it was.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open supports modes 'w' and 'wb', got {mode!r}")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600 files
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    _fsync_directory(directory)


def write_text_atomic(path: str, text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def write_json_atomic(path: str, obj: Any) -> None:
    """Writes JSON atomically: temp file in the same folder, flush + fsync, then ``os.replace``.

    NumPy scalars and arrays are converted to Python objects, tuples to lists, and non-finite floats
    (NaN, +-inf) are written as ``null`` so the file is strict JSON. The parent folder is created if needed.

    Args:
        path: Destination file.
        obj: JSON-serialisable object (possibly containing NumPy values).

    Raises:
        TypeError: If ``obj`` contains something JSON cannot represent.
    """
    data = _to_json(obj)
    with atomic_open(path, "w") as f:
        json.dump(data, f, indent=2, allow_nan=False)
        f.write("\n")


def _to_json(obj: Any) -> Any:
    """Recursively converts ``obj`` into plain JSON types (non-finite floats become None)."""
    if isinstance(obj, np.ndarray):
        return _to_json(obj.tolist())
    if isinstance(obj, np.generic):
        return _to_json(obj.item())
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        value = float(obj)
        return value if math.isfinite(value) else None
    if isinstance(obj, dict):
        return {_to_json_key(key): _to_json(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_json(value) for value in obj]
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serialisable: {obj!r}")


def _to_json_key(key: Any) -> Any:
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, (str, int, float, bool)) or key is None:
        return key
    raise TypeError(f"JSON object keys must be str, int, float, bool or None, got {key!r}")
