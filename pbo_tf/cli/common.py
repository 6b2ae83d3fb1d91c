"""The programs' shared entry point: flags parsed, every error reported as one line, fixed exit codes.

A program defines its flags on its own `absl.flags.FlagValues` (so that several programs can be imported
into one process, as the tests do) and its entry point calls ``common.run_main(run, FLAGS, argv)``. Every
program has the common flags `define_common_flags` defines: ``--verbose`` and ``--import=module``
(repeatable), the modules imported before the program runs, e.g. one that registers the environments of a
package without a ``pbo_tf.envs`` entry point (`pbo_tf.envs.registry`).
`call_main` is the same without ``sys.exit``: it returns the exit code, which lets tests drive a program
in-process.

Exit codes:

* 0: success;
* 1: an unexpected error (a bug: ``--verbose`` shows its traceback);
* 2 (`EXIT_USAGE`): a usage or configuration error: a bad flag, gin file, binding or value, a missing or
  corrupt input file (dataset, checkpoint, policy), a run folder that holds another experiment or cannot
  be written, a dependency that pip could not install with pbo_tf (TF-Agents, gym: `pbo_tf.deps`);
* 3 (`EXIT_DIVERGED`): training diverged (NaN or Inf); the run folder keeps its last good checkpoint and
  records the failure in ``failure.json``;
* 130: interrupted (Ctrl-C); 143: terminated (SIGTERM, while `signals_interrupt` is active). A program
  may raise `Interrupted` with its own one-line message (``pbo-train`` names the checkpoint a rerun resumes
  from).

The message is one line on stderr, ``<program>: error: <what>``, naming the file, binding or value and
what is expected; ``--verbose`` (or the environment variable ``PBO_TF_VERBOSE=1``) prints the traceback
too. The errors raised inside a gin configurable carry gin's "In call to configurable ..." lines: the
message keeps the error's own text and names the configurable instead.

This module imports only the standard library and absl: `pbo_tf.cli.play` plays a policy without loading
pbo_tf's library code.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence

from absl import flags

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_DIVERGED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_TERMINATED = 143  # 128 + SIGTERM
VERBOSE_ENV = "PBO_TF_VERBOSE"
#: The common flag that names modules to import first (`import_modules`).
IMPORT_FLAG = "import"
HELP_ARGS = ("-h", "-?", "--help", "--helpshort", "--helpfull")

_GIN_CALL = re.compile(r"In call to configurable '([^']+)'")
_GIN_REQUIRED = re.compile(r"Required bindings for `([^`]+)` not provided in config: \[(.*)\]")
_GIN_EXTRA = (
    "In call to configurable",
    "No values supplied by Gin",
    "Gin had values bound for",
    "Caller supplied",
)
#: Errors that are a user's input, whatever raised them.
_USAGE_ERRORS = (ValueError, OSError, flags.Error)
#: Errors that are a user's input when a gin configurable raised them (an ill-typed or missing binding).
_CONFIG_CALL_ERRORS = (TypeError, LookupError, NotImplementedError, AttributeError, RuntimeError)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (raised by `signals_interrupt`'s handler)."""


class Interrupted(KeyboardInterrupt):
    """A program's interruption with its own one-line ``message`` and ``exit_code`` (`call_main` prints
    ``<program>: <message>`` and returns the code)."""

    def __init__(self, message: str, exit_code: int = EXIT_INTERRUPTED):
        super().__init__(message)
        self.message, self.exit_code = message, exit_code


