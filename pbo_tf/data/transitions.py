"""Offline transition datasets: an in-memory container, `.npz` storage (no pickle) and `tf.data` pipelines.

A dataset is a set of transitions ``(s, a, r, s', done)``:

* ``state`` ``[N, *obs_shape]`` (int32 for tabular states, float32 otherwise);
* ``action`` ``[N]``: int32 index into the environment's discrete action set (the Q family maps the
  index to whatever the network sees), or float32 action values for continuous-action data (LQR);
* ``reward`` ``[N]`` float32; ``next_state`` like ``state``; ``done`` ``[N]`` float32 (1.0 = terminal, so
  no bootstrapping).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import zipfile
import zlib

import numpy as np
import tensorflow as tf

from pbo_tf.io import atomic_open

FIELDS = ("state", "action", "reward", "next_state", "done")
#: Optional entry of a saved dataset: the name of the environment it was collected on.
ENV_FIELD = "env"


class CorruptDatasetError(ValueError):
    """Raised when a stored dataset cannot be read back or fails its consistency checks."""


@dataclasses.dataclass(frozen=True)
class Transitions:
    """A batch of transitions stored as NumPy arrays (see module docstring for shapes)."""

    state: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_state: np.ndarray
    done: np.ndarray

    def __post_init__(self):
        n = len(self.reward)
        for name in FIELDS:
            arr = getattr(self, name)
            if not isinstance(arr, np.ndarray):
                raise TypeError(f"Transitions.{name} must be a numpy array, got {type(arr).__name__}")
            if arr.shape[:1] != (n,):
                raise ValueError(
                    f"Transitions.{name} has leading dimension {arr.shape[:1]}, expected ({n},) like reward"
                )
        if self.state.shape != self.next_state.shape:
            raise ValueError(
                f"state shape {self.state.shape} differs from next_state shape {self.next_state.shape}"
            )
        for name in ("action", "reward", "done"):
            if getattr(self, name).ndim != 1:
                raise ValueError(f"Transitions.{name} must be 1-D, got shape {getattr(self, name).shape}")

    @classmethod
    def from_arrays(cls, state, action, reward, next_state, done) -> Transitions:
        """Builds a container casting every field to its canonical dtype."""
        state = np.asarray(state)
        state_dtype = np.int32 if np.issubdtype(state.dtype, np.integer) else np.float32
        return cls(
            state=state.astype(state_dtype),
            action=np.asarray(action).astype(
                np.int32 if np.issubdtype(np.asarray(action).dtype, np.integer) else np.float32
            ),
            reward=np.asarray(reward).astype(np.float32),
            next_state=np.asarray(next_state).astype(state_dtype),
            done=np.asarray(done).astype(np.float32),
        )

    def __len__(self) -> int:
        return len(self.reward)

    def as_dict(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in FIELDS}

    def as_tensors(self) -> dict[str, tf.Tensor]:
        return {name: tf.constant(value) for name, value in self.as_dict().items()}

    def to_dataset(self) -> tf.data.Dataset:
        """An unbatched, unshuffled `tf.data.Dataset` of transition dicts."""
        return tf.data.Dataset.from_tensor_slices(self.as_dict())

    # ----------------------------------------------------------------------------------------- storage
    def save(self, path: str, env: str | None = None) -> None:
        """Writes the dataset to ``path`` (`.npz`, no pickle), atomically (temp file + rename); ``env`` (the
        environment's name) is stored beside the fields, for `load` to check."""
        extra = {} if env is None else {ENV_FIELD: np.asarray(str(env))}
        with atomic_open(path, "wb") as f:
            np.savez(f, **self.as_dict(), **extra)

    @classmethod
    def load(cls, path: str, env: str | None = None) -> Transitions:
        """Reads a dataset written by `save` (never unpickling anything).

        Args:
          path: the `.npz` file.
          env: the environment the dataset must come from (checked when the file records one).

        Raises:
          FileNotFoundError: ``path`` does not exist.
          CorruptDatasetError: the file is not a readable `.npz` (truncated, corrupt, pickled objects),
            lacks a field, has inconsistent shapes or records another environment than ``env``.
        """
        if not os.path.exists(path):
            raise FileNotFoundError(f"dataset file {path!r} does not exist")
        try:
            with np.load(path, allow_pickle=False) as data:
                if not hasattr(data, "files"):
                    raise CorruptDatasetError(
                        f"dataset {path!r} is a single .npy array, not an .npz of {FIELDS}"
                    )
                missing = [name for name in FIELDS if name not in data.files]
                if missing:
                    raise CorruptDatasetError(f"dataset {path!r} is missing the fields {missing}")
                arrays = {name: data[name] for name in FIELDS}
                recorded = str(data[ENV_FIELD]) if ENV_FIELD in data.files else None
        except CorruptDatasetError:
            raise
        except ValueError as e:
            if "pickle" in str(e):
                raise CorruptDatasetError(
                    f"dataset {path!r} is not an .npz of arrays (reading it would mean unpickling objects, "
                    "which pbo_tf never does)"
                ) from e
            raise CorruptDatasetError(f"dataset {path!r} is corrupt or not an .npz file: {e}") from e
        except (OSError, KeyError, zipfile.BadZipFile, zlib.error, EOFError) as e:
            raise CorruptDatasetError(f"dataset {path!r} is corrupt or not an .npz file: {e}") from e
        if env is not None and recorded is not None and recorded != env:
            raise CorruptDatasetError(f"dataset {path!r} was collected on {recorded}, not {env}")
        try:
            return cls(**arrays)
        except (TypeError, ValueError) as e:
            raise CorruptDatasetError(f"dataset {path!r} is inconsistent: {e}") from e


def materialise(dataset: tf.data.Dataset) -> dict[str, tf.Tensor]:
    """Reads a finite, unbatched transition `tf.data.Dataset` into one dict of tensors ``[N, …]``.

    Offline datasets are small (≤ 70 000 transitions); holding them in memory lets every pass draw a
    seeded permutation with stateless ops, which is what makes resumed runs replay the same order.
    """
    size = int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1).numpy())
    if size == 0:
        raise ValueError("the transition dataset is empty")
    return dataset.batch(size).get_single_element()


