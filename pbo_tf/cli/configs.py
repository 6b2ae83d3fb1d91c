r"""Lists the gin configs shipped with pbo_tf, each with its one-line description.

  pbo-configs [--filter=car_on_hill]

(or ``python launch/configs.py`` in a checkout). One line
per ``.gin`` file under the shipped configs (`pbo_tf.experiments.config.GIN_CONFIGS_DIR`), its name as
``pbo-train --gin_file`` takes it, then the first sentence of the file's opening comment (cut at 110
characters). No TensorFlow is imported.
"""

from __future__ import annotations

import os
import re

from absl import flags

from pbo_tf.cli import common as cli

FLAGS = flags.FlagValues()
_FILTER = flags.DEFINE_string(
    "filter", None, "Only the configs whose name contains this text (e.g. car_on_hill).", flag_values=FLAGS
)
cli.define_common_flags(FLAGS)

#: The longest description printed; a longer first sentence is cut with "…".
MAX_DESCRIPTION = 110


def configs_dir() -> str:
    """The shipped gin configs' folder (`pbo_tf.experiments.config.GIN_CONFIGS_DIR`)."""
    from pbo_tf.experiments.config import GIN_CONFIGS_DIR

    return GIN_CONFIGS_DIR


def description(path: str) -> str:
    """The first sentence of the gin file's opening comment block (its ``#`` lines before anything else),
    cut at `MAX_DESCRIPTION` characters; ``""`` when the file opens with no comment."""
    lines = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            stripped = line.strip()
            if not stripped.startswith("#"):
                break
            lines.append(stripped.lstrip("#").strip())
    text = " ".join(part for part in lines if part)
    match = re.match(r"(.+?[.!?])(?=\s+[A-Z]|\s*$)", text)  # not "Sec. 6.1" nor "Eq. (4)"
    sentence = match.group(1) if match else text
    if len(sentence) > MAX_DESCRIPTION:
        sentence = sentence[: MAX_DESCRIPTION - 1].rstrip() + "…"
    return sentence


def shipped_configs(root: str | None = None) -> list[tuple[str, str]]:
    """``(name relative to the configs folder, description)`` of every ``.gin`` file under ``root`` (default:
    the shipped configs), sorted by name."""
    root = configs_dir() if root is None else root
    out = []
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".gin"):
                path = os.path.join(folder, name)
                out.append((os.path.relpath(path, root).replace(os.sep, "/"), description(path)))
    return sorted(out)


def listing(filter_text: str | None = None, root: str | None = None) -> list[str]:
    """The lines `run` prints: one per config (`shipped_configs`) whose name contains ``filter_text``."""
    configs = [(n, d) for n, d in shipped_configs(root) if not filter_text or filter_text in n]
    width = max((len(n) for n, _ in configs), default=0)
    return [f"{name:<{width}}  {text}".rstrip() for name, text in configs]


def run(argv: list[str]) -> int:
    """Prints the list (``argv``: the arguments left after the flags)."""
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    lines = listing(_FILTER.value)
    if not lines:
        raise ValueError(f"no shipped gin config's name contains {_FILTER.value!r}")
    print(f"Gin configs under {configs_dir()} (pass a name to pbo-train --gin_file):")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> None:
    """The ``pbo-configs`` console script: parses ``argv`` (default ``sys.argv``), runs, exits."""
    cli.run_main(run, FLAGS, argv, tensorflow=False)


if __name__ == "__main__":
    main()
