"""Tests of pbo_tf.io: strict JSON written atomically."""

import json
import math
import os

import numpy as np

from pbo_tf.io import write_json_atomic


def test_write_json_atomic_round_trip(tmp_path):
    path = tmp_path / "out" / "metrics.json"
    obj = {
        "a": np.float32(1.5),
        "b": np.arange(3),
        "c": float("nan"),
        "d": [np.inf, 1, -math.inf],
        "e": (1, 2),
        "f": np.int64(7),
        "g": np.bool_(True),
        "h": np.array([[0.5, np.nan]]),
        "s": "text",
    }
    write_json_atomic(str(path), obj)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text

    def reject(constant):
        raise AssertionError(f"non-standard JSON constant {constant}")

    loaded = json.loads(text, parse_constant=reject)
    assert loaded == {
        "a": 1.5,
        "b": [0, 1, 2],
        "c": None,
        "d": [None, 1, None],
        "e": [1, 2],
        "f": 7,
        "g": True,
        "h": [[0.5, None]],
        "s": "text",
    }
    assert os.listdir(path.parent) == ["metrics.json"]  # No temp file left behind.
    write_json_atomic(str(path), {"x": 1})  # Overwrites.
    assert json.loads(path.read_text()) == {"x": 1}
