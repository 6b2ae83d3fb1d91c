"""TensorFlow's lines that say nothing wrong, kept off stderr at their source; every other line passes.

* **Start-up.** Importing TensorFlow prints C++ INFO / WARNING lines (oneDNN, CUDA probing, CPU
  instructions) that ``TF_CPP_MIN_LOG_LEVEL`` does not silence (they come before TensorFlow's logging is set
  up), and probing the devices prints an ERROR line ``failed call to cuInit`` on a machine where TensorFlow
  cannot use a GPU (`cpu_run`: no NVIDIA driver, or every GPU hidden), where it is no error.
  `install_import_hook` (called by ``import pbo_tf`` when the user set neither ``TF_CPP_MIN_LOG_LEVEL`` nor
  ``PBO_TF_VERBOSE``) makes the process's first import of TensorFlow, by pbo_tf or anyone, capture file
  descriptor 2 while TensorFlow loads and lists its physical devices (which probes CUDA without creating the
  runtime context), then print every captured line but those (`shown`). The launchers do the same
  (`pbo_tf.cli.common.import_tensorflow_quietly`).
* **TF-Agents' deprecation notices.** TF-Agents calls its own deprecated ``ReplayBuffer.get_next`` inside
  ``as_dataset`` and ``tf.foldr(..., back_prop=False)`` inside ``tf_agents.utils.value_ops``; TensorFlow logs
  a deprecation notice for each (nothing a user can change). `TFAgentsDeprecationFilter`, installed on the
  ``tensorflow`` logger by `install_tf_agents_filter` (`pbo_tf.experiments.online_collect` does), drops
  exactly those two, the second only when ``value_ops`` is on the call stack.

Standard library only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import re
import sys
import tempfile

#: TensorFlow's C++ start-up lines (INFO / WARNING level).
TF_NOISE = re.compile(
    r"^(?:[IW]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\]"  # glog-style INFO / WARNING lines
    r"|WARNING: All log messages before absl::|To enable the following instructions)"
)
#: TensorFlow's error line when its CUDA probe finds no GPU to use (dropped on a CPU run only).
CUINIT_FAILED = re.compile(r"^E\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] failed call to cuInit\b")


def cpu_run() -> bool:
    """Whether TensorFlow cannot use a GPU here: ``CUDA_VISIBLE_DEVICES`` hides every GPU (``""`` or
    ``"-1"``), or the NVIDIA driver library (``libcuda.so.1``, what ``cuInit`` needs) cannot be loaded.
    False off Linux (TensorFlow probes CUDA on Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    if os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return True
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return True
    return False


def shown(line: str, cpu: bool) -> bool:
    """Whether a line TensorFlow printed at start-up is passed on: not a start-up INFO / WARNING line, and
    not the ``failed call to cuInit`` error of a CPU run (``cpu``, `cpu_run`)."""
    return not (TF_NOISE.match(line) or (cpu and CUINIT_FAILED.match(line)))


def import_tensorflow_filtered(load) -> None:
    """Runs ``load()`` (what imports TensorFlow and lists its physical devices) with file descriptor 2
    captured, then prints the captured lines that `shown` passes on to stderr (also when ``load`` raises)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            load()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode("utf-8", "replace").splitlines()
            cpu = cpu_run()
            for line in lines:
                if shown(line, cpu):
                    print(line, file=sys.stderr)


class _FilteredLoader(importlib.abc.Loader):
    """Loads ``tensorflow`` with its real loader inside `import_tensorflow_filtered`, then probes devices."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        def load():
            self._loader.exec_module(module)
            module.config.list_physical_devices()  # the CUDA probe, inside the capture

        import_tensorflow_filtered(load)


class _TensorFlowImportHook(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` as the other finders do and wraps its loader (`_FilteredLoader`), once."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tensorflow":
            return None
        uninstall_import_hook()
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _FilteredLoader(spec.loader)
        return spec


_HOOK = _TensorFlowImportHook()


def install_import_hook() -> bool:
    """Makes the first import of TensorFlow filtered (see the module docstring); returns whether it did (not
    when TensorFlow is already imported)."""
    if "tensorflow" in sys.modules:
        return False
    if _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)
    return True


def uninstall_import_hook() -> None:
    """Removes the hook of `install_import_hook` (a no-op when it is not installed)."""
    while _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


class TFAgentsDeprecationFilter(logging.Filter):
    """Drops TensorFlow's deprecation notices about TF-Agents' own calls (see the module docstring)."""

    #: ``(text of the notice, a file that must be on the call stack, or None)``.
    NOTICES = (
        ("ReplayBuffer.get_next (from tf_agents.replay_buffers.replay_buffer) is deprecated", None),
        (
            "calling foldr_v2 (from tensorflow.python.ops.functional_ops) with back_prop=False is deprecated",
            os.path.join("tf_agents", "utils", "value_ops.py"),
        ),
        # seeds in one process: every seed's train-return metric traces its own TFDeque functions, which
        # TensorFlow reports as retracing one function ("5 out of the last 7 calls to <function TFDeque.mean")
        ("calls to <function TFDeque.", None),
    )

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        for text, caller in self.NOTICES:
            if text in message and (caller is None or _on_stack(caller)):
                return False
        return True


def _on_stack(suffix: str) -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(suffix):
            return True
        frame = frame.f_back
    return False


_FILTER = TFAgentsDeprecationFilter()


def install_tf_agents_filter() -> None:
    """Adds `TFAgentsDeprecationFilter` to the ``tensorflow`` logger (once)."""
    logger = logging.getLogger("tensorflow")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
