"""Learning-curve figures and text tables in the style of the paper's Figures 3 and 5 (no TensorFlow).

The figures are drawn on a `matplotlib.figure.Figure` with the Agg canvas, without pyplot, so importing
or using this module never changes the process-wide matplotlib backend.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from pbo_tf.evaluation.stats import mean_and_ci

#: Display names of the algorithms; unknown names are shown as they are.
ALGORITHM_LABELS = {
    "fqi": "FQI",
    "profqi": "ProFQI",
    "profqi_inf": "ProFQI-inf",
    "profqi_chain": "ProFQI-chain",
    "profqi_lqr": "ProFQI-LQR",
    "oracle": "Oracle",
}

#: Metric-name endings for which a log-scale y axis is used automatically (when all values are > 0).
LOG_SCALE_SUFFIXES = ("error", "_l2", "rms")

_X_LABEL = "k (Bellman iterations / PBO applications)"


def algorithm_label(algorithm: str) -> str:
    """Display name of an algorithm, e.g. ``"profqi"`` -> ``"ProFQI"``."""
    return ALGORITHM_LABELS.get(algorithm, algorithm)


def auto_log_y(
    groups: Mapping[tuple[str, str, int], Mapping[str, Any]], metric: str, reference: float | None = None
) -> bool:
    """Whether `plot_curves` uses a log-scale y axis when ``log_y`` is None.

    Args:
        groups: Output of `pbo_tf.experiments.results.group_curves`.
        metric: Metric name; it must end with ``"error"``, ``"_l2"`` or ``"rms"``.
        reference: Optional reference value, which must then be > 0 too.

    Returns:
        True if the metric name qualifies and every (non-missing) value, fixed-point value and the
        reference are strictly positive.
    """
    if not metric.endswith(LOG_SCALE_SUFFIXES):
        return False
    plotted = [np.ravel(np.asarray(group["values"], dtype=np.float64)) for group in groups.values()]
    plotted += [np.ravel(np.asarray(group.get("inf", []), dtype=np.float64)) for group in groups.values()]
    if reference is not None:
        plotted.append(np.asarray([reference], dtype=np.float64))
    values = np.concatenate(plotted) if plotted else np.zeros(0)
    values = values[~np.isnan(values)]
    return values.size > 0 and bool(np.all(values > 0))


def plot_curves(
    groups: Mapping[tuple[str, str, int], Mapping[str, Any]],
    metric: str,
    output_path: str,
    title: str | None = None,
    reference: float | None = None,
    log_y: bool | None = None,
    reference_label: str = "reference",
    confidence: float = 0.95,
    figsize: tuple[float, float] = (7.0, 4.5),
    dpi: int = 150,
) -> str:
    """Plots one metric against k for every ``(env, algorithm, K)`` group and saves a PNG.

    Each group is drawn as its mean over seeds with a shaded Student-t confidence band. A dashed vertical
    black line marks each distinct K (the number of iterations used in training), the fixed-point value
    (``"k": "inf"``), when present, is a dotted horizontal line of the group's colour, and ``reference``
    (e.g. the optimal J) is a solid grey horizontal line.

    Args:
        groups: Output of `pbo_tf.experiments.results.group_curves`.
        metric: Name of the plotted metric (y label, log-scale choice).
        output_path: PNG file to write; its parent folder is created. Written atomically.
        title: Figure title; defaults to ``"<env(s)>: <metric>"``.
        reference: Optional value drawn as a horizontal reference line.
        log_y: Log-scale y axis; None chooses it when every plotted value is > 0 and ``metric`` ends with
            ``"error"``, ``"_l2"`` or ``"rms"``.
        reference_label: Legend label of the reference line.
        confidence: Confidence level of the shaded bands.
        figsize: Figure size in inches.
        dpi: Resolution; the PNG is ``figsize * dpi`` pixels.

    Returns:
        ``output_path``.

    Raises:
        ValueError: If ``groups`` is empty.
    """
    if not groups:
        raise ValueError(f"No curves to plot for metric {metric!r}")
    summaries = [_summarise(group, confidence) for group in groups.values()]

    if log_y is None:
        log_y = auto_log_y(groups, metric, reference)
    positive_floor = _positive_floor(summaries) if log_y else None

    figure = Figure(figsize=figsize, dpi=dpi, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    colours = _colours(len(summaries))
    has_fixed_point = False
    # Distinct markers and dash patterns keep curves that coincide (e.g. FQI and the exact operator on a
    # tabular problem) visible.
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    dashes = ["-", "--", "-."]  # ":" is kept for fixed points
    for index, (summary, colour) in enumerate(zip(summaries, colours, strict=True)):
        ks, mean, half_width = summary["ks"], summary["mean"], summary["half_width"]
        label = f"{algorithm_label(summary['algorithm'])}, K={summary['K']} ({summary['n_seeds']} seeds)"
        valid = np.isfinite(mean)
        if np.any(valid):
            lower, upper = mean[valid] - half_width[valid], mean[valid] + half_width[valid]
            if positive_floor is not None:
                lower = np.maximum(lower, positive_floor)
            axes.plot(
                ks[valid],
                mean[valid],
                color=colour,
                linewidth=1.8,
                linestyle=dashes[index % len(dashes)],
                label=label,
                marker=markers[index % len(markers)] if np.sum(valid) <= 30 else None,
                markersize=4,
            )
            axes.fill_between(ks[valid], lower, upper, color=colour, alpha=0.2, linewidth=0)
        else:  # Only a fixed-point value: keep the group in the legend.
            axes.plot([], [], color=colour, linewidth=1.8, label=label)
        if np.isfinite(summary["inf_mean"]):
            has_fixed_point = True
            axes.axhline(summary["inf_mean"], color=colour, linestyle=":", linewidth=1.8)

    for K in sorted({summary["K"] for summary in summaries}):
        axes.axvline(K, color="black", linestyle="--", linewidth=1.0)
        axes.annotate(
            f"K={K}",
            xy=(K, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, -2),
            textcoords="offset points",
            ha="left",
            va="top",
            fontsize=8,
        )
    if reference is not None:
        axes.axhline(reference, color="dimgrey", linestyle="-", linewidth=1.2, label=reference_label)

    handles, labels = axes.get_legend_handles_labels()
    if has_fixed_point:
        handles.append(Line2D([], [], color="grey", linestyle=":", linewidth=1.8))
        labels.append("fixed point (k = inf)")
    axes.legend(handles, labels, fontsize=8, loc="best", framealpha=0.9)
    if log_y:
        axes.set_yscale("log")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(_X_LABEL)
    axes.set_ylabel(metric)
    if title is None:
        envs = sorted({summary["env"] for summary in summaries})
        title = f"{', '.join(envs)}: {metric}"
    axes.set_title(textwrap.fill(title, 70))  # a long title wraps instead of running off the figure
    axes.grid(True, which="major", alpha=0.3)

    return _save_png(figure, output_path, dpi)


def _save_png(figure: Figure, output_path: str, dpi: int) -> str:
    """Writes the figure atomically (temporary file, then rename)."""
    directory = os.path.dirname(os.path.abspath(output_path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp_path = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(output_path)}.", suffix=".png")
    os.close(fd)
    try:
        figure.savefig(tmp_path, format="png", dpi=dpi)
        os.chmod(tmp_path, 0o644)  # mkstemp creates 0600 files.
        os.replace(tmp_path, output_path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        raise
    return output_path


def summary_table(
    groups: Mapping[tuple[str, str, int], Mapping[str, Any]],
    metric: str,
    ks: Sequence[int],
    confidence: float = 0.95,
) -> str:
    """Plain-text table of ``mean ± CI half width`` over seeds at the requested ks.

    A ``k=inf`` column (fixed point) is added when at least one group has such values. Cells without
    data show ``n/a``.

    Args:
        groups: Output of `pbo_tf.experiments.results.group_curves`.
        metric: Name of the metric (shown in the header line).
        ks: Values of k to tabulate.
        confidence: Confidence level of the half widths.

    Returns:
        The table, one line per group, columns aligned with spaces, without a trailing newline.
    """
    summaries = [_summarise(group, confidence) for group in groups.values()]
    columns: list[int | str] = [int(k) for k in ks]
    if any(np.isfinite(summary["inf_mean"]) for summary in summaries):
        columns.append("inf")
    header = ["env", "algorithm", "K", "seeds"] + [f"k={k}" for k in columns]
    rows = []
    for summary in summaries:
        row = [summary["env"], summary["algorithm"], str(summary["K"]), str(summary["n_seeds"])]
        for k in columns:
            if k == "inf":
                mean, half_width = summary["inf_mean"], summary["inf_half_width"]
            else:
                index = np.flatnonzero(summary["ks"] == k)
                mean = summary["mean"][index[0]] if index.size else np.nan
                half_width = summary["half_width"][index[0]] if index.size else np.nan
            row.append(f"{mean:.4g} ± {half_width:.2g}" if np.isfinite(mean) else "n/a")
        rows.append(row)
    widths = [max(len(line[i]) for line in [header] + rows) for i in range(len(header))]
    lines = [f"{metric}: mean ± {confidence:.0%} CI half width over seeds"]
    for line in [header] + rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _summarise(group: Mapping[str, Any], confidence: float) -> dict[str, Any]:
    """Mean and CI half width of a group's curve and fixed-point values."""
    values = np.asarray(group["values"], dtype=np.float64)
    ks = np.asarray(group["ks"], dtype=np.int64)
    if values.shape[1:] != ks.shape:  # Also covers an empty curve stored as shape (n_seeds,).
        values = values.reshape(len(group["seeds"]), ks.size)
    mean, half_width = mean_and_ci(values, axis=0, confidence=confidence)
    inf_values = np.asarray(group.get("inf", np.full(len(group["seeds"]), np.nan)), dtype=np.float64)
    inf_mean, inf_half_width = mean_and_ci(inf_values, axis=0, confidence=confidence)
    return {
        "env": group["env"],
        "algorithm": group["algorithm"],
        "K": int(group["K"]),
        "n_seeds": len(group["seeds"]),
        "ks": ks,
        "mean": np.atleast_1d(mean),
        "half_width": np.atleast_1d(half_width),
        "inf_mean": float(inf_mean),
        "inf_half_width": float(inf_half_width),
    }


