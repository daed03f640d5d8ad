"""The ``ttrl`` command.

Subcommands are registered by name (``SUBCOMMANDS``) and imported lazily, so ``ttrl bon`` never pays for
importing Lightning or transformers. Each entry is ``name -> "module:function"``; the function takes the
remaining argv list and returns an exit code.
"""
from __future__ import annotations

import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    # name: ("module:function", one-line help)
    "bon": ("ttrl_lightning.eval.cli:bon_main", "best-of-N evaluation of selection methods on a rollout pool"),
    "pool": ("ttrl_lightning.data.cli:pool_main", "rollout pools: `ttrl pool simulate|validate|convert`"),
    "fit": ("ttrl_lightning.training_cli:fit_main", "train (LightningCLI): `ttrl fit --config configs/<phase>/<name>.yaml`"),
    "validate": ("ttrl_lightning.training_cli:validate_main", "validate a model with a training config (LightningCLI)"),
    "demo": ("ttrl_lightning.demo:demo_main", "the README's main job on the embedded default (CPU)"),
}


def _usage() -> str:
    lines = ["usage: ttrl <command> [options]", "", "commands:"]
    for name, (_, help_) in SUBCOMMANDS.items():
        lines.append(f"  {name:<10} {help_}")
    lines.append("")
    lines.append("`ttrl <command> --help` for the options of one command.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
