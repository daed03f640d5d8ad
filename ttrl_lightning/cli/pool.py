"""``ttrl pool``: make, check and convert rollout pools.

* ``ttrl pool simulate --out pool.jsonl [--questions 500 ...]`` writes a **synthetic** pool (see
  :mod:`ttrl_lightning.data.simulate`; its numbers describe selection rules, not models);
* ``ttrl pool validate pool.jsonl`` checks every record against the schema and prints a summary;
* ``ttrl pool convert in.jsonl out.parquet`` converts between JSONL and Parquet;
* ``ttrl pool merge a.jsonl b.jsonl --out pool.parquet [--data questions.jsonl]`` joins pools of disjoint
  questions (the data-parallel ranks of ``ttrl generate``), checking the ids
  (:func:`ttrl_lightning.generate.merge_pool_files`).

Options are parsed strictly (:mod:`.arguments`: ``--reframed flase`` is refused, not ``False``), the
simulation's settings are checked before anything is drawn, a file is never converted onto itself, and pool
files are written atomically (:func:`ttrl_lightning.data.pool.write_records`), so a failed or interrupted
command leaves an existing output byte-identical.
"""
from __future__ import annotations

import argparse
import dataclasses
import re

from ..data.pool_files import UNKNOWN_SETTINGS_FLAG
from ..data.simulate import SimulationConfig
from ..errors import UserError
from ..safe_files import same_file
from .arguments import EXIT_CODES, CommandParser, finite_float, integer, positive_int, seed, strict_bool

DESCRIPTION = """Rollout pools (one JSON record per question with its rollouts; see README 'Rollout pools').

  ttrl pool simulate --out pool.jsonl [--questions 500 ...]   write a synthetic pool
  ttrl pool validate pool.jsonl                               check a pool file, print a summary
  ttrl pool convert in.jsonl out.parquet                      convert between .jsonl and .parquet
  ttrl pool merge a.jsonl b.jsonl --out pool.parquet          join pools of disjoint questions

`ttrl pool <subcommand> --help` for the options of one subcommand. Outputs are written to a temporary file
renamed into place, so a failed run never damages an existing file."""

#: Pool files the commands write: the extension picks the format.
POOL_EXTENSIONS = (".jsonl", ".parquet")

#: Flag and help of every :class:`~ttrl_lightning.data.simulate.SimulationConfig` field (``ttrl pool
#: simulate``); the type comes from the field's default (int, float, bool), the range from
#: ``SimulationConfig.validate``.
SIMULATION_OPTIONS: dict[str, tuple[str, str]] = {
    "num_questions": ("--questions", "questions (records) in the pool, >= 1"),
    "rollouts": ("--rollouts", "rollouts per question and view, >= 1"),
    "tokens": ("--tokens", "the longest rollout in tokens (lengths are uniform in [tokens // 2, tokens]); "
                           "in [2, 32767]"),
    "correct_rate": ("--correct-rate", "mean correct-answer prevalence m of the Beta(k m, k (1 - m)) "
                                       "draw per question, in (0, 1)"),
    "concentration": ("--concentration", "concentration k of that Beta draw, > 0"),
    "num_distractors": ("--num-distractors", "wrong answers per question, >= 1"),
    "wrong_alpha": ("--wrong-alpha", "Dirichlet parameter of the wrong-answer distribution, > 0 (small: "
                                     "one dominant wrong answer, the majority-vote trap)"),
    "no_answer_rate": ("--no-answer-rate", "probability that a rollout has no extractable answer, in [0, 1]"),
    "wrong_view_stability": ("--wrong-view-stability", "share s of the original view's wrong-answer "
                                                       "distribution kept in the reframed view, in [0, 1]"),
    "signal_strength": ("--signal-strength", "how strongly the per-token signals follow correctness"),
    "token_noise": ("--token-noise", "standard deviation of the per-token noise, >= 0"),
    "reframed": ("--reframed", "also draw a reframed view (true/false, yes/no, 1/0)"),
    "seed": ("--seed", "seed of every draw"),
}


