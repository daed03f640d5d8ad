"""``ttrl demo --part vlm``: a vision-language model improves itself without labels, on CPU, with no download.

1. Question files of generated glance questions (``data.scenes.SCENE_TASKS``' glance family: "What colour is the object?",
   one large object alone on a 112-pixel canvas), here the shifted kind ``tinted_object_colour`` (the object's
   colour mixed 15-40% toward another palette colour, still nearest its own), three disjoint splits
   (``data.splits``): the unlabeled questions the TTRL runs train on, held-out questions for the validation
   curve, and a labelled dev-cal split for pixel's calibration.
2. ``ttrl fit --config configs/sft/tiny_vlm.yaml``: SFT of a tiny random Qwen2-VL on untinted scenes
   (``object_colour``, ``data.scene_qa``, none of the three splits), answering directly (``The answer is
   red.``), a quarter of its training answers wrong (``label_noise``), so that its votes disagree while their
   majority is mostly right.
3. avg@k / maj@k of the SFT model on the trained-on and the held-out split, each sample with its image.
4. ``ttrl fit --config configs/ttrl/tiny_vlm_demo.yaml`` per arm and seed from the SFT checkpoint: test-time RL
   on the unlabeled split with ``majority``, ``visconf`` (VisConf's Z = V * C, visual engagement recorded
   while sampling times calibrated self-certainty, labelled by Rank-Weighted Consensus), ``pixel``, and the
   two controls ``random_reward`` (a coin per vote) and ``gold_reward`` (the gold answers: RLVR's upper bound);
   then the same accuracy again.

It prints a table (per arm, the mean over seeds of avg@k and maj@k before -> after, the gain and the seeds'
spread max - min, label accuracy and token-KL P95), saves ``vlm_accuracy.png`` (held-out avg@k over steps, step
0 the SFT model, one line per arm, mean over seeds) and writes ``vlm_report.json``.
"""
from __future__ import annotations

import os
import time
from typing import Any

from .configs import config_path
from .demo_runs import curve_mean, fit_in_process, logged_curves, run_sft, seed_args

#: the controls: a coin per vote, and the gold answers (RLVR's upper bound)
VLM_CONTROLS = ("random_reward", "gold_reward")
#: the arms: three pseudo-labelers and the two controls
VLM_ARMS = ("majority", "visconf", "pixel", *VLM_CONTROLS)
VLM_SFT_CONFIG = "sft/tiny_vlm.yaml"
VLM_TTRL_CONFIG = "ttrl/tiny_vlm_demo.yaml"
__all__ = ["VLM_ARMS", "VLM_CONTROLS", "run_vlm_demo", "vlm_table", "plot_vlm_curves", "write_vlm_questions"]
#: the question kind of the TTRL splits (the SFT's kind is in its config: ``object_colour``, untinted)
VLM_KIND = "tinted_object_colour"
#: the number of questions in each TTRL split
VLM_SPLITS = {"train": 64, "validation": 64, "calibration": 32}
#: the scene seed of the TTRL splits (the SFT draws from the run seed's scenes and skips every one of them)
SPLIT_SEED_OFFSET = 1000


def write_vlm_questions(out: str, seed_value: int, sizes: dict[str, int] = VLM_SPLITS) -> dict[str, str]:
    """The three question files (module docstring, step 1) under ``out/questions/<split>/``; their paths."""
    from ..generate.scene_questions import write_scene_questions

    paths: dict[str, str] = {}
    for name, n in sizes.items():
        paths[name] = write_scene_questions(os.path.join(out, "questions", name), n, seed_value + SPLIT_SEED_OFFSET,
                                            kinds=(VLM_KIND,), exclude=list(paths.values()))
    return paths


