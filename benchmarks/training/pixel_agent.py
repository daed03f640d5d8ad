"""Pixel agent: SFT on CoTA traces, then CC-RFT, of a tiny text agent on the generated visual tasks.

Per training seed: SFT (configs/sft/tiny_cota.yaml) -> held-out evaluation -> CC-RFT from the SFT weights
(configs/rft/tiny_ccrft.yaml) in three variants: full, without curiosity (w_curiosity = 0), without
coherence (w_coherence = 0) -> evaluation of each. The data (CoTA traces, RL prompts, held-out tasks) is
drawn from fixed seeds; the training seed changes the model's initialisation and the sampling. Evaluation
is greedy, one trajectory per held-out task, and prints accuracy, chain length, RaPR / RaCPR
(``eval.process_metrics``: our reading), tool error rate and per-tool latency (calls that ran; repeated
calls are memoised), as mean and spread (max - min) over the seeds, then the acceptance lines: the tool
error rate after SFT (target < 10%) and CC-RFT minus SFT in accuracy and RaCPR against the seeds' spread.
``--ablation`` adds the single-tool ablation of the full CC-RFT model: each tool in turn answers with the
``disabled`` placeholder; the change in accuracy and RaCPR per tool.

    nice -n 10 python -m benchmarks.training.pixel_agent --seeds 0 1 2 --out outputs/pixel_agent.json   # acceptance
    python -m benchmarks.training.pixel_agent --quick                                                   # smoke run

A text model is used: the tiny Qwen2 of ``models.py`` sees the question and the observations; a VLM would
also be shown the ZOOM views (docs/agent.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")
ROOT = Path(__file__).resolve().parents[2]

import yaml  # noqa: E402

VARIANTS = {"ccrft": {}, "ccrft_no_curiosity": {"w_curiosity": 0.0},
            "ccrft_no_coherence": {"w_coherence": 0.0}}  # curiosity_coherence fields
METRICS = ("accuracy", "chain_length", "rapr", "racpr", "tool_error_rate")


def _config(path: Path, seed: int) -> dict:
    text = path.read_text().replace("${seed_everything}", str(seed))
    return yaml.safe_load(text)


def _rft_batch() -> int:
    """Prompts per CC-RFT step (configs/rft/tiny_ccrft.yaml)."""
    return int(_config(ROOT / "configs/rft/tiny_ccrft.yaml", 0)["data"]["init_args"]["batch_size"])


def _trainer(max_epochs=None, max_steps=-1, callbacks=()):
    import lightning.pytorch as pl

    return pl.Trainer(accelerator="cpu", devices=1, max_epochs=max_epochs, max_steps=max_steps, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0, limit_val_batches=0, callbacks=list(callbacks))


def evaluate(policy, tokenizer, rows, chains, cache, *, disabled=(), max_steps=4, max_turn_tokens=160):
    """Greedy agent rollouts on ``rows`` -> (``ProcessReport`` (accuracy, RaPR, RaCPR, ...), trajectories,
    accuracy per task family)."""
    from ttrl_lightning.eval.process_metrics import process_report
    from ttrl_lightning.rollout.agent import AgentEngine
    from ttrl_lightning.tools.agent_format import answers_match
    from ttrl_lightning.rollout.base import SamplingParams

    engine = AgentEngine(tokenizer, max_steps=max_steps, max_turn_tokens=max_turn_tokens, disabled=disabled,
                         cache=cache)
    trajs = []
    for i in range(0, len(rows), 16):
        part = rows[i:i + 16]
        greedy = SamplingParams(n=1, temperature=0.0)
        trajs += engine.generate(policy, [r["prompt"] for r in part], greedy).trajectories
    correct = [answers_match(t.answer, r["gold"]) for t, r in zip(trajs, rows)]
    kinds = sorted({r["kind"] for r in rows})
    per_kind = {k: statistics.fmean(c for c, r in zip(correct, rows) if r["kind"] == k) for k in kinds}
    return process_report(trajs, chains, correct), trajs, per_kind


def _report(rep, per_kind) -> dict:
    return {**rep.as_dict(), "per_kind": per_kind}


def run_seed(seed: int, args, eval_rows, chains, cache) -> dict:
    import torch

    from ttrl_lightning.callbacks import EMAAnchor, PIDKLController
    from ttrl_lightning.data.cota import AgentPromptDataModule, CoTADataModule
    from ttrl_lightning.modules import CCRFTModule, SFTModule

    out = {}
    sft_cfg = _config(ROOT / "configs/sft/tiny_cota.yaml", seed)
    kw = sft_cfg["model"]["init_args"]
    kw["policy"]["tiny_kwargs"]["hidden"] = args.hidden
    sft = SFTModule(**kw)
    data = dict(sft_cfg["data"]["init_args"], n_train=args.sft_traces)
    cached = (args.sft_dir / f"sft_seed{seed}_h{args.hidden}_e{args.sft_epochs}_n{args.sft_traces}.pt"
              if args.sft_dir else None)
    t0 = time.perf_counter()
    if cached is not None and cached.exists():  # the same SFT run, saved by an earlier call
        sft.configure_model()
        sft.policy.load_state_dict(torch.load(cached))
        print(f"  seed {seed} sft: weights from {cached}", flush=True)
    else:
        torch.manual_seed(seed)
        _trainer(max_epochs=args.sft_epochs).fit(sft, CoTADataModule(**data))
        if cached is not None:
            from ttrl_lightning.safe_files import atomic_write

            cached.parent.mkdir(parents=True, exist_ok=True)
            with atomic_write(cached, "wb") as f:
                torch.save(sft.policy.state_dict(), f)
    out["sft_seconds"] = time.perf_counter() - t0
    rep, _, per_kind = evaluate(sft.policy, sft.tokenizer, eval_rows, chains, cache)
    out["sft"] = _report(rep, per_kind)
    print(f"  seed {seed} sft ({out['sft_seconds']:.0f} s): {_line(out['sft'])}", flush=True)
    rft_cfg = _config(ROOT / "configs/rft/tiny_ccrft.yaml", seed)
    for name, change in VARIANTS.items():
        if name != "ccrft" and not args.variants:
            continue
        kw = dict(rft_cfg["model"]["init_args"])
        kw["curiosity_coherence"] = dict(kw["curiosity_coherence"], **change)
        kw["policy"] = dict(kw["policy"], tiny_kwargs=dict(kw["policy"]["tiny_kwargs"], hidden=args.hidden))
        kw["num_generations"] = kw["top_k_trajectories"] = args.n
        rft = CCRFTModule(**kw)
        rft.configure_model()
        rft.policy.load_state_dict(sft.policy.state_dict())
        rft.engine.cache = cache
        dm_kw = rft_cfg["data"]["init_args"]
        dm = AgentPromptDataModule(**dict(dm_kw, n_train=args.rft_steps * dm_kw["batch_size"]))
        cbs = [EMAAnchor(rho=0.99), PIDKLController(target=0.15, corridor=(0.10, 0.20))]
        t0 = time.perf_counter()
        torch.manual_seed(seed)
        _trainer(max_steps=args.rft_steps, callbacks=cbs).fit(rft, dm)
        out[f"{name}_seconds"] = time.perf_counter() - t0
        rep, _, per_kind = evaluate(rft.policy, rft.tokenizer, eval_rows, chains, cache)
        out[name] = _report(rep, per_kind)
        print(f"  seed {seed} {name} ({out[f'{name}_seconds']:.0f} s): {_line(out[name])}", flush=True)
        if name == "ccrft" and args.ablation:
            from ttrl_lightning.tools import TOOLS

            out["ablation"] = {}
            for tool in TOOLS.names():
                rep_t = evaluate(rft.policy, rft.tokenizer, eval_rows, chains, cache, disabled=(tool,))[0]
                out["ablation"][tool] = {"accuracy": rep_t.accuracy - rep.accuracy,
                                         "racpr": rep_t.racpr - rep.racpr}
    return out


def _line(d: dict) -> str:
    lat = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in d["latency"].items())
    return (f"acc {100 * d['accuracy']:.1f}  len {d['chain_length']:.2f}  RaPR {100 * d['rapr']:.1f}  "
            f"RaCPR {100 * d['racpr']:.1f}  tool err {100 * d['tool_error_rate']:.1f}%  latency: {lat}")


def _stats(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (max(values) - min(values)) if len(values) > 1 else 0.0


def summarise(results: dict[int, dict]) -> dict:
    stages = [s for s in ["sft", *VARIANTS] if all(s in r for r in results.values())]
    print(f"\n{'stage':<20}" + "".join(f"{m:>22}" for m in METRICS) + "   (mean ± spread over seeds, x100)")
    table = {}
    for stage in stages:
        row = {}
        for m in METRICS:
            scale = 1 if m == "chain_length" else 100
            row[m] = _stats([scale * r[stage][m] for r in results.values()])
        tools = sorted({t for r in results.values() for t in r[stage]["latency"]})
        row["latency_ms"] = {t: statistics.fmean([1000 * r[stage]["latency"][t] for r in results.values()
                                                  if t in r[stage]["latency"]]) for t in tools}
        table[stage] = row
        print(f"{stage:<20}" + "".join(f"{row[m][0]:>14.2f} ± {row[m][1]:<5.2f}" for m in METRICS))
    for stage in stages:
        lat = table[stage]["latency_ms"]
        print(f"latency {stage}: " + ", ".join(f"{t} {v:.0f} ms" for t, v in lat.items()))
    verdict = {}
    if "sft" in table:
        err, calls = table["sft"]["tool_error_rate"][0], table["sft"]["chain_length"][0]
        ok = err < 10 and calls > 0  # no call at all is no tool use, not a low error rate
        verdict["sft_tool_error_rate_below_10"] = ok
        print(f"\nacceptance: tool error rate after SFT {err:.1f}% over {calls:.2f} calls per task "
              f"(target < 10%, with calls): {'PASS' if ok else 'FAIL'}")
    if "sft" in table and "ccrft" in table:
        # paired by seed (each CC-RFT run starts from its seed's SFT weights): the mean gain against the spread
        # of the per-seed gains; and, stricter, against the larger of the two stages' spreads
        for m in ("accuracy", "racpr"):
            gains = [100 * (r["ccrft"][m] - r["sft"][m]) for r in results.values()]
            delta, paired = _stats(gains)
            spread = max(table["ccrft"][m][1], table["sft"][m][1])
            verdict[f"ccrft_{m}_gain_exceeds_paired_spread"] = delta > paired
            verdict[f"ccrft_{m}_gain_exceeds_stage_spread"] = delta > spread
            print(f"acceptance: CC-RFT - SFT {m}: {delta:+.2f} (x100; per seed "
                  f"{', '.join(f'{g:+.1f}' for g in gains)}) vs the spread of the per-seed gains {paired:.2f}: "
                  f"{'PASS' if delta > paired else 'FAIL'}; vs the stages' spread {spread:.2f}: "
                  f"{'PASS' if delta > spread else 'FAIL'}")
    for stage in stages:
        kinds = sorted(next(iter(results.values()))[stage].get("per_kind", {}))
        if kinds:
            print(f"accuracy per task family, {stage}: " + ", ".join(
                f"{k} {100 * statistics.fmean(r[stage]['per_kind'][k] for r in results.values()):.0f}"
                for k in kinds))
    abl = [r["ablation"] for r in results.values() if "ablation" in r]
    if abl:
        print("\nsingle-tool ablation of CC-RFT (change vs all tools, x100): tool  accuracy  RaCPR")
        for tool in abl[0]:
            print(f"  {tool:<5} {100 * statistics.fmean(a[tool]['accuracy'] for a in abl):+8.2f} "
                  f"{100 * statistics.fmean(a[tool]['racpr'] for a in abl):+8.2f}")
    return {"table": table, "verdict": verdict}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--sft-epochs", type=int, default=36)
    p.add_argument("--sft-traces", type=int, default=280)
    p.add_argument("--rft-steps", type=int, default=20)
    p.add_argument("--n", type=int, default=8, help="trajectories per prompt (= top-K)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--n-eval", type=int, default=140, help="held-out tasks (cycling through the 7 families)")
    p.add_argument("--sft-dir", type=Path, help="keep each seed's SFT weights here and reuse them on a rerun "
                   "with the same SFT settings")
    p.add_argument("--eval-seed", type=int, default=1000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-variants", dest="variants", action="store_false",
                   help="skip the runs without curiosity / coherence")
    p.add_argument("--ablation", action="store_true", help="single-tool ablation of the CC-RFT model")
    p.add_argument("--quick", action="store_true", help="smoke settings: 1 seed, 1 SFT epoch, 2 RFT steps")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.sft_epochs, args.sft_traces, args.rft_steps = args.seeds[:1], 1, 28, 2
        args.n, args.n_eval, args.variants = 2, 14, False
    import torch

    torch.set_num_threads(args.threads)
    from ttrl_lightning.data.cota import agent_prompts, text_chain
    from ttrl_lightning.data.scenes import make_tasks
    from ttrl_lightning.rollout.agent import ToolCache

    eval_rows = agent_prompts(args.eval_seed, args.n_eval)
    chains = [[name for name, _ in text_chain(t)] for t in make_tasks(args.eval_seed, args.n_eval)]
    cache = ToolCache()
    print(f"pixel agent: seeds {args.seeds}, SFT {args.sft_epochs} epochs on {args.sft_traces} traces, "
          f"CC-RFT {args.rft_steps} steps x {_rft_batch()} prompts x {args.n}, {args.n_eval} held-out tasks, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    results = {s: run_seed(s, args, eval_rows, chains, cache) for s in args.seeds}
    summary = summarise(results)
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    if args.out:
        from ttrl_lightning.safe_files import atomic_write

        args.out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(args.out) as f:
            json.dump({"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                       "results": results, **summary}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
