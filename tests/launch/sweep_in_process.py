"""Runs the sweep program in the test's process, as its launcher runs it (`pbo_tf.cli.common.call_main`):
for sweeps whose own TensorFlow start would be most of a subprocess (their points are still training
subprocesses)."""

import contextlib
import io


def run_sweep(argv: list[str]) -> tuple[int, str, str]:
    """``(exit code, stderr, stdout)`` of the sweep program on the command line ``argv`` (program name
    first)."""
    from pbo_tf.cli import common, sweep

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = common.call_main(sweep.run, sweep.FLAGS, argv)
    return code, err.getvalue(), out.getvalue()
