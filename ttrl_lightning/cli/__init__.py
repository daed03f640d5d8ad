"""The ``ttrl`` command: one module per subcommand and this dispatcher.

Subcommands are registered by name (``SUBCOMMANDS``) and imported lazily, so ``ttrl bon`` never pays for
importing Lightning or transformers. Each entry is ``name -> ("module:function", one-line help)``; the
function takes the remaining argv list and returns an exit code.

========== ===================================== ==========================================
command    module                                what it does
========== ===================================== ==========================================
bon        :mod:`ttrl_lightning.cli.bon`         best-of-N evaluation of a rollout pool
pool       :mod:`ttrl_lightning.cli.pool`        simulate / validate / convert rollout pools
fit        :mod:`ttrl_lightning.cli.fit`         training (LightningCLI), every phase
validate   :mod:`ttrl_lightning.cli.fit`         validation with a training config
demo       :mod:`ttrl_lightning.cli.demo`        the README's main job (CPU)
========== ===================================== ==========================================

``python -m ttrl_lightning.cli <command> ...`` is the same command without the console script (what
``torchrun -m`` and ``srun python -m`` launch). Packaged configs are found with
:func:`ttrl_lightning.cli.configs.config_path`.
"""
from __future__ import annotations

import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    # name: ("module:function", one-line help)
    "bon": ("ttrl_lightning.cli.bon:bon_main", "best-of-N evaluation of selection methods on a rollout pool"),
    "pool": ("ttrl_lightning.cli.pool:pool_main", "rollout pools: `ttrl pool simulate|validate|convert`"),
    "fit": ("ttrl_lightning.cli.fit:fit_main", "train (LightningCLI): `ttrl fit --config configs/<phase>/<name>.yaml`"),
    "validate": ("ttrl_lightning.cli.fit:validate_main", "validate a model with a training config (LightningCLI)"),
    "demo": ("ttrl_lightning.cli.demo:demo_main", "the README's main job on the embedded default (CPU)"),
}


def _usage() -> str:
    lines = ["usage: ttrl <command> [options]", "", "commands:"]
    for name, (_, help_) in SUBCOMMANDS.items():
        lines.append(f"  {name:<10} {help_}")
    lines.append("")
    lines.append("`ttrl <command> --help` for the options of one command.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run ``ttrl <command> ...``; ``argv`` defaults to ``sys.argv[1:]``. Returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help"}:
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"ttrl: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    target, _ = SUBCOMMANDS[name]
    module_name, fn_name = target.split(":")
    fn = getattr(importlib.import_module(module_name), fn_name)
    rc = fn(rest)
    return int(rc or 0)