def _option_type(name: str, default):
    """The strict argparse type of a simulation setting."""
    if name == "seed":
        return seed
    if isinstance(default, bool):
        return strict_bool
    if isinstance(default, int):
        return positive_int if name in ("num_questions", "rollouts", "num_distractors") else integer
    return finite_float


def _pool_file(flag: str):
    """argparse type: a path ending in .jsonl or .parquet (the extension picks the written format)."""
    def check(text: str) -> str:
        if not text.endswith(POOL_EXTENSIONS):
            raise argparse.ArgumentTypeError(f"a pool file ends in .jsonl or .parquet, got {text!r}")
        return text
    check.__name__ = flag
    return check


def _simulate_parser(sub) -> CommandParser:
    p = sub.add_parser("simulate", help="write a synthetic pool", epilog=EXIT_CODES,
                       description="Write a synthetic rollout pool: its numbers describe selection rules,\n"
                                   "not a model (the generative model: ttrl_lightning/data/simulate.py).")
    p.add_argument("--out", required=True, type=_pool_file("--out"), metavar="FILE",
                   help="the pool file to write, .jsonl or .parquet")
    defaults = SimulationConfig()
    for f in dataclasses.fields(SimulationConfig):
        flag, help_ = SIMULATION_OPTIONS[f.name]
        value = getattr(defaults, f.name)
        p.add_argument(flag, dest=f.name, type=_option_type(f.name, value), default=value, help=help_,
                       metavar="BOOL" if isinstance(value, bool) else flag[2:].upper().replace("-", "_"))
    return p


def _simulation_config(parser: CommandParser, args: argparse.Namespace) -> SimulationConfig:
    """The parsed settings, checked by ``SimulationConfig.validate``; its message names flags, not fields."""
    cfg = SimulationConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SimulationConfig)})
    try:
        cfg.validate()
    except UserError as e:
        pattern = re.compile(r"\b(" + "|".join(SIMULATION_OPTIONS) + r")\b")
        parser.error(pattern.sub(lambda m: SIMULATION_OPTIONS[m.group(1)][0], str(e)))
    return cfg


def build_parser() -> tuple[CommandParser, dict[str, CommandParser]]:
    """The ``ttrl pool`` parser and its subcommands' parsers by name."""
    parser = CommandParser(prog="ttrl pool", description=DESCRIPTION, epilog=EXIT_CODES)
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="{simulate,validate,convert,merge}",
                                help="what to do (`ttrl pool SUBCOMMAND --help` for its options)")
    subs = {"simulate": _simulate_parser(sub)}
    v = sub.add_parser("validate", help="check a pool file against the schema", epilog=EXIT_CODES,
                       description="Check every record of a pool file (the rules of README 'Rollout pools';\n"
                                   "the loader of `ttrl bon`) and print a summary; a refused file is one\n"
                                   "line naming the file, the record and the field.")
    v.add_argument("path", metavar="FILE", help="the pool file, .jsonl or .parquet")
    subs["validate"] = v
    c = sub.add_parser("convert", help="convert between .jsonl and .parquet", epilog=EXIT_CODES,
                       description="Convert a pool file between JSONL and Parquet (the extension of DST\n"
                                   "picks the format), validating every record. DST is replaced only when\n"
                                   "every record was converted; SRC and DST must be different files.")
    c.add_argument("src", metavar="SRC", help="the pool file to read, .jsonl or .parquet")
    c.add_argument("dst", metavar="DST", type=_pool_file("DST"),
                   help="the pool file to write, .jsonl or .parquet")
    subs["convert"] = c
    m = sub.add_parser("merge", help="join pools of disjoint questions", epilog=EXIT_CODES,
                       description="Join pools of disjoint questions (the ranks of a data-parallel `ttrl\n"
                                   "generate`) into one, validating every record. An id in two inputs is\n"
                                   "refused; with --data every question of that file must be present once\n"
                                   "and nothing else, and the merged pool follows the file's order.")
    m.add_argument("pools", nargs="+", metavar="POOL", help="the pool files to join, .jsonl or .parquet")
    m.add_argument("--out", required=True, type=_pool_file("--out"), metavar="FILE",
                   help="the merged pool, .jsonl or .parquet")
    m.add_argument("--data", default=None, metavar="QUESTIONS",
                   help="the question file the pools were sampled from: check that they cover it exactly")
    m.add_argument(UNKNOWN_SETTINGS_FLAG, action="store_true",
                   help="merge pools that carry no settings (written by other tools) too; the merged pool "
                        "then has none. Without it such a pool is refused: nothing could say it was made "
                        "with the same model, engine and sampling as the others")
    subs["merge"] = m
    return parser, subs


