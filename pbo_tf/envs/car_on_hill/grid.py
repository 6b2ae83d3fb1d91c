"""The car-on-hill evaluation grid: the 17 × 17 evaluation states, their cells, and per-cell counts.

Layouts (``layout``). ``"reference"`` (default, as the paper's code): the evaluation states are the nodes
``linspace(−1, 1, 17) × linspace(−3, 3, 17)`` (borders included) and the cell of a node is the box of width
``2/16 × 6/16`` centred on it, so the cells cover ``[−1.0625, 1.0625] × [−3.1875, 3.1875]``. ``"cells"``: 17
equal cells partitioning ``[−1, 1] × [−3, 3]`` evaluated at their midpoints. In both, cells are numbered
row-major ``i_p * 17 + i_v`` (the velocity index varies fastest).

The exact optimum (`pbo_tf.envs.car_on_hill.optimum`) is computed at these states and the evaluation
(``pbo_tf.envs.car_on_hill.evaluation``) weights them by the dataset's counts per cell.
"""

from __future__ import annotations

import numpy as np

from pbo_tf.envs.car_on_hill.dynamics import MAX_POSITION, MAX_VELOCITY

GRID_SIZE = 17
LAYOUTS = ("reference", "cells")
DEFAULT_LAYOUT = "reference"


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def grid_axes(layout: str = DEFAULT_LAYOUT, n: int = GRID_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """The evaluation positions ``[n]`` and velocities ``[n]`` of the grid (see the module docstring)."""
    _check_layout(layout)
    if layout == "reference":
        return np.linspace(-MAX_POSITION, MAX_POSITION, n), np.linspace(-MAX_VELOCITY, MAX_VELOCITY, n)
    widths = 2.0 * MAX_POSITION / n, 2.0 * MAX_VELOCITY / n
    return (
        -MAX_POSITION + (np.arange(n) + 0.5) * widths[0],
        -MAX_VELOCITY + (np.arange(n) + 0.5) * widths[1],
    )


def grid_edges(layout: str = DEFAULT_LAYOUT, n: int = GRID_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """The cell edges ``[n + 1]`` along ``p`` and along ``v``."""
    _check_layout(layout)
    if layout == "reference":
        dp, dv = 2.0 * MAX_POSITION / (n - 1), 2.0 * MAX_VELOCITY / (n - 1)
        return (
            -MAX_POSITION - dp / 2 + dp * np.arange(n + 1),
            -MAX_VELOCITY - dv / 2 + dv * np.arange(n + 1),
        )
    return np.linspace(-MAX_POSITION, MAX_POSITION, n + 1), np.linspace(-MAX_VELOCITY, MAX_VELOCITY, n + 1)


def grid_centres(layout: str = DEFAULT_LAYOUT, n: int = GRID_SIZE) -> np.ndarray:
    """The ``n²`` evaluation states, float64 ``[n², 2]``, row-major: row ``i_p * n + i_v`` is
    ``(positions[i_p], velocities[i_v])`` — the velocity varies fastest."""
    positions, velocities = grid_axes(layout, n)
    pp, vv = np.meshgrid(positions, velocities, indexing="ij")
    return np.stack([pp.reshape(-1), vv.reshape(-1)], axis=1)


def cell_indices(
    states: np.ndarray, layout: str = DEFAULT_LAYOUT, n: int = GRID_SIZE, outside: str = "drop"
) -> np.ndarray:
    """The cell (row-major index ``i_p * n + i_v``) of each state ``[N, 2]``.

    Cells are half-open ``[e_i, e_{i+1})`` except the last, which includes its upper edge. States outside
    the cells (``layout="reference"``: outside ``[−1.0625, 1.0625] × [−3.1875, 3.1875]``; ``"cells"``: outside
    ``[−1, 1] × [−3, 3]``) get ``-1`` with ``outside="drop"`` (as the reference's sample counts) or the
    nearest border cell with ``outside="clip"``.

    Returns:
      int64 ``[N]``.
    """
    if outside not in ("drop", "clip"):
        raise ValueError(f"outside must be 'drop' or 'clip', got {outside!r}")
    states = np.asarray(states, dtype=np.float64)
    if states.ndim != 2 or states.shape[1] != 2:
        raise ValueError(f"states must have shape [N, 2], got {states.shape}")
    index = []
    inside = np.ones(len(states), dtype=bool)
    for axis, edges in enumerate(grid_edges(layout, n)):
        x = states[:, axis]
        i = np.floor((x - edges[0]) / (edges[1] - edges[0])).astype(np.int64)
        i = np.where(x == edges[-1], n - 1, i)
        inside &= (i >= 0) & (i < n)
        index.append(np.clip(i, 0, n - 1))
    cells = index[0] * n + index[1]
    return cells if outside == "clip" else np.where(inside, cells, -1)


def state_counts(
    states: np.ndarray, layout: str = DEFAULT_LAYOUT, n: int = GRID_SIZE, outside: str = "drop"
) -> np.ndarray:
    """The raw number of ``states`` ``[N, 2]`` per cell, int64 ``[n²]`` (see `cell_indices`)."""
    cells = cell_indices(states, layout, n, outside)
    return np.bincount(cells[cells >= 0], minlength=n * n).astype(np.int64)