@contextlib.contextmanager
def signals_interrupt():
    """While active (in the main thread), SIGTERM raises `Terminated` (a `KeyboardInterrupt`) where the
    program is, as Ctrl-C raises `KeyboardInterrupt`, so ``finally`` blocks run and the program can say
    where it stopped; the previous handler is restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interruption(error: KeyboardInterrupt) -> tuple[str, int]:
    """``(how it stopped, exit code)`` of an interruption: ``"terminated (SIGTERM)"`` and 143 for
    `Terminated`, ``"interrupted (Ctrl-C)"`` and 130 otherwise."""
    if isinstance(error, Terminated):
        return "terminated (SIGTERM)", EXIT_TERMINATED
    return "interrupted (Ctrl-C)", EXIT_INTERRUPTED


def define_common_flags(flag_values: flags.FlagValues) -> None:
    """``--verbose`` and ``--import`` on a program's flags."""
    flags.DEFINE_boolean(
        "verbose",
        False,
        f"Print the traceback of an error too (or set {VERBOSE_ENV}=1).",
        flag_values=flag_values,
    )
    flags.DEFINE_multi_string(
        IMPORT_FLAG,
        [],
        "A module to import before anything else, e.g. one that registers environments of another package "
        "with pbo_tf.envs.registry.register (repeatable; a package with a 'pbo_tf.envs' entry point needs "
        "none).",
        flag_values=flag_values,
    )


class ImportFlagError(ValueError):
    """A module named by ``--import`` could not be imported."""