def pool_main(argv: list[str]) -> int:
    parser, subs = build_parser()
    args = parser.parse_args(argv)

    from ..data.pool import (check_settings_match, load_pool, pool_to_records, read_records, read_settings,
                             write_records)
    from ..data.simulate import simulate_pool

    if args.cmd == "simulate":
        cfg = _simulation_config(subs["simulate"], args)
        pool = simulate_pool(cfg)
        write_records(pool_to_records(pool), args.out, {"simulated": dataclasses.asdict(cfg)})
        print(f"wrote a synthetic pool of {pool.num_questions} questions x {cfg.rollouts} rollouts"
              f"{' x 2 views' if cfg.reframed else ''} to {args.out}")
    elif args.cmd == "validate":
        pool = load_pool(args.path)
        settings = read_settings(args.path)
        check_settings_match(pool, settings, args.path)
        r0, r1 = pool.num_rollouts_in_view(0), pool.num_rollouts_in_view(1)
        correct = pool.class_correct.gather(1, pool.answer_class[:, 0].clamp_min(0)).float().mean()
        print(f"{args.path}: OK - {pool.num_questions} questions, {r0} original / {r1} reframed rollouts "
              f"each, "
              f"per-token signals: {sorted(pool.signals) or 'none'}, "
              f"share of correct original-view rollouts: {100 * float(correct):.1f}%")
        print(f"settings: {_settings_line(settings)}")
    elif args.cmd == "merge":
        _merge(subs["merge"], args)
    else:
        if same_file(args.src, args.dst):  # before anything is opened for writing
            subs["convert"].error(f"{args.src!r} and {args.dst!r} are the same file; converting a file onto "
                                  "itself would destroy it")
        settings = read_settings(args.src)
        write_records(read_records(args.src), args.dst, settings)
        print(f"converted {args.src} -> {args.dst} ({'with its settings' if settings else 'no settings'})")
    return 0


def _settings_line(settings: dict | None) -> str:
    """The settings a pool carries, in one line (the ones that decide its rollouts first)."""
    if settings is None:
        return f"none (written by another tool: `ttrl pool merge` needs {UNKNOWN_SETTINGS_FLAG} for it)"
    if "simulated" in settings:
        return "a simulated pool (" + ", ".join(f"{k}={v}" for k, v in sorted(settings["simulated"].items())) + ")"
    first = ("model", "engine", "n", "views", "temperature", "top_p", "top_k", "max_new_tokens", "seed")
    keys = [k for k in first if k in settings] + sorted(k for k in settings if k not in first and
                                                        not k.endswith("sha256"))
    return ", ".join(f"{k}={settings[k]}" for k in keys)


def _merge(parser: CommandParser, args: argparse.Namespace) -> None:
    """``ttrl pool merge``: inputs distinct, neither they nor ``--data`` the output, then
    :func:`merge_pool_files`."""
    from ..generate.merge import merge_pool_files

    for i, path in enumerate(args.pools):
        if same_file(path, args.out):
            parser.error(f"argument --out: {args.out!r} is also an input; merging into an input would "
                         "destroy it")
        for other in args.pools[:i]:
            if same_file(path, other):
                parser.error(f"argument POOL: {path!r} is given twice")
    expected = None
    if args.data is not None:
        from ..data.questions import read_questions

        if same_file(args.data, args.out):
            parser.error(f"argument --out: {args.out!r} is the question file --data; merging into it would "
                         "destroy it")
        expected = [q["id"] for q in read_questions(args.data)]
    count = merge_pool_files(args.pools, args.out, expected, allow_unknown_settings=args.allow_unknown_settings)
    print(f"merged {len(args.pools)} pools ({count} questions) into {args.out}")
