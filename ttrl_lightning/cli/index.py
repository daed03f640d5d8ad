"""``ttrl index``: check an exemplar index file (:mod:`ttrl_lightning.retrieval`).

* ``ttrl index audit INDEX [--probes 10000] [--k 8] [--seed 0] [--evaluation-ids FILE]`` probes random
  queries and fails (exit 3, one line per offending id) when a whitelisted, blocked, inactive or listed
  evaluation id appears in a top-K (Pixelis appendix 11, "Audit procedure");
* ``ttrl index info INDEX`` prints the index's settings and counts.

A file that is not an exemplar index, is corrupt or inconsistent is a user error (exit 1) naming it.
"""
from __future__ import annotations

import collections
import json
import os

from ..errors import UserError
from .arguments import EXIT_CODES, CommandParser, positive_int, seed

#: Exit code of a failed audit (an offender was returned).
EXIT_AUDIT_FAILED = 3

DESCRIPTION = """Exemplar index files (see docs/retrieval.md).

  ttrl index audit INDEX [--probes 10000] [--k 8]   random probes; fails if a forbidden id is returned
  ttrl index info INDEX                             settings and counts"""


def read_id_list(path: str) -> list[str]:
    """Ids from a file: a JSON list of strings, or one id per line (blank lines and ``#`` comments
    skipped). A UTF-8 byte-order mark is dropped (an editor's BOM would otherwise glue itself to the first id,
    which then matches nothing); a NUL byte is refused (one line naming its line), for the same reason."""
    try:
        with open(path, encoding="utf-8-sig") as fh:
            text = fh.read()
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    nul = next((text.index(s) for s in ("\0", "\\u0000") if s in text), None)  # raw, or escaped in JSON
    if nul is not None:
        line = text[:nul].count("\n") + 1
        raise UserError(f"{path}: a NUL byte on line {line}; an id with one would match nothing: remove it")
    if text.lstrip().startswith("["):
        try:
            ids = json.loads(text)
        except ValueError as error:
            raise UserError(f"{path}: not a JSON list of ids ({error})") from None
        bad = [i for i, x in enumerate(ids) if not isinstance(x, str) or not x] \
            if isinstance(ids, list) else [0]
        if bad:
            raise UserError(f"{path}: entry {bad[0]} is not a non-empty string id")
        return ids
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def build_parser() -> CommandParser:
    parser = CommandParser(prog="ttrl index", description=DESCRIPTION,
                           epilog=EXIT_CODES.replace("  130", f"  {EXIT_AUDIT_FAILED}    the audit found "
                                                     "offenders (listed on stdout)\n  130"))
    subs = parser.add_subparsers(dest="cmd", required=True, parser_class=CommandParser)
    audit = subs.add_parser("audit", help="probe random queries; fail if a forbidden id is returned",
                            description="Probe random queries (half random directions, half noisy stored "
                                        "keys) and list every whitelisted, blocked, inactive or "
                                        "--evaluation-ids id returned in a top-K.")
    audit.add_argument("index", help="index file written by ExemplarIndex.save")
    audit.add_argument("--probes", type=positive_int, default=10_000, help="random queries")
    audit.add_argument("--k", type=positive_int, default=8, help="neighbours per query (Pixelis K = 8)")
    audit.add_argument("--seed", type=seed, default=0, help="seed of the probes")
    audit.add_argument("--evaluation-ids", default=None,
                       help="file of evaluation ids (JSON list or one per line) that must never be returned")
    info = subs.add_parser("info", help="settings and counts of an index file")
    info.add_argument("index", help="index file written by ExemplarIndex.save")
    return parser


def index_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from ..retrieval import ExemplarIndex, audit_index

    if os.path.isdir(args.index):
        raise IsADirectoryError(21, "is a directory, not an index file", args.index)
    index = ExemplarIndex.load(args.index)
    if args.cmd == "info":
        print(f"{args.index}: {len(index)} searchable of {len(index.ids)} stored keys, dim {index.dim}, "
              f"factory {index.factory!r} -> {index.resolved_factory or 'not trained'}, "
              f"nprobe {index.nprobe}, "
              f"re-rank {index.rerank}, whitelist {len(index.whitelist)}, blocklist {len(index.blocklist)}")
        return 0
    extra = read_id_list(args.evaluation_ids) if args.evaluation_ids else []
    report = audit_index(index, probes=args.probes, k=args.k, seed=args.seed, evaluation_ids=extra)
    if report.passed:
        print(f"{args.index}: OK - {report.probes} probes x top-{report.k} over {report.items} items: no "
              f"whitelisted, blocked or evaluation id returned")
        return 0
    counts = collections.Counter((item, reason) for _, item, reason in report.offenders)
    print(f"{args.index}: FAILED - {len(counts)} offending id(s) in {len(report.offenders)} hits over "
          f"{report.probes} probes x top-{report.k}:")
    for (item, reason), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {item}\t{reason}\t{n} hit(s)")
    return EXIT_AUDIT_FAILED