def _positive_floor(summaries: Sequence[Mapping[str, Any]]) -> float | None:
    """Lower clip of the bands on a log axis: a tenth of the smallest positive plotted mean."""
    means = np.concatenate([summary["mean"] for summary in summaries])
    positive = means[np.isfinite(means) & (means > 0)]
    return float(positive.min()) / 10.0 if positive.size else None


def _colours(n: int) -> list[Any]:
    """``n`` distinct colours: the tab10 cycle, then tab20 / a continuous map for more lines."""
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["viridis"](x) for x in np.linspace(0.0, 0.95, n)]


def plot_policy_maps(
    maps: Sequence[tuple[str, np.ndarray, np.ndarray, np.ndarray]],
    output: str,
    action_labels: Sequence[str] = ("u = −4", "u = +4"),
    title: str | None = None,
) -> str:
    """Greedy policies over a 2-D state grid side by side (paper Fig. 6 for car-on-hill).

    Args:
      maps: ``(panel title, actions [n_x, n_y] int, x axis [n_x], y axis [n_y])`` per panel.
      output: PNG path (written atomically).
      action_labels: legend of the action indices.
      title: figure title.
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    if not maps:
        raise ValueError("no policy maps to plot")
    colours = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"][: len(action_labels)]
    cmap = ListedColormap(colours)
    fig = Figure(figsize=(4.2 * len(maps), 3.8))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(maps), squeeze=False)
    for ax, (label, actions, x, y) in zip(axes[0], maps, strict=True):
        ax.imshow(
            np.asarray(actions).T,
            origin="lower",
            extent=(x[0], x[-1], y[0], y[-1]),
            aspect="auto",
            cmap=cmap,
            vmin=-0.5,
            vmax=len(action_labels) - 0.5,
            interpolation="nearest",
        )
        ax.set_title(label)
        ax.set_xlabel("position p")
        ax.set_ylabel("velocity v")
    handles = [Patch(color=c, label=a) for c, a in zip(colours, action_labels, strict=True)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return _save_png(fig, output, 120)
