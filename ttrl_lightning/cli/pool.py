"""``ttrl pool``: make, check and convert rollout pools.

* ``ttrl pool simulate --out pool.jsonl [--questions 500 ...]`` writes a **synthetic** pool (see
  :mod:`ttrl_lightning.data.simulate`; its numbers describe selection rules, not models);
* ``ttrl pool validate pool.jsonl`` checks every record against the schema and prints a summary;
* ``ttrl pool convert in.jsonl out.parquet`` converts between JSONL and Parquet.
"""
from __future__ import annotations

import argparse
import dataclasses

from ..data.simulate import SimulationConfig


def _simulate_parser(sub) -> None:
    p = sub.add_parser("simulate", help="write a synthetic pool", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", required=True, help=".jsonl or .parquet")
    defaults = SimulationConfig()
    for f in dataclasses.fields(SimulationConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "num_questions":
            flag = "--questions"
        value = getattr(defaults, f.name)
        if isinstance(value, bool):
            p.add_argument(flag, dest=f.name, type=lambda s: s.lower() in {"1", "true", "yes"}, default=value)
        else:
            p.add_argument(flag, dest=f.name, type=type(value), default=value)


def pool_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ttrl pool", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    _simulate_parser(sub)
    v = sub.add_parser("validate", help="check a pool file against the schema")
    v.add_argument("path")
    c = sub.add_parser("convert", help="convert between .jsonl and .parquet")
    c.add_argument("src")
    c.add_argument("dst")
    args = parser.parse_args(argv)

    from ..data.pool import load_pool, pool_to_records, read_records, write_records
    from ..data.simulate import simulate_pool

    if args.cmd == "simulate":
        cfg = SimulationConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SimulationConfig)})
        pool = simulate_pool(cfg)
        write_records(pool_to_records(pool), args.out)
        print(f"wrote a synthetic pool of {pool.num_questions} questions x {cfg.rollouts} rollouts"
              f"{' x 2 views' if cfg.reframed else ''} to {args.out}")
    elif args.cmd == "validate":
        pool = load_pool(args.path)
        r0, r1 = pool.num_rollouts_in_view(0), pool.num_rollouts_in_view(1)
        correct = pool.class_correct.gather(1, pool.answer_class[:, 0].clamp_min(0)).float().mean()
        print(f"{args.path}: OK - {pool.num_questions} questions, {r0} original / {r1} reframed rollouts each, "
              f"per-token signals: {sorted(pool.signals) or 'none'}, "
              f"share of correct original-view rollouts: {100 * float(correct):.1f}%")
    else:
        write_records(read_records(args.src), args.dst)
        print(f"converted {args.src} -> {args.dst}")
    return 0
