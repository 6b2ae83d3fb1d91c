"""Runs a `benchmarks/` program's ``main`` in the test's process on a command line: its flags defined (as its
``define_flags`` defines them when it runs as a program) and parsed in a flag set of their own, not absl's
global one. A subprocess would run the same ``main`` after its own interpreter and TensorFlow start."""

import functools
import types

from absl import flags


def run_main(module, argv: list[str], monkeypatch) -> None:
    """``module.main`` on the command line ``argv`` (without the program name); ``monkeypatch`` restores the
    module's ``flags`` and ``FLAGS`` afterwards."""
    values = flags.FlagValues()
    shim = {
        name: functools.partial(getattr(flags, name), flag_values=values)
        for name in dir(flags)
        if name.startswith(("DEFINE", "mark_flag"))
    }
    monkeypatch.setattr(module, "flags", types.SimpleNamespace(**shim))
    module.define_flags()
    values([module.__file__, *argv])
    monkeypatch.setattr(module, "FLAGS", values)
    module.main([module.__file__])