def _hash_int32(x: tf.Tensor, multiplier: int) -> tf.Tensor:
    """A cheap avalanching hash of int32 values (multiplications wrap modulo 2^32, as in TF and XLA)."""
    x = x * multiplier
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15))
    x = x * 0x2C1B3C6D
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 13))


def seeded_permutation(size: int, seed: tf.Tensor | int) -> tf.Tensor:
    """A pseudo-random permutation of ``0 .. size-1`` (int32), a pure function of ``seed``.

    ``argsort`` of stateless uniforms (the obvious way) is slow under XLA on CPU: sorting the car-on-hill
    dataset's keys costs many times the arithmetic of an FQI gradient step. This
    is a keyed Feistel network on the smallest ``4^m >= size`` (round keys hashed from ``seed``; 4 rounds,
    8 for tiny sizes) restricted to ``[0, size)`` by cycle walking: a value that lands outside is sent
    through the network again until it lands inside (a bijection of ``[0, size)`` because the network is
    one of ``[0, 4^m)``). Only elementwise int32 ops in a short ``while_loop`` (no sort, no cumsum: XLA's CPU
    cumsum is quadratic), and the same result in graph, eager and XLA code.

    The network is one `tf.function` per ``size``, traced once in a process and called wherever an order is
    drawn (each pass's, each W batch's, in every run's programs), instead of its few hundred small ops being
    traced again into each program that draws one; a compiled caller inlines it as before.
    """
    size = int(size)
    if not 1 <= size < 2**30:
        raise ValueError(f"size must be in [1, 2^30), got {size}")
    return _permutation_program(size)(tf.cast(seed, tf.int64))


@functools.cache
def _permutation_program(size: int):
    """`seeded_permutation`'s network for ``size``: a function of an int64 seed, traced once."""
    return tf.function(
        functools.partial(_permutation, size), input_signature=[tf.TensorSpec([], tf.int64)], autograph=False
    )


def _permutation(size: int, seed: tf.Tensor) -> tf.Tensor:
    half_bits = max(1, (int(size - 1).bit_length() + 1) // 2)
    half_mask = (1 << half_bits) - 1
    seed_lo = tf.cast(tf.bitwise.bitwise_and(seed, 0x7FFFFFFF), tf.int32)
    seed_hi = tf.cast(tf.bitwise.bitwise_and(tf.bitwise.right_shift(seed, 31), 0x7FFFFFFF), tf.int32)
    rounds = 4 if half_bits >= 6 else 8
    keys = [
        _hash_int32(tf.bitwise.bitwise_xor(_hash_int32(seed_lo + r, 0x7FEB352D), seed_hi), 0x1B873593)
        for r in range(rounds)
    ]

    def feistel(x):
        left, right = tf.bitwise.right_shift(x, half_bits), tf.bitwise.bitwise_and(x, half_mask)
        for key in keys:
            f = tf.bitwise.right_shift(_hash_int32(right + key, 0x7FEB352D), 7)
            left, right = right, tf.bitwise.bitwise_xor(left, tf.bitwise.bitwise_and(f, half_mask))
        return tf.bitwise.bitwise_or(tf.bitwise.left_shift(left, half_bits), right)

    # Cycle walking: each walk stays on the cycle of the network through its start (< size), so it ends;
    # with at most 3/4 of [0, 4^m) outside, walks are a few steps long (the longest ~log n / log(4/3)).
    (y,) = tf.while_loop(
        lambda y: tf.reduce_any(y >= size),
        lambda y: (tf.where(y >= size, feistel(y), y),),
        (feistel(tf.range(size, dtype=tf.int32)),),
    )
    return y


def shuffled_batch_indices(size: int, batch_size: int, seed: tf.Tensor | int) -> tf.Tensor:
    """Indices ``[n_batches, batch_size]`` of one full pass over ``size`` transitions in a seeded order.

    The permutation (`seeded_permutation`) is a pure function of ``seed``, so a run that derives ``seed``
    from its checkpointed counters replays exactly the same data order after a restart. The last partial
    batch is dropped when ``size`` is not a multiple of ``batch_size`` (the reference does the same). Works
    with a symbolic ``seed`` inside `tf.function` and under XLA.
    """
    if batch_size > size:
        raise ValueError(f"batch size {batch_size} exceeds the dataset size {size}")
    n_batches = size // batch_size
    order = seeded_permutation(size, seed)[: n_batches * batch_size]
    return tf.reshape(order, [n_batches, batch_size])


def gather_batch(data: dict[str, tf.Tensor], indices: tf.Tensor) -> dict[str, tf.Tensor]:
    """The transitions at ``indices`` (``[B]``) of a materialised dataset."""
    return {name: tf.gather(value, indices) for name, value in data.items()}