def vlm_accuracy(checkpoint_or_model, path: str, k: int, temperature: float, top_p: float, max_new_tokens: int,
                 seed_value: int, tokenizer=None, processor=None) -> dict[str, float]:
    """avg@k / maj@k / pass@k on the question file ``path``, every sample with its image, prompts as TTRL and
    ``ttrl eval`` format them (the processor's chat template)."""
    from ..answers import ANSWER_EXTRACTORS
    from ..data.questions import read_questions
    from ..eval.sampled import evaluate_sampled
    from ..models import load_model, load_processor, load_tokenizer
    from ..rollout import SamplingParams
    from ..rollout.requests import PromptRenderer

    if isinstance(checkpoint_or_model, str):
        tokenizer = load_tokenizer(checkpoint_or_model)
        processor = load_processor(checkpoint_or_model)
        model = load_model(checkpoint_or_model, tokenizer)
    else:
        model = checkpoint_or_model
    questions = read_questions(path)
    params = SamplingParams(n=k, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                            seed=seed_value)
    metrics, _ = evaluate_sampled(model.eval(), tokenizer, questions, k, params, batch_size=16, progress=True,
                                  extract=ANSWER_EXTRACTORS["final_answer"], processor=processor,
                                  renderer=PromptRenderer(tokenizer, processor, "chat", source=path))
    return {"avg": metrics.avg_at_k, "maj": metrics.maj_at_k, "pass": metrics.pass_at_k}


def _spread(values: list[float]) -> float:
    return max(values) - min(values) if values else 0.0


def run_vlm_demo(out: str, arms: list[str], seed_value: int, seeds: list[int], sft_steps: int | None = None,
                 ttrl_steps: int | None = None, sft_checkpoint: str | None = None,
                 sizes: dict[str, int] = VLM_SPLITS) -> dict[str, Any]:
    """Steps 1-4 of the module docstring; returns the report. ``seed_value`` seeds the questions, the SFT and
    the evaluation's sampling, ``seeds`` the TTRL runs (one per arm and seed); ``sizes``: the questions per
    split; ``sft_checkpoint``: start from it instead of an SFT run."""
    from .fit import parse_config

    t0 = time.perf_counter()
    paths = write_vlm_questions(out, seed_value, sizes)
    print(f"== 1/4  glance questions ({VLM_KIND}): "
          + ", ".join(f"{n} {name}" for name, n in sizes.items()) + f", under {os.path.join(out, 'questions')}",
          flush=True)
    ckpt = sft_checkpoint
    print("\n== 2/4  ttrl fit: SFT of a tiny Qwen2-VL on other, untinted scenes, a quarter of its answers wrong"
          + (f" -- reusing {ckpt}" if ckpt else ""), flush=True)
    if ckpt is None:
        ckpt = run_sft(VLM_SFT_CONFIG, os.path.join(out, "sft"), seed_value, sft_steps,
                       ["--data.init_args.exclude", str(list(paths.values()))])
    t_sft = time.perf_counter() - t0

    config = parse_config(["--config", config_path(VLM_TTRL_CONFIG)])
    h = config.model.init_args
    k, temperature, top_p = h.eval.k, h.eval.temperature, h.eval.top_p
    acc_kw = dict(k=k, temperature=temperature, top_p=top_p, max_new_tokens=h.sampling.max_new_tokens,
                  seed_value=seed_value)
    print(f"\n== 3/4  accuracy of the SFT model ({k} samples per question at T={temperature})", flush=True)
    before = {split: vlm_accuracy(ckpt, paths[split], **acc_kw) for split in ("train", "validation")}
    for split, acc in before.items():
        print(f"{split}: avg@{k} {100 * acc['avg']:.1f}%  maj@{k} {100 * acc['maj']:.1f}%", flush=True)

    report: dict[str, Any] = {
        "settings": {"seed": seed_value, "seeds": seeds, "k": k, "temperature": temperature, "top_p": top_p,
                     "kind": VLM_KIND, "splits": dict(sizes), "sft_checkpoint": ckpt, "ttrl_config": VLM_TTRL_CONFIG,
                     "num_votes": h.voting.num_votes, "num_trained": h.voting.num_trained},
        "before": before, "arms": {}, "seconds": {"sft": round(t_sft, 1)},
    }
    total = len(arms) * len(seeds)
    run = 0
    for arm in arms:
        runs = []
        for s in seeds:
            run += 1
            print(f"\n== 4/4  run {run}/{total}: ttrl fit with `{arm}`, seed {s}", flush=True)
            t1 = time.perf_counter()
            args = ["--config", config_path(VLM_TTRL_CONFIG), "--model.init_args.policy.model", ckpt,
                    "--model.init_args.voting.labeler", arm, *seed_args(s, seed_value),
                    "--data.init_args.path", paths["train"], "--data.init_args.val_path", paths["validation"],
                    "--data.init_args.calibration_path", paths["calibration"],
                    "--trainer.default_root_dir", os.path.join(out, "ttrl", arm, f"seed{s}")]
            if ttrl_steps:
                args += ["--trainer.max_steps", str(ttrl_steps)]
            cli = fit_in_process(args)
            module = cli.model
            after = {split: vlm_accuracy(module.policy, paths[split], tokenizer=module.tokenizer,
                                         processor=module.processor, **acc_kw) for split in ("train", "validation")}
            curves = logged_curves(cli.trainer)
            labelled = arm not in VLM_CONTROLS  # a control's "label" is a coin or the gold answer
            runs.append({"seed": s, "after": after,
                         "label_accuracy": curve_mean(curves.get("train/label_accuracy", [])) if labelled else None,
                         "coverage": curve_mean(curves.get("train/coverage", [])) if labelled else None,
                         "kl_p95": curve_mean(curves.get("train/kl_p95", [])), "steps": int(cli.trainer.global_step),
                         "curve": [(0, before["validation"]["avg"])] + next(
                             (v for key, v in curves.items() if key.startswith("val/avg@")), []),
                         "seconds": round(time.perf_counter() - t1, 1)})
            print(f"{arm} seed {s}: trained-on avg@{k} {100 * before['train']['avg']:.1f}% -> "
                  f"{100 * after['train']['avg']:.1f}%, held-out {100 * before['validation']['avg']:.1f}% -> "
                  f"{100 * after['validation']['avg']:.1f}% ({runs[-1]['seconds']:.0f} s)", flush=True)
        report["arms"][arm] = summarise_arm(runs, before)
    report["seconds"]["total"] = round(time.perf_counter() - t0, 1)
    return report


