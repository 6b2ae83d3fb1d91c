"""The command-line programs: `train`, `sweep`, `plot` and `play`, installed as the console scripts
``pbo-train``, ``pbo-sweep``, ``pbo-plot`` and ``pbo-play`` (``launch/<name>.py`` in a checkout runs the
same code), with their shared flag handling and one-line error reporting in `common`.

Each program module defines its flags on its own `absl.flags.FlagValues` (``FLAGS``), its work in
``run(argv)`` (callable in-process through `common.call_main`, as the tests do) and the console entry point
``main()``. Importing this package imports nothing else.
"""
