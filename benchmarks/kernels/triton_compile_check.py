"""Compile every Triton kernel of ttrl_lightning.ops, for every configuration its launcher can choose, for
sm_80 / sm_89 / sm_90 with the installed Triton, on a machine without a GPU; print one table row per
(kernel, architecture): configurations compiled, the largest shared memory a block needs against the
architecture's opt-in limit, and whether the launchers' shared-memory bounds held.

Meant for checking another Triton version than the development one (the target GPU image runs Triton 3.6),
in a scratch environment with that version, torch and this repository on PYTHONPATH:

    python -m venv /tmp/tr36 && /tmp/tr36/bin/pip install torch triton==3.6.0 numpy
    PYTHONPATH=. /tmp/tr36/bin/python -m benchmarks.kernels.triton_compile_check --out outputs/triton_compile_3.6.json

``--quick`` compiles the default test's set (one configuration per kernel and architecture). Exit code 1
when any configuration fails to compile or does not fit; the JSON lists every configuration.
"""
from __future__ import annotations

import argparse
import sys
import time

from benchmarks.common import write_json


def check(arch_names, kernels, exhaustive):
    """One record per configuration: label, shared bytes (None when the compile failed), bound, error."""
    from ttrl_lightning.ops.triton_compile import ARCHITECTURES, compile_config, launch_configs

    records = []
    for arch_name in arch_names:
        arch = ARCHITECTURES[arch_name]
        for config in launch_configs(arch, exhaustive=exhaustive, kernels=kernels):
            t0 = time.perf_counter()
            rec = dict(kernel=config.name, arch=arch.name, label=config.label, limit=arch.shared_limit,
                       bound=config.bound, options=config.options, shared=None, error=None)
            try:
                rec["shared"] = int(compile_config(config, arch).metadata.shared)
            except Exception as e:  # noqa: BLE001 - a compiler error is a result to report
                rec["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
            rec["seconds"] = round(time.perf_counter() - t0, 2)
            rec["fits"] = rec["shared"] is not None and rec["shared"] <= arch.shared_limit
            rec["bound_holds"] = rec["shared"] is not None and (config.bound is None or rec["shared"] <= config.bound)
            records.append(rec)
            if not (rec["fits"] and rec["bound_holds"]):
                print(f"[FAIL] {config.name} {arch.name} {config.label}: shared={rec['shared']} "
                      f"limit={arch.shared_limit} bound={config.bound} {rec['error'] or ''}", flush=True)
    return records


def summary(records):
    rows = {}
    for r in records:
        row = rows.setdefault((r["kernel"], r["arch"]), dict(n=0, failed=0, max_shared=0, limit=r["limit"],
                                                             seconds=0.0, bounds="n/a"))
        row["n"] += 1
        row["seconds"] += r["seconds"]
        row["failed"] += not (r["fits"] and r["bound_holds"])
        row["max_shared"] = max(row["max_shared"], r["shared"] or 0)
        if r["shared"] is None:
            row["bounds"] = "no cubin"
        elif r["bound"] is not None and row["bounds"] not in ("EXCEEDED", "no cubin"):
            row["bounds"] = "held" if r["bound_holds"] else "EXCEEDED"
    lines = [f"{'kernel':<30}{'arch':<7}{'configs':>8}{'failed':>8}{'max shared B':>14}{'limit B':>10}"
             f"{'bounds':>10}{'compile s':>11}"]
    for (kernel, arch), row in rows.items():
        lines.append(f"{kernel:<30}{arch:<7}{row['n']:>8}{row['failed']:>8}{row['max_shared']:>14}"
                     f"{row['limit']:>10}{row['bounds']:>10}{row['seconds']:>11.1f}")
    return "\n".join(lines)


def main(argv=None):
    from ttrl_lightning.ops.triton_compile import ARCHITECTURES, KERNELS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--archs", default=",".join(ARCHITECTURES), help="comma-separated, default: all")
    p.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated, default: all")
    p.add_argument("--quick", action="store_true", help="one configuration per kernel and architecture")
    p.add_argument("--out", default=None, help="JSON with every configuration's result")
    args = p.parse_args(argv)
    import torch
    import triton

    print(f"triton {triton.__version__}, torch {torch.__version__}, python {sys.version.split()[0]}; "
          f"{'quick' if args.quick else 'exhaustive'} set", flush=True)
    t0 = time.perf_counter()
    records = check(args.archs.split(","), args.kernels.split(","), exhaustive=not args.quick)
    print(summary(records))
    failed = [r for r in records if not (r["fits"] and r["bound_holds"])]
    print(f"{len(records) - len(failed)} of {len(records)} configurations compiled within the shared-memory "
          f"limit and the launchers' bounds ({time.perf_counter() - t0:.0f} s)")
    if args.out:
        write_json(args.out, dict(triton=triton.__version__, torch=torch.__version__, records=records))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
