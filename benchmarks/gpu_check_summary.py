"""The one summary table of benchmarks/gpu_check.sh, from the files its steps left in a log folder:

* ``<step>.rc``: the step's exit code, ``dry`` (a dry run only printed its command) or ``skipped``;
* ``check_<backend>.json`` (benchmarks/kernels/gpu_kernel_check.py): correctness per backend and dtype;
* ``token_stats.json`` / ``attention_mass.json`` (the two benchmarks): memory and time ratios.

    python benchmarks/gpu_check_summary.py LOG_DIR [--out summary.md] [--json summary.json]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

DTYPES = ("float32", "bfloat16", "float16")


def _load(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def step_status(log_dir):
    """step name -> ``ok`` / ``rc=N`` / ``timeout`` / ``dry`` / ``skipped`` / ``no exit code``, in the order the
    steps were started (the ``steps`` file), else by name."""
    try:
        names = open(os.path.join(log_dir, "steps")).read().split()
    except OSError:
        names = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(log_dir, "*.rc")))
    out = {}
    for name in names:
        try:
            raw = open(os.path.join(log_dir, f"{name}.rc")).read().strip()
        except OSError:
            out[name] = "no exit code"
            continue
        out[name] = {"0": "ok", "124": "timeout", "137": "timeout"}.get(raw, raw if raw in ("dry", "skipped")
                                                                        else f"rc={raw}")
    return out


def correctness_rows(log_dir, steps):
    rows = []
    for backend in ("triton", "cuda", "torch"):
        step = f"check_{backend}"
        report = _load(os.path.join(log_dir, f"{step}.json"))
        for dtype in DTYPES:
            if report is None:
                rows.append((backend, dtype, {"dry": "not run (dry run)", "skipped": "not run (time budget)"}.get(
                    steps.get(step, "missing"), f"no result ({steps.get(step, 'missing')})"), ""))
                continue
            r = report["results"][dtype]
            status = "PASS" if not r["failures"] else "FAIL"
            where = f"{report['device']}{' quick' if report.get('quick') else ''}"
            first = r["failures"][0][:90] if r["failures"] else ""
            rows.append((backend, dtype, f"{status} {r['cases'] - len(r['failures'])}/{r['cases']} ({where})", first))
    return rows


def benchmark_rows(log_dir, steps):
    rows = []
    stats = _load(os.path.join(log_dir, "token_stats.json"))
    if stats:
        for name, r in stats["results"].items():
            if name != "materialised":
                rows.append(("token_stats", name, f"memory {r['mem_ratio']:.4f}x, time {r['time_ratio']:.3f}x",
                             "vs materialised logits"))
    else:
        rows.append(("token_stats", "-", f"no result ({steps.get('bench_token_stats', 'missing')})", ""))
    attn = _load(os.path.join(log_dir, "attention_mass.json"))
    if attn:
        res = attn["results"]
        flash = next((res[n] for n in ("flash_attn2_no_mass", "sdpa_flash_no_mass") if n in res), None)
        for name, r in res.items():
            if name == "sdpa_no_mass":
                continue
            extra = f", {r['median_s'] / flash['median_s']:.3f}x of flash" if flash and name.startswith("ours") else ""
            rows.append(("attention_mass", name, f"time {r['paired_ratio_vs_sdpa']:.3f}x paired{extra}",
                         "vs SDPA without mass"))
    else:
        rows.append(("attention_mass", "-", f"no result ({steps.get('bench_attention_mass', 'missing')})", ""))
    gen = _load(os.path.join(log_dir, "generate_signals.json"))
    if gen:
        for name in ("ours", "eager"):
            r = gen["candidates"][name]
            rows.append(("generate_signals", name, f"time {r['paired_ratio_vs_plain']:.3f}x paired",
                         "vs plain generate"))
    else:
        rows.append(("generate_signals", "-", f"no result ({steps.get('bench_generate_signals', 'missing')})", ""))
    engines = _load(os.path.join(log_dir, "rollout_engines.json"))
    if engines:
        ratios = engines["sampling"]["ratios"]
        rows.append(("rollout_engines", "vllm", f"tokens/s {min(ratios):.2f}-{max(ratios):.2f}x paired",
                     "hf generate"))
    else:
        rows.append(("rollout_engines", "-", f"no result ({steps.get('bench_vllm', 'missing')})", ""))
    probe = _load(os.path.join(log_dir, "vllm_vlm_probe.json"))
    engine = (probe or {}).get("engine") or {}
    if "max_logprob_gap" in engine:
        rows.append(("vllm_vlm", "vllm images", f"log-prob gap {engine['max_logprob_gap']:.2e} "
                     f"({'PASS' if engine['engine_ok'] else 'FAIL'} < {engine['tolerance']:.0e})",
                     "policy with the images"))
    else:
        why = f"failed at {probe['stage']}" if probe and not probe.get("ok") else steps.get("vllm_vlm", "missing")
        rows.append(("vllm_vlm", "-", f"no result ({why})", ""))
    return rows


def render(log_dir):
    steps = step_status(log_dir)
    lines = ["## steps", "", "| step | status |", "|---|---|"]
    lines += [f"| {name} | {status} |" for name, status in steps.items()]
    lines += ["", "## correctness per backend and dtype", "", "| backend | dtype | result | first failure |",
              "|---|---|---|---|"]
    lines += [f"| {b} | {d} | {s} | {f} |" for b, d, s, f in correctness_rows(log_dir, steps)]
    lines += ["", "## benchmarks (ratios)", "", "| benchmark | candidate | ratio | baseline |", "|---|---|---|---|"]
    lines += [f"| {b} | {c} | {r} | {base} |" for b, c, r, base in benchmark_rows(log_dir, steps)]
    return "\n".join(lines), steps


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log_dir")
    p.add_argument("--out", default=None, help="write the table (markdown) here too")
    p.add_argument("--json", default=None, help="write step statuses and rows as JSON")
    args = p.parse_args(argv)
    table, steps = render(args.log_dir)
    print(table)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(table + "\n")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"steps": steps, "correctness": correctness_rows(args.log_dir, steps),
                       "benchmarks": benchmark_rows(args.log_dir, steps)}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
