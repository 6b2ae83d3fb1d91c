"""Reading the figures the plotting programs build (for tests of what is drawn, not of the PNG's pixels)."""


def capture_figures(monkeypatch) -> list:
    """Records every figure `pbo_tf.analysis.plotting.curves_figure` builds from now on."""
    from pbo_tf.analysis import plotting

    figures, build = [], plotting.curves_figure

    def recording(*args, **kwargs):
        figures.append(build(*args, **kwargs))
        return figures[-1]

    monkeypatch.setattr(plotting, "curves_figure", recording)
    return figures