def import_modules(modules: Sequence[str]) -> None:
    """Imports the ``--import`` modules, in order.

    Raises:
      ImportFlagError: a module cannot be imported (its one-line message names the module and the error).
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as e:
            raise ImportFlagError(
                f"--{IMPORT_FLAG}={module}: cannot import it: {type(e).__name__}: {one_line(str(e))}"
            ) from e


def imported_modules(flag_values: flags.FlagValues) -> list[str]:
    """The ``--import`` modules of ``flag_values`` (none when the program has no such flag)."""
    return list(flag_values[IMPORT_FLAG].value or []) if IMPORT_FLAG in flag_values else []


def run_main(
    main: Callable[[list[str]], int | None], flag_values: flags.FlagValues, argv=None, tensorflow: bool = True
) -> None:
    """Parses ``argv`` (default ``sys.argv``) into ``flag_values``, runs ``main`` and exits with its code.

    ``tensorflow``: import TensorFlow first, keeping its C++ start-up lines off stderr (unless verbose).
    """
    sys.exit(call_main(main, flag_values, sys.argv if argv is None else argv, tensorflow))


def call_main(
    main: Callable[[list[str]], int | None],
    flag_values: flags.FlagValues,
    argv: Sequence[str],
    tensorflow: bool = False,
) -> int:
    """`run_main` without ``sys.exit``: returns the exit code (see the module docstring)."""
    argv = list(argv)
    program = os.path.basename(argv[0]) if argv else "pbo_tf"
    if any(arg in HELP_ARGS for arg in argv[1:]):
        print(_help(main, flag_values))
        return EXIT_OK
    try:
        flag_values.unparse_flags()  # a second call in one process starts from the defaults
        rest = flag_values(argv)
    except flags.Error as e:
        print(f"{program}: error: {one_line(str(e))} (--help lists the flags)", file=sys.stderr)
        return EXIT_USAGE
    if not flags.FLAGS.is_parsed():  # absl's own logging flags: quiet "logging before flag parsing"
        flags.FLAGS.mark_as_parsed()
    verbose = bool(getattr(flag_values, "verbose", False)) or os.environ.get(VERBOSE_ENV, "") not in ("", "0")
    try:
        if tensorflow:
            import_tensorflow_quietly(verbose)
        import_modules(imported_modules(flag_values))
        return int(main(rest) or 0)
    except KeyboardInterrupt as e:
        if isinstance(e, Interrupted):
            print(f"{program}: {e.message}", file=sys.stderr)
            return e.exit_code
        how, code = interruption(e)
        how = "interrupted" if code == EXIT_INTERRUPTED else how
        print(f"{program}: {how} (the run folder keeps its last checkpoint)", file=sys.stderr)
        return code
    except Exception as e:  # every error becomes one line and an exit code
        code, message = describe(e)
        if verbose:
            traceback.print_exc()
        elif code == EXIT_INTERNAL:
            message += f" (run with --verbose or {VERBOSE_ENV}=1 for the traceback)"
        print(f"{program}: error: {message}", file=sys.stderr)
        return code


def describe(error: BaseException) -> tuple[int, str]:
    """The exit code and the one-line message of ``error`` (see the module docstring)."""
    message, configurables = unwrap_gin(str(error))
    where = f"{configurables[0]}: " if configurables else ""
    if configurables and message.startswith(f"{configurables[0]}."):  # it names its binding itself
        where = ""
    if isinstance(error, FloatingPointError):  # pbo_tf.trainers.base.DivergenceError
        return EXIT_DIVERGED, message
    usage = isinstance(error, _USAGE_ERRORS) or (configurables and isinstance(error, _CONFIG_CALL_ERRORS))
    if type(error).__name__ in ("UsageError", "MissingDependencyError"):  # absl.app's, pbo_tf.deps'
        usage = True
    required = _GIN_REQUIRED.search(message)
    if required:  # gin's error for a gin.REQUIRED parameter nothing binds
        names = ", ".join(f"{required.group(1)}.{p.strip(chr(39))}" for p in required.group(2).split(", "))
        return EXIT_USAGE, f"the gin config binds no value for the required {names}"
    if isinstance(error, KeyError) and message.startswith(("'", '"')):
        message = f"unknown key {message}"
    if usage:
        return EXIT_USAGE, where + message
    return EXIT_INTERNAL, f"{type(error).__name__}: {where}{message}"


def unwrap_gin(text: str) -> tuple[str, list[str]]:
    """Splits gin's decorations off an error message: ``(the message on one line, the configurables it was
    raised in, innermost first)``."""
    configurables = _GIN_CALL.findall(text)
    lines = [line for line in text.splitlines() if not line.strip().startswith(_GIN_EXTRA)]
    return one_line("\n".join(lines)), configurables


def import_tensorflow_quietly(verbose: bool = False) -> None:
    """Imports TensorFlow and lists its physical devices (which probes CUDA), with its C++ INFO / WARNING
    start-up lines (oneDNN, CUDA probing, ...) dropped from stderr, and its ``failed call to cuInit`` error
    too on a CPU run (`pbo_tf.tf_startup.cpu_run`: no NVIDIA driver, or every GPU hidden), where it says
    nothing wrong; every other line it prints is passed on, the cuInit failure of a run that could use a GPU
    included (`pbo_tf.tf_startup.shown`). A no-op when TensorFlow is already imported; ``verbose``: a plain
    import, every line shown.

    Listing the physical devices does not create TensorFlow's runtime context: threading and device options
    can still be set afterwards."""
    from pbo_tf import tf_startup

    if "tensorflow" in sys.modules:
        return
    tf_startup.uninstall_import_hook()  # (``import pbo_tf``'s, which does the same)
    if verbose:
        import tensorflow  # noqa: F401

        return

    def load():
        import tensorflow as tf

        tf.config.list_physical_devices()

    tf_startup.import_tensorflow_filtered(load)


def _shown(line: str, cpu_run: bool) -> bool:
    """Whether `import_tensorflow_quietly` passes on a line TensorFlow printed (`pbo_tf.tf_startup.shown`)."""
    from pbo_tf import tf_startup

    return tf_startup.shown(line, cpu_run)


def _cpu_run() -> bool:
    """`pbo_tf.tf_startup.cpu_run`."""
    from pbo_tf import tf_startup

    return tf_startup.cpu_run()


def one_line(text: str) -> str:
    """``text`` with its lines joined by spaces and runs of whitespace collapsed."""
    return re.sub(r"\s+", " ", text).strip() or "(no message)"


def _help(main, flag_values: flags.FlagValues) -> str:
    module = sys.modules.get(getattr(main, "__module__", ""), None)
    doc = (getattr(module, "__doc__", None) or "").strip()
    return f"{doc}\n\nflags:\n{flag_values.get_help()}" if doc else flag_values.get_help()