def summarise_arm(runs: list[dict], before: dict) -> dict[str, Any]:
    """Means over seeds of the after accuracies, the gains over ``before`` and the seeds' spreads."""
    out: dict[str, Any] = {"runs": runs}
    for split in ("train", "validation"):
        for metric in ("avg", "maj"):
            values = [r["after"][split][metric] for r in runs]
            mean = sum(values) / len(values)
            out[f"{split}_{metric}"] = mean
            out[f"{split}_{metric}_gain"] = mean - before[split][metric]
            out[f"{split}_{metric}_spread"] = _spread(values)
    for key in ("label_accuracy", "coverage", "kl_p95"):
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = sum(values) / len(values) if values else None
    return out


def vlm_table(report: dict) -> str:
    """The printed table: per arm, means over seeds (gain, spread) on the trained-on and held-out splits."""
    k = report["settings"]["k"]
    before = report["before"]
    pct = lambda v: "  n/a" if v is None else f"{100 * v:5.1f}"  # noqa: E731
    head = (f"{'arm':<14} {'trained-on avg@' + str(k) + ' (gain, spread)':>32} {'maj@' + str(k):>7} "
            f"{'held-out avg@' + str(k) + ' (gain, spread)':>32} {'maj@' + str(k):>7} {'label acc':>9} {'KL P95':>7}")
    lines = [head, "-" * len(head)]
    lines.append(f"{'SFT model':<14} {pct(before['train']['avg']):>32} {pct(before['train']['maj']):>7} "
                 f"{pct(before['validation']['avg']):>32} {pct(before['validation']['maj']):>7}")
    for arm, e in report["arms"].items():
        cell = lambda s: (f"{pct(e[s + '_avg'])} ({100 * e[s + '_avg_gain']:+5.1f}, "  # noqa: E731
                          f"{100 * e[s + '_avg_spread']:4.1f})")
        kl = "n/a" if e["kl_p95"] is None else format(e["kl_p95"], ".3f")
        lines.append(f"{arm:<14} {cell('train'):>32} {pct(e['train_maj']):>7} {cell('validation'):>32} "
                     f"{pct(e['validation_maj']):>7} {pct(e['label_accuracy']):>9} {kl:>7}")
    return "\n".join(lines)


def plot_vlm_curves(report: dict, path: str) -> None:
    """Held-out avg@k over TTRL steps, mean over seeds per arm (step 0: the SFT model)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..safe_files import atomic_write_path

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for arm, entry in report["arms"].items():
        by_step: dict[int, list[float]] = {}
        for r in entry["runs"]:
            for step, value in r["curve"]:
                by_step.setdefault(int(step), []).append(value)
        steps = sorted(by_step)
        ax.plot(steps, [100 * sum(by_step[s]) / len(by_step[s]) for s in steps], marker=".", label=arm)
    ax.set_xlabel("TTRL step")
    ax.set_ylabel(f"held-out avg@{report['settings']['k']} (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_write_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
