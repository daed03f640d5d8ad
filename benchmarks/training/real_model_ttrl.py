"""A real pretrained model under test-time RL without labels (it may improve or collapse): TTRL arms on
SmolLM2-135M-Instruct with reasoning-gym tasks, against a random-reward and a gold-reward control.

Every split is cut from one pool of distinct questions per candidate (``data.splits``, seed 0, the instruction
appended): the scan, the trained-on, the held-out and pixel's calibration split of a trained task, and the
other task's evaluation split share no question (by normalised prompt text). The script prints the splits'
sizes and pairwise overlaps and refuses to run when any overlap is not 0; a candidate too small for its splits
is one error naming how many distinct questions it has (``chain_sum`` 2 x 1: 200).

0. **Warm-up (``--warmup``, SRT's curriculum).** Gold-reward RL from ``--model`` on an easier level (say
   ``chain_sum:2x1``) with the config's settings; its policy, saved under ``<out>/warmup/checkpoint``, is where
   the scan, the table's checkpoint row and every arm (the gold control too) start. Its questions are a split
   like the others: they share none with the harder level's splits (checked).
1. **Scan, before any training.** Every ``--candidates`` task (a reasoning-gym generator and difficulty, with the
   run's instruction, temperature and token budget) is sampled ``--k`` times on its ``--n-scan`` scan questions;
   a task is in TTRL's regime when maj@k - avg@k >= 10 points, 15% <= avg@k <= 60% and majority TTRL's step-0
   reward accuracy (``SampledMetrics.reward_accuracy``) is at least 0.7 (``real_model_scan.in_regime``). The
   runs train on the first ``--max-tasks`` tasks in the regime; the first candidate outside it is the "other
   task" nobody trains on.
2. **Question files** (``ttrl questions`` form): per trained task the unlabeled training split (``--n-train``;
   by default every question of the task the other splits leave), the held-out split and a labelled dev-cal
   split for pixel; the other task's evaluation split.
3. **Arms**, each ``ttrl fit --config configs/ttrl/real_smollm2.yaml`` from the same checkpoint, ``--seeds``
   seeds each (the seed drives sampling, data order and the random rewards; ``--votes``, ``--trained``,
   ``--temperature``, ``--lr``, ``--batch-size`` override the config's recipe): ``majority``, ``self_harmony``
   (its reframe instruction inside the chat model's user turn; M/2 + M/2 votes, N/2 + N/2 trained: the same
   rows per question), ``pixel`` (text form), ``self_certainty`` (Intuitor-like), ``random_reward``
   (Bernoulli 0.5: Spurious Rewards' control, arXiv 2506.10947) and ``gold_reward`` (RLVR with the true
   answers: the upper bound); on request ``visconf`` (text form) and majority with one collapse guard each:
   ``majority+gate_negative`` (SCRL's gate, RESTRAIN's negative branch), ``majority+max_share`` (SeRL),
   ``soft_majority`` (SRT), ``majority+fixed_adv`` (DDRL), and ``majority+max_share+fixed_adv`` (both); and
   ``pixel+coverage_0.9``, pixel at the paper's operating point (its dev-cal questions 90% answered).
4. **Evaluation** of the checkpoint and of every run's final policy with the same sampling seed: avg@k and maj@k
   on the trained-on questions (TTRL's protocol), on the held-out split of the same task and on the other
   task. Per run also the wall time per step, the peak resident memory, the commit and the CPU's float
   features (every sitting of a ``--resume``d study is recorded), label accuracy (mean of the per-step
   ``train/label_accuracy``, over the questions each step labelled), token-KL P95 (mean of the per-step P95),
   sampled vote tokens per second of training and wall time; per step the trained-on vote accuracy
   (``train/vote_accuracy``: avg@M of the batch's votes).

Prints the scan, then one row per arm (means over seeds; gain = after - before, spread = max - min of the
seeds' avg@k after), then the issue's checks: majority's trained-on gain against the seeds' spread and the
random-reward arm's gain, and whether gold reward bounds the table. Writes ``real_model_ttrl.json`` (rewritten
after every run; ``--resume`` keeps the runs already in it and continues an unfinished run from the
``last.ckpt`` it saves every ``--save-every`` steps, so a study spans sittings losing at most that many steps
of a run) and ``real_model_ttrl.png`` (vote accuracy, KL P95 and, with --val-every, the held-out curve from
the checkpoint at step 0, validated as each seed's runs validate, over steps per arm: means over seeds, the
held-out one with its min-max band).

    ttrl model import --out models/smollm2
    python -m benchmarks.training.real_model_ttrl --model models/smollm2                  # the default, about 1.5 h here
    python -m benchmarks.training.real_model_ttrl --model models/smollm2 --arms majority random_reward --seeds 0
    python -m benchmarks.training.real_model_ttrl --model models/smollm2 --report-only   # the tables of the runs so far
    python -m benchmarks.training.real_model_ttrl --model models/smollm2 --warmup chain_sum:2x1 \
        --candidates chain_sum:3x1 chain_sum:2x2 basic_arithmetic:2x1 --votes 16 --trained 8 --temperature 1.0 \
        --lr 1e-6 --arms majority majority+gate_negative random_reward gold_reward --seeds 0 --resume

Hyper-parameters are the config's and were not tuned on any split (lr is TTRLModule's default). Numbers from
this script describe a 135M-parameter model on procedural arithmetic, nothing larger.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

from benchmarks.common import peak_rss_gb, provenance
from benchmarks.training.real_model_scan import CANDIDATES, in_regime
from ttrl_lightning.cli.demo_runs import curve_mean

CONFIG = "ttrl/real_smollm2.yaml"
#: arm -> (its labeler, its ``ttrl fit`` options beyond the config's); the guard arms are majority with one guard
#: of the 2025-26 literature each (docs/ttrl.md, "Collapse guards")
GATE = '{"min_share": 0.5, "min_margin": 0.15}'  # SCRL's consensus gate
MAX_SHARE = ["--model.init_args.voting.options", '{"max_share": 0.8}']  # SeRL / RCSU: drop locked questions
FIXED_ADV = ["--model.init_args.advantage.rule", "fixed"]  # DDRL's fixed +-1 advantages
ARMS: dict[str, tuple[str, list[str]]] = {
    "majority": ("majority", []),
    "self_harmony": ("self_harmony", ["--model.init_args.voting.num_votes", "{half_votes}",
                                      "--model.init_args.voting.num_trained", "{half_generations}"]),
    "pixel": ("pixel", []),
    # Pixelis supp. S8's operating point: the conformal level fitted so that the dev-cal questions are 90% answered
    # (at the default alpha 0.1 this model's threshold is 1 and pixel labels unanimous questions only)
    "pixel+coverage_0.9": ("pixel", ["--model.init_args.voting.options", '{"target_coverage": 0.9}']),
    "visconf": ("visconf", []),
    "self_certainty": ("self_certainty", []),
    # SCRL's gate; a question failing it is trained by RESTRAIN's negative branch (reward 0, advantage -delta;
    # delta 0.5: RESTRAIN's value is not stated in what we could read)
    "majority+gate_negative": ("majority", ["--model.init_args.voting.options", GATE,
                                            "--model.init_args.advantage.negative_shift", "0.5"]),
    "majority+max_share": ("majority", MAX_SHARE),
    "soft_majority": ("soft_majority", []),  # SRT's soft reward, TTRV
    "majority+fixed_adv": ("majority", FIXED_ADV),
    # the combination: the two guards that each raised majority's held-out accuracy in the seed-0 screen (README)
    "majority+max_share+fixed_adv": ("majority", MAX_SHARE + FIXED_ADV),
    "random_reward": ("random_reward", []),
    "gold_reward": ("gold_reward", []),
}
#: the arms run when --arms is not given: the papers' labelers and both controls (the guards are asked for)
DEFAULT_ARMS = ["majority", "self_harmony", "pixel", "self_certainty", "random_reward", "gold_reward"]
#: the per-step metrics kept per run (the plot's and the table's)
CURVES = ("train/vote_accuracy", "train/label_accuracy", "train/kl_p95", "train/vote_tokens", "train/coverage",
          "train/majority_ratio", "train/completion_len", "train/flip_rate", "train/reward_accuracy")
#: the seed of every candidate's question stream: all its splits are cut from it (data.splits)
QUESTION_SEED = 0
#: the trained-on questions a large task gives by default (--n-train)
MAX_TRAIN = 256
INSTRUCTION = "Answer with just the number."
#: --engine -> the engine spec of the runs and the evaluation (vLLM's context sized to the short prompts)
ENGINES = {"hf": "hf", "vllm": {"name": "vllm", "max_model_len": 256}}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a local checkpoint folder (ttrl model import --out DIR)")
    p.add_argument("--out", default="outputs/bench/real_model_ttrl")
    p.add_argument("--candidates", nargs="+", choices=sorted(CANDIDATES),
                   default=["chain_sum:2x1", "basic_arithmetic:2x1", "chain_sum:3x1"])
    p.add_argument("--max-tasks", type=int, default=1, help="tasks in the regime trained on (the first ones)")
    p.add_argument("--train-on", nargs="+", choices=sorted(CANDIDATES), default=None,
                   help="train on these candidates whatever the scan says (the scan is still run and printed)")
    p.add_argument("--arms", nargs="+", choices=list(ARMS), default=DEFAULT_ARMS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--n-scan", type=int, default=24, help="scan questions per candidate")
    p.add_argument("--n-train", type=int, default=None,
                   help="unlabeled training questions per trained task (default: all that the other splits leave, "
                        f"at most {MAX_TRAIN})")
    p.add_argument("--n-eval", type=int, default=24, help="questions of the held-out and other-task splits")
    p.add_argument("--n-calibration", type=int, default=16, help="pixel's labelled dev-cal questions")
    p.add_argument("--k", type=int, default=16, help="samples per question in the scan and the evaluation")
    p.add_argument("--epochs", type=int, default=2, help="epochs over the training split")
    p.add_argument("--instruction", default=INSTRUCTION, help="appended to every prompt ('' for none)")
    p.add_argument("--engine", choices=sorted(ENGINES), default="hf", help="rollout engine of the scan, the evaluation and the runs "
                   "(hf: measured faster than vllm on a 2-core CPU; vllm on a GPU)")
    p.add_argument("--val-every", type=int, default=4,
                   help="steps between held-out evaluations during a run (the long-horizon curve; 0: none)")
    p.add_argument("--val-k", type=int, default=8, help="samples per held-out question in those evaluations")
    p.add_argument("--resume", action="store_true",
                   help="keep the runs already in --out's JSON, and continue an unfinished run from its last.ckpt")
    p.add_argument("--fit-option", action="append", default=[], metavar="OPTION",
                   help="one more `ttrl fit` option for the warm-up and every run, repeatable, e.g. a memory lever "
                        "(--fit-option=--model.init_args.grpo.reference_storage=disk); recorded in the settings")
    p.add_argument("--save-every", type=int, default=8, metavar="STEPS",
                   help="a run saves last.ckpt every STEPS steps, for --resume (0: never; deleted when the run ends)")
    c = p.add_argument_group("curriculum (SRT's protocol: gold-reward RL on an easier level, then label-free TTRL "
                             "on a harder one)")
    c.add_argument("--warmup", choices=sorted(CANDIDATES), default=None,
                   help="first train the model with the gold reward on this candidate's questions (the config's "
                        "settings); the scan, the checkpoint row and every arm (the gold control too) start from "
                        "the warmed-up policy. It may not also be a --candidates entry")
    c.add_argument("--warmup-epochs", type=int, default=2, help="epochs over the warm-up's questions")
    c.add_argument("--n-warmup", type=int, default=None,
                   help=f"the warm-up's questions (default: all its level has besides its held-out split, at most "
                        f"{MAX_TRAIN})")
    r = p.add_argument_group("recipe (default: configs/ttrl/real_smollm2.yaml's values); the scan and the "
                             "evaluation sample at the runs' temperature")
    r.add_argument("--votes", type=int, default=None, help="votes per question (TTRL: 64)")
    r.add_argument("--trained", type=int, default=None, help="votes trained on per question (TTRL: 32)")
    r.add_argument("--temperature", type=float, default=None, help="sampling temperature (TTRL: 1.0)")
    r.add_argument("--lr", type=float, default=None, help="the policy's learning rate (recipes: 5e-7 to 1e-6)")
    r.add_argument("--batch-size", type=int, default=None, help="questions per step")
    return p


#: --votes, ... -> the ``ttrl fit`` options they set (the evaluation's temperature follows the sampling's)
RECIPE = {"votes": ["--model.init_args.voting.num_votes"], "trained": ["--model.init_args.voting.num_trained"],
          "temperature": ["--model.init_args.sampling.temperature", "--model.init_args.eval.temperature"],
          "lr": ["--model.init_args.policy.lr"], "batch_size": ["--data.init_args.batch_size"]}


def recipe_args(args) -> list[str]:
    """The ``ttrl fit`` options of the recipe settings given on the command line."""
    out: list[str] = []
    for name, options in RECIPE.items():
        value = getattr(args, name)
        if value is not None:
            out += [x for o in options for x in (o, str(value))]
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from ttrl_lightning.cli.allocator import return_large_blocks

    return_large_blocks()  # TTRL_MMAP_THRESHOLD from the start: the scan and the evaluations too, not the runs only
    from ttrl_lightning.cli.configs import config_path
    from ttrl_lightning.cli.fit import parse_config
    from ttrl_lightning.models import load_model, load_tokenizer
    from ttrl_lightning.safe_files import atomic_write

    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "real_model_ttrl.json")
    if args.warmup and args.warmup in args.candidates:
        raise SystemExit(f"--warmup {args.warmup} is also a --candidates entry: the warm-up takes that task's "
                         "questions; give the label-free levels as --candidates")
    parsed = parse_config(["--config", config_path(CONFIG), *recipe_args(args)])
    base = parsed.model.init_args
    # the model as given (a clone elsewhere resumes the same study) and its weights' digest (what it is)
    settings = {"model": os.path.normpath(args.model), "model_digest": folder_digest(args.model), "config": CONFIG,
                "k": args.k, "seeds": args.seeds, "n_scan": args.n_scan, "n_train": args.n_train, "n_eval": args.n_eval,
                "n_calibration": args.n_calibration, "epochs": args.epochs,
                "instruction": args.instruction, "engine": args.engine, "val_every": args.val_every,
                "val_k": args.val_k, "temperature": base.sampling.temperature,
                "max_new_tokens": base.sampling.max_new_tokens, "num_votes": base.voting.num_votes,
                "num_generations": base.voting.num_trained, "lr": _field(base.policy, "lr"),
                "batch_size": parsed.data.init_args.batch_size, "warmup": args.warmup,
                "warmup_epochs": args.warmup_epochs if args.warmup else None,
                "n_warmup": args.n_warmup if args.warmup else None}
    if args.fit_option:  # only when given: a report written before the option existed stays resumable
        settings["fit_options"] = list(args.fit_option)
    report = _resumed(json_path, settings) if args.resume else None
    report = report or {"settings": settings, "scan": {}, "before": {}, "runs": {}}
    report.setdefault("sittings", []).append({**provenance(args.out), "started": time.strftime("%Y-%m-%d %H:%M:%S")})
    t_start = time.perf_counter()

    def save() -> None:
        report["seconds"] = round(report.get("seconds", 0) + time.perf_counter() - save.t, 1)
        report["sittings"][-1].update(seconds=round(time.perf_counter() - t_start, 1), peak_rss_gb=peak_rss_gb())
        save.t = time.perf_counter()
        with atomic_write(json_path) as fh:
            json.dump(report, fh, indent=1)
    save.t = t_start

    tok = load_tokenizer(args.model)
    model = load_model(args.model, tok).eval()
    evaluate = _evaluator(tok, args, base)
    args.start = args.model  # what the scan, the checkpoint row and every arm start from
    if args.warmup:  # 0. the curriculum's warm-up: gold-reward RL on the easier level
        earlier = report.get("warmup")
        args.start = _warmed_up(args, report, save, evaluate, model, tok)
        _another_start(report, earlier)
        save()
        model = load_model(args.start, tok).eval()
    args.start_digest = report["warmup"]["digest"] if args.warmup else settings["model_digest"]

    # 1. the scan, before any training
    scan = _draw(args)
    print(f"== scan: avg@{args.k} / maj@{args.k} of the checkpoint on {args.n_scan} questions per candidate "
          f"(T {settings['temperature']}, {settings['max_new_tokens']} new tokens)", flush=True)
    for name in args.candidates:
        if name not in report["scan"]:
            report["scan"][name] = evaluate(model, name, scan[f"{name}/scan"])
            save()
        e = report["scan"][name]
        e["in_regime"] = in_regime(e["avg"], e["maj"], e.get("reward_accuracy"))
        reward = "n/a" if e.get("reward_accuracy") is None else f"{100 * e['reward_accuracy']:.1f}%"
        print(f"  {name:<22} avg {100 * e['avg']:5.1f}%  maj {100 * e['maj']:5.1f}%  lead "
              f"{100 * (e['maj'] - e['avg']):+5.1f}  step-0 reward accuracy {reward}  "
              f"{'in the regime' if e['in_regime'] else 'outside'}  "
              f"(score_answer-only / equivalence-only: {e['gold_check']['score_answer_only']} / "
              f"{e['gold_check']['project_only']})", flush=True)
    regime = [n for n in args.candidates if report["scan"][n]["in_regime"]]
    if args.train_on:
        regime = list(args.train_on)
        print(f"--train-on: training on {', '.join(regime)} whatever the scan says")
    others = [n for n in args.candidates if n not in regime]
    if not regime:
        print("no candidate is in TTRL's regime: nothing to train (the scan above is the result)")
        save()
        return 0
    tasks, other = regime[:args.max_tasks], (others or [None])[0]
    skipped = regime[args.max_tasks:]
    print(f"trained on: {', '.join(tasks)}" + (f" (also in the regime, not trained: {', '.join(skipped)}; "
          "--max-tasks)" if skipped else "") + f"; other task: {other or 'none (every candidate is in the regime)'}")
    report["tasks"], report["other_task"] = tasks, other

    # 2. the splits (disjoint, checked) and their question files, 3. the checkpoint's accuracy
    splits = _draw(args, tasks, other)
    report["split_sizes"], report["overlaps"] = _checked_disjoint(splits)
    files = _question_files(args, splits, tasks, other)
    report["files"] = files
    for task in tasks:
        if task not in report["before"]:
            report["before"][task] = _splits(evaluate, model, splits, task, other)
            save()
        _print_splits(f"checkpoint, {task}", report["before"][task], args.k)
    del model  # every run loads its own start; this copy would stay resident (0.54 GB) through every run
    gc.collect()
    if args.val_every:  # the held-out curves' step 0, per run seed: the start as a run's validation measures it
        for task in tasks:
            starts = report.setdefault("start_val", {}).setdefault(task, {})
            for s in args.seeds:
                if str(s) not in starts:
                    starts[str(s)] = _start_validation(args, files, task, s)
                    save()
            print(f"checkpoint, {task}: held-out avg@{args.val_k} as the runs' validation measures it, by seed: "
                  + ", ".join(f"{seed} {100 * v:.1f}" for seed, v in sorted(starts.items())), flush=True)

    # 4. the arms
    # seed-major: a partial report holds every arm of its first seeds
    todo = [(task, arm, s) for task in tasks for s in args.seeds for arm in args.arms
            if f"{task}/{arm}/seed{s}" not in report["runs"]]
    for i, (task, arm, s) in enumerate(todo, 1):
        key = f"{task}/{arm}/seed{s}"
        print(f"\n== {key}: ttrl fit (run {i} of {len(todo)} to do; the record holds "
              f"{len(report['runs'])})", flush=True)
        report["runs"][key] = _run(args, base, files, splits, task, other, arm, s, evaluate)
        _print_splits(key, report["runs"][key]["after"], args.k)
        save()
    report["summary"] = {task: _summary(report, task, args) for task in tasks}
    save()
    _report(report, args, json_path)
    return 0


def _report(report: dict, args, json_path: str) -> None:
    """The tables, the checks, the long-horizon lines and the plot of ``report`` (the runs it holds)."""
    for task in report["tasks"]:
        print(_table(report, task, args.k))
        if others := [key for key in _other_starts(report) if key.startswith(task + "/")]:
            print(f"started from an earlier warm-up's weights (another digest; 'earlier_starts' holds its "
                  f"checkpoint row): {', '.join(others)}")
        print(_checks(report["summary"][task], args.k))
        if args.val_every:
            print(_horizon_table(report, task, args.val_k))
            print(_goal(report, task, args.val_k))
    _plot(report, os.path.join(args.out, "real_model_ttrl.png"))
    print(f"\nwall time {report['seconds'] / 60:.1f} min; {json_path}; "
          f"{os.path.join(args.out, 'real_model_ttrl.png')}")


def report_only(argv: list[str]) -> int:
    """``--report-only``: the tables and the plot of the runs already in --out's JSON (an unfinished
    benchmark's too), trained nothing."""
    args = build_parser().parse_args([a for a in argv if a != "--report-only"])
    json_path = os.path.join(args.out, "real_model_ttrl.json")
    with open(json_path) as fh:
        report = json.load(fh)
    for run in report["runs"].values():
        _without_repeats(run)
    done = sorted({r["seed"] for r in report["runs"].values()})
    args.seeds = [s for s in args.seeds if s in done]
    args.arms = [a for a in args.arms if any(r["arm"] == a for r in report["runs"].values())]
    report["summary"] = {task: _summary(report, task, args) for task in report["tasks"]}
    report["settings"]["seeds"] = args.seeds  # the seeds the tables average (not written back)
    print(f"--report-only: {len(report['runs'])} runs of {json_path} (seeds {args.seeds})")
    _report(report, args, json_path)
    return 0


def _field(spec, name: str):
    """A field of a parsed config's dataclass argument (a mapping or a namespace)."""
    return spec[name] if isinstance(spec, dict) else getattr(spec, name)


def _resumed(path: str, settings: dict) -> dict | None:
    """The report at ``path`` when it was written with the same settings, the seeds aside (else None: start
    again); a run of a seed is the same whichever other seeds are asked for, so more seeds extend a report."""
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        old = json.load(fh)
    same = {k: v for k, v in old.get("settings", {}).items() if k != "seeds"}
    if same != {k: v for k, v in settings.items() if k != "seeds"}:
        print(f"--resume: {path} was written with other settings; starting again", flush=True)
        return None
    print(f"--resume: keeping {len(old.get('runs', {}))} runs of {path}", flush=True)
    old["settings"] = settings
    for run in old.get("runs", {}).values():
        _without_repeats(run)
    return old


def _source(name: str, instruction: str):
    """The question stream of candidate ``name`` (its generator and config, the instruction appended)."""
    from ttrl_lightning.data.questions import task_source
    from ttrl_lightning.data.reasoning_gym_tasks import PREFIX

    generator, config = CANDIDATES[name]
    return task_source(PREFIX + generator, QUESTION_SEED, instruction or None, **config)


#: the splits of a trained task, in the order they are cut from its pool: the held-out and calibration splits
#: do not depend on --n-train
TRAINED_SPLITS = ("held_out", "calibration", "trained_on")


def _draw(args, tasks: list[str] = (), other: str | None = None) -> dict[str, list[dict]]:
    """Every split, ``{"<candidate>/<split>": questions}``, pairwise disjoint by construction
    (``data.splits.draw_splits``): each candidate's scan first, then the trained tasks' held-out, calibration and
    trained-on splits, then the other task's evaluation split. ``--n-train`` None takes every question of the
    task that the other splits leave (at most ``MAX_TRAIN``)."""
    from ttrl_lightning.data.splits import SplitSpec, draw_splits

    specs = []
    if args.warmup:  # the warm-up's level: its held-out split, then every other question (at most MAX_TRAIN)
        source = _source(args.warmup, args.instruction)
        specs += [SplitSpec(f"{args.warmup}/warmup_held_out", args.n_eval, source),
                  SplitSpec(f"{args.warmup}/warmup", args.n_warmup or _left(args.warmup, source, args.n_eval),
                            source)]
    specs += [SplitSpec(f"{c}/scan", args.n_scan, _source(c, args.instruction)) for c in args.candidates]
    for task in tasks:
        source = _source(task, args.instruction)
        n_train = args.n_train
        if n_train is None:
            n_train = _left(task, source, args.n_scan + args.n_eval + args.n_calibration)
        sizes = {"held_out": args.n_eval, "calibration": args.n_calibration, "trained_on": n_train}
        specs += [SplitSpec(f"{task}/{split}", sizes[split], source) for split in TRAINED_SPLITS]
    if other:
        specs.append(SplitSpec(f"{other}/other_task", args.n_eval, _source(other, args.instruction)))
    return draw_splits(specs)


def _left(task: str, source, others: int) -> int:
    """The questions of ``task`` left for training when ``others`` go to its other splits (at most
    ``MAX_TRAIN``)."""
    from ttrl_lightning.data.splits import distinct_questions

    n = len(distinct_questions(source, others + MAX_TRAIN)) - others
    if n < 1:
        raise SystemExit(f"{task}: no question is left for training after its other {others}")
    return n


def _warmed_up(args, report: dict, save, evaluate, model, tok) -> str:
    """SRT's curriculum step (issue: "a curriculum into the regime"): gold-reward RL from ``--model`` on the
    warm-up level's questions, with the config's settings (the gold control that took chain_sum 2 x 1 from
    20.8 to 81.1), ``--warmup-epochs`` epochs, seed 0. Its policy is saved as a checkpoint folder
    (``<out>/warmup/checkpoint``); the warm-up level's held-out avg@k before and after is printed. Kept on
    ``--resume`` when ``<out>/warmup/warmup.json`` was written with the same warm-up settings (whatever the
    arms' recipe) and the folder holds it."""
    from ttrl_lightning.cli.configs import config_path
    from ttrl_lightning.cli.demo_runs import fit_in_process, seed_args
    from ttrl_lightning.data.questions import write_questions
    from ttrl_lightning.safe_files import atomic_write

    folder = os.path.join(args.out, "warmup", "checkpoint")
    record_path = os.path.join(args.out, "warmup", "warmup.json")
    task = args.warmup
    # the warm-up depends on these alone: a study that changes its arms' recipe keeps it
    mine = {"model": os.path.normpath(args.model), "warmup": task, "warmup_epochs": args.warmup_epochs,
            "n_warmup": args.n_warmup, "n_eval": args.n_eval, "k": args.k, "instruction": args.instruction,
            "engine": args.engine, "config": CONFIG}
    if args.resume and os.path.isfile(record_path) and os.path.isfile(os.path.join(folder, "config.json")):
        with open(record_path) as fh:
            kept = json.load(fh)
        if kept.get("settings") == mine:
            w = report["warmup"] = kept["warmup"]
            w.setdefault("digest", folder_digest(folder))
            print(f"--resume: keeping the warm-up on {task} ({w['steps']} steps; held-out avg@{args.k} "
                  f"{100 * w['before']['avg']:.1f}% -> {100 * w['after']['avg']:.1f}%)", flush=True)
            return folder
    splits = _draw(args)
    path = os.path.join(args.out, "questions", task.replace(":", "_") + "_warmup.jsonl")
    write_questions(path, splits[f"{task}/warmup"])
    held = splits[f"{task}/warmup_held_out"]
    print(f"== warm-up: gold-reward RL on {task} ({len(splits[f'{task}/warmup'])} questions, "
          f"{args.warmup_epochs} epochs; held-out {len(held)})", flush=True)
    before = evaluate(model, task, held)
    fit_args = ["--config", config_path(CONFIG), "--model.init_args.policy.model", args.model,
                "--model.init_args.voting.labeler", "gold_reward",
                "--model.init_args.engine", _cli_value(ENGINES[args.engine]), *seed_args(0, 0),
                "--data.init_args.path", path, "--trainer.max_epochs", str(args.warmup_epochs),
                "--trainer.default_root_dir", os.path.join(args.out, "warmup", "run")]
    t0 = time.perf_counter()
    cli = fit_in_process(fit_args + list(args.fit_option))
    fit_seconds = time.perf_counter() - t0
    policy, steps, precision = _trained(cli)
    del cli
    after = evaluate(policy, task, held)
    _save_folder(policy, tok, folder)
    report["warmup"] = {"task": task, "questions": len(splits[f"{task}/warmup"]), "epochs": args.warmup_epochs,
                        "steps": steps, "before": before, "after": after,
                        "fit_seconds": round(fit_seconds, 1), "precision": precision,
                        "checkpoint": folder, "digest": folder_digest(folder), **provenance(args.out)}
    with atomic_write(record_path) as fh:
        json.dump({"settings": mine, "warmup": report["warmup"]}, fh, indent=1)
    save()
    print(f"  warm-up held-out avg@{args.k} {100 * before['avg']:.1f}% -> {100 * after['avg']:.1f}%, maj@{args.k} "
          f"{100 * before['maj']:.1f}% -> {100 * after['maj']:.1f}% ({fit_seconds / 60:.1f} min)", flush=True)
    del policy
    return folder


def folder_digest(folder: str) -> str:
    """SHA-256 over the names and SHA-256s of a checkpoint folder's ``*.safetensors`` files: what the weights
    are, wherever the folder lies: a warm-up redone on another machine is compared with it. (The files' bytes;
    ``benchmarks.training.weights_digest`` hashes a live module's state dict instead.)"""
    import hashlib

    from ttrl_lightning.modules.disk_weights import file_digest

    names = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    if not names:
        raise SystemExit(f"{folder} holds no *.safetensors weights")
    h = hashlib.sha256()
    for name in names:
        h.update(f"{name} {file_digest(os.path.join(folder, name))}\n".encode())
    return h.hexdigest()


def _another_start(report: dict, earlier: dict | None) -> None:
    """When the warm-up was redone (a new machine: its checkpoint folder is not committed) and its weights
    differ from those the report's runs started from, the measurements of the earlier checkpoint (its warm-up,
    scan, checkpoint row and start validations) move to ``report["earlier_starts"]`` and are measured again for
    the new one; the runs stay, each with the ``start_digest`` it started from, and the report names those of
    another start (:func:`_other_starts`)."""
    now = report["warmup"]["digest"]
    if not earlier or earlier.get("digest", now) == now:
        return
    print(f"WARNING: the warm-up checkpoint's weights differ from the report's (digest {now[:12]} vs "
          f"{earlier['digest'][:12]}, warm-up commits {report['warmup'].get('commit')} / {earlier.get('commit')}, "
          f"CPUs {report['warmup'].get('cpu', {}).get('model')} / {earlier.get('cpu', {}).get('model')}): the "
          "earlier checkpoint's measurements move to 'earlier_starts' and are measured again; its runs are kept "
          "and named in the report", flush=True)
    report.setdefault("earlier_starts", []).append(
        {"warmup": earlier, **{key: report.pop(key, None) for key in ("scan", "before", "start_val")}})
    report["scan"], report["before"] = {}, {}


def _other_starts(report: dict) -> list[str]:
    """The runs that started from other weights than the report's current start (an earlier warm-up)."""
    now = (report.get("warmup") or {}).get("digest") or report["settings"].get("model_digest")
    return sorted(key for key, run in report["runs"].items() if run.get("start_digest") not in (None, now))


def _save_folder(model, tok, folder: str) -> None:
    """``model`` and its tokenizer as a checkpoint folder, written beside ``folder`` and renamed into place."""
    import shutil
    import tempfile

    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".partial_", dir=parent)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if os.path.exists(folder):
        shutil.rmtree(folder)
    os.replace(tmp, folder)


def _checked_disjoint(splits: dict[str, list[dict]]) -> tuple[dict[str, int], dict[str, int]]:
    """Print every split's size and every pairwise overlap; refuse to go on when one is not 0."""
    from ttrl_lightning.data.splits import overlaps

    shared = {f"{a} & {b}": n for (a, b), n in overlaps(splits).items()}
    sizes = {name: len(qs) for name, qs in splits.items()}
    print("splits: " + ", ".join(f"{name} {n}" for name, n in sizes.items()))
    print(f"pairwise overlaps (questions with the same normalised prompt): {len(shared)} pairs, "
          f"largest {max(shared.values(), default=0)}")
    bad = {pair: n for pair, n in shared.items() if n}
    if bad:
        raise SystemExit(f"splits overlap: {bad}; refusing to measure on them")
    return sizes, shared


def _question_files(args, splits: dict[str, list[dict]], tasks: list[str], other: str | None) -> dict[str, str]:
    """The splits of every trained task as question files (``ttrl questions``' format):
    ``{"<task>/<split>": path}``, the other task's split as ``"<task>/other_task"``."""
    from ttrl_lightning.data.questions import write_questions

    files = {}
    for task in tasks:
        chosen = {"trained_on": f"{task}/trained_on", "held_out": f"{task}/held_out",
                  **({"other_task": f"{other}/other_task"} if other else {}), "calibration": f"{task}/calibration"}
        for split, name in chosen.items():
            key = f"{task}/{split}"
            path = os.path.join(args.out, "questions", key.replace(":", "_").replace("/", "_") + ".jsonl")
            write_questions(path, splits[name])
            files[key] = path
    return files


def _evaluator(tok, args, h):
    """``evaluate(model, candidate, questions) -> {avg, maj, pass, gold_check, seconds}``: ``questions`` of
    ``candidate`` sampled at the config's (``h``, its parsed ``model.init_args``) sampling with seed 0 and the chat
    template (the one prompt rule), scored by answer equivalence and, beside it, by reasoning-gym's
    ``score_answer`` (``gold_check``: their disagreements counted)."""
    from ttrl_lightning.answers import ANSWER_EXTRACTORS
    from ttrl_lightning.data.reasoning_gym_tasks import PREFIX, sampled_gold_check
    from ttrl_lightning.eval.sampled import evaluate_sampled
    from ttrl_lightning.rollout import SamplingParams, build_engine
    from ttrl_lightning.rollout.requests import PromptRenderer

    params = SamplingParams(n=args.k, temperature=h.sampling.temperature, max_new_tokens=h.sampling.max_new_tokens,
                            seed=0)
    engine = build_engine(ENGINES[args.engine], tok)
    extract = ANSWER_EXTRACTORS[h.voting.answer_extractor]

    def evaluate(model, task: str, questions: list[dict]) -> dict:
        t0 = time.perf_counter()
        metrics, _ = evaluate_sampled(model, tok, questions, args.k, params, batch_size=32, engine=engine,
                                      extract=extract, progress=True,
                                      renderer=PromptRenderer(tok, None, h.prompt_format))
        generator, config = CANDIDATES[task]
        check = sampled_gold_check(PREFIX + generator, metrics.per_question, **config)
        return {"avg": metrics.avg_at_k, "maj": metrics.maj_at_k, "pass": metrics.pass_at_k,
                "reward_accuracy": metrics.reward_accuracy, "gold_check": check,
                "seconds": round(time.perf_counter() - t0, 1)}
    return evaluate


def _splits(evaluate, model, splits: dict[str, list[dict]], task: str, other: str | None) -> dict:
    """The trained-on, held-out and other-task accuracy of ``model`` (not the dev-cal split)."""
    out = {"trained_on": evaluate(model, task, splits[f"{task}/trained_on"]),
           "held_out": evaluate(model, task, splits[f"{task}/held_out"])}
    if other:
        out["other_task"] = evaluate(model, other, splits[f"{other}/other_task"])
    return out


def _print_splits(title: str, splits: dict, k: int) -> None:
    cells = "  ".join(f"{split} avg@{k} {100 * e['avg']:5.1f}% maj@{k} {100 * e['maj']:5.1f}%"
                      for split, e in splits.items())
    print(f"  {title}: {cells}", flush=True)


def arm_options(arm: str, base) -> tuple[str, list[str]]:
    """Arm ``arm``'s labeler and its ``ttrl fit`` options beyond the config's, ``base`` (the parsed config's
    ``model.init_args``) filling the placeholders: self_harmony's two views share the vote budget."""
    labeler, options = ARMS[arm]
    halves = {"{half_votes}": str(base.voting.num_votes // 2), "{half_generations}": str(base.voting.num_trained // 2)}
    return labeler, [halves.get(o, o) for o in options]


def _run(args, base, files: dict, splits: dict, task: str, other: str | None, arm: str, seed: int,
         evaluate) -> dict:
    """One arm's ``ttrl fit`` and its evaluation. The run saves ``last.ckpt`` under its folder every
    ``--save-every`` steps; with ``--resume`` an unfinished run continues from it (``--ckpt_path``: weights,
    optimizer, reference, counters and the data loader's position), its curves joined across the sittings
    (:func:`_run_curves`), so a sitting that ends mid-run loses at most ``--save-every`` steps. The checkpoint
    is deleted once the run is in the report."""
    from ttrl_lightning.cli.demo_runs import fit_in_process

    labeler, extra = arm_options(arm, base)
    if labeler == "pixel":  # its dev-cal split
        extra += ["--data.init_args.calibration_path", files[f"{task}/calibration"]]
    root = os.path.join(args.out, "runs", task.replace(":", "_"), arm, f"seed{seed}")
    last = os.path.join(root, "checkpoints", "last.ckpt")
    resuming = bool(args.resume and os.path.isfile(last))
    if not resuming and os.path.isdir(root):  # an earlier attempt's logs would join this run's curves
        import shutil

        shutil.rmtree(root)
    checkpoint = {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                  "init_args": {"dirpath": os.path.join(root, "checkpoints"), "save_last": True, "save_top_k": 0,
                                "every_n_train_steps": args.save_every}}
    fit_args = [*_start_args(args, files, task, seed), "--model.init_args.voting.labeler", labeler,
                "--trainer.max_epochs", str(args.epochs), "--trainer.default_root_dir", root,
                "--trainer.callbacks", json.dumps([checkpoint] if args.save_every else []), *extra]
    if args.val_every:  # the held-out curve: avg@val_k of the held-out split every val_every steps
        fit_args += [*_validation_args(args, files, task), "--trainer.val_check_interval", str(args.val_every),
                     "--trainer.check_val_every_n_epoch", "null"]
    if resuming:
        fit_args += ["--ckpt_path", last]
        print(f"--resume: {root} continues from {last}", flush=True)
    t0 = time.perf_counter()
    cli = fit_in_process(fit_args + list(args.fit_option))
    fit_seconds = time.perf_counter() - t0
    curves, start_step = _run_curves(root)
    policy, steps, precision = _trained(cli)
    del cli
    after = _splits(evaluate, policy, splits, task, other)
    vote_tokens = sum(v for step, v in curves.get("train/vote_tokens", []) if step >= start_step)
    if os.path.isfile(last):
        os.remove(last)  # 2 GB; the run is in the report
    run = {"arm": arm, "seed": seed, "task": task, "start": args.start, "start_digest": args.start_digest,
           "after": after, "steps": steps,
           "resumed_at_step": start_step if resuming else None,
           "coverage": curve_mean(curves.get("train/coverage")),
           "vote_tokens_per_s": vote_tokens / fit_seconds if fit_seconds else None,
           "fit_seconds": round(fit_seconds, 1), "precision": precision,
           "seconds": round(time.perf_counter() - t0, 1),
           "seconds_per_step": round(fit_seconds / max(1, steps - start_step), 2),
           "peak_rss_gb": round(peak_rss_gb(), 2), **provenance(args.out), "curves": curves}
    return _without_repeats(run)


def _start_args(args, files: dict, task: str, seed: int) -> list[str]:
    """The ``ttrl`` options every run of ``task`` and ``seed`` shares: the config and the recipe, the start
    model, the engine, the seeds (the policy seed also seeds the validation's sampling) and the trained-on
    questions."""
    from ttrl_lightning.cli.configs import config_path
    from ttrl_lightning.cli.demo_runs import seed_args

    return ["--config", config_path(CONFIG), *recipe_args(args), "--model.init_args.policy.model", args.start,
            "--model.init_args.engine", _cli_value(ENGINES[args.engine]), *seed_args(seed, seed),
            "--data.init_args.path", files[f"{task}/trained_on"]]


def _validation_args(args, files: dict, task: str) -> list[str]:
    """The validation of a run: avg@val_k on the whole held-out split."""
    return ["--data.init_args.val_path", files[f"{task}/held_out"], "--model.init_args.eval.k", str(args.val_k),
            "--trainer.limit_val_batches", "1.0"]


def _start_validation(args, files: dict, task: str, seed: int) -> float:
    """The start's held-out avg@val_k as a run of ``seed`` validates: ``ttrl validate`` with the run's options
    (:func:`_start_args`, :func:`_validation_args`), so its samples are drawn under the same seeds
    (``derive_seed(seed, "rollout", batch)``) as every later point of that run's curve. It is the curve's step
    0. The checkpoint's avg@k of the evaluation is another draw (k samples under the evaluation's seed), which
    an unchanged policy's curve would not reproduce."""
    from ttrl_lightning.cli.fit import make_cli

    root = os.path.join(args.out, "start_validation", task.replace(":", "_"), f"seed{seed}")
    cli = make_cli(["validate", *_start_args(args, files, task, seed), *_validation_args(args, files, task),
                    "--trainer.default_root_dir", root, *args.fit_option])
    value = float(cli.trainer.callback_metrics[f"val/avg@{args.val_k}"])
    del cli
    gc.collect()
    return value


def _curve_start(report: dict, run: dict) -> float:
    """Step 0 of a run's held-out curve: its seed's start validation (:func:`_start_validation`) where the
    report has it, else the checkpoint's held-out avg@k (reports written before it existed)."""
    start = report.get("start_val", {}).get(run["task"], {}).get(str(run["seed"]))
    return report["before"][run["task"]]["held_out"]["avg"] if start is None else start


def _trained(cli) -> tuple:
    """A finished fit's policy (eval mode), its optimizer-step count and precision. The evaluation after it
    reads the weights only: the gradients and the AdamW state (1.6 GB for SmolLM2) are freed first. (Measured
    on a 34-step SmolLM2 run with the memory levers, this and freeing the start model took the run's peak from
    3.81 to 3.74 GB only: the peak lies elsewhere, not in the final evaluation; README, real-model section.)"""
    policy = cli.model.policy.eval()
    policy.zero_grad(set_to_none=True)
    for optimizer in cli.trainer.optimizers:
        optimizer.state.clear()
    gc.collect()
    return policy, int(cli.trainer.global_step), str(cli.trainer.precision)


def _run_curves(root: str) -> tuple[dict[str, list[tuple[int, float]]], int]:
    """The run's curves (``CURVES`` and ``val/avg@k``) joined over its sittings, and the step the last sitting
    started at (0 for a run in one sitting). Each sitting's CSV log (``version_N/metrics.csv``, in order)
    replaces the points an earlier one logged from its first step on (steps run again after the checkpoint)."""
    import csv
    import glob

    from ttrl_lightning.cli.demo_runs import add_rows

    curves: dict[str, list[tuple[int, float]]] = {}
    start = 0
    versions = sorted(glob.glob(os.path.join(root, "**", "version_*", "metrics.csv"), recursive=True),
                      key=lambda p: int(os.path.basename(os.path.dirname(p)).split("_")[1]))
    for path in versions:
        with open(path, newline="") as fh:
            rows = [row for row in csv.DictReader(fh) if row.get("step") not in ("", None)]
        if not rows:
            continue
        start = min(int(row["step"]) for row in rows)
        curves = {key: [pt for pt in points if pt[0] < start] for key, points in curves.items()}
        add_rows(curves, rows, CURVES)
    return curves, start


#: per-step metrics over the questions a step labelled (and KL P95 over the rows it trained): a step of coverage 0
#: has none. A log written before ``modules.grpo.with_gaps`` repeats the previous step's value at such a step
UNLABELLED_REPEATS = ("train/label_accuracy", "train/reward_accuracy", "train/kl_p95")


def _without_repeats(run: dict) -> dict:
    """``run`` (a report entry) with the points of :data:`UNLABELLED_REPEATS` at its steps of coverage 0
    dropped, and its label accuracy and KL P95 means taken again. KL P95 stays where the arm trains the
    questions it does not label (RESTRAIN's negative branch): its rows carry loss. A log with gaps has no such
    points: nothing changes."""
    curves = run["curves"]
    unlabelled = {step for step, v in curves.get("train/coverage", []) if v == 0}
    trains_unlabelled = "--model.init_args.advantage.negative_shift" in ARMS.get(run["arm"], ("", []))[1]
    for key in UNLABELLED_REPEATS:
        if key in curves and not (key == "train/kl_p95" and trains_unlabelled):
            curves[key] = [pt for pt in curves[key] if pt[0] not in unlabelled]
    run["label_accuracy"] = curve_mean(curves.get("train/label_accuracy"))
    run["kl_p95"] = curve_mean(curves.get("train/kl_p95"))
    return run


def _cli_value(spec) -> str:
    """An engine spec as a command-line value: a name as it is, a mapping as JSON."""
    return spec if isinstance(spec, str) else json.dumps(spec)


def _horizon(run: dict, before_held_out: float, val_k: int) -> dict | None:
    """The long-horizon view of one run: its held-out curve (step 0: ``before_held_out``, the start,
    :func:`_curve_start`; then avg@val_k every --val-every steps, at the logged step: the 0-based index of the
    batch it follows), its peak, the step of the peak and the last evaluation
    (``final``: the curve's last point, --val-every steps apart, not necessarily the end of training), and
    where the label-free stopping rule (``callbacks.stopping``, applied to the run's logged majority ratio,
    completion length and flip rate, no gold) would have stopped: the step, the held-out accuracy there (the last evaluation at or before it) and the accuracy lost against the peak."""
    from ttrl_lightning.callbacks.stopping import COMPLETION_LEN, FLIP_RATE, MAJORITY_RATIO, stop_decision

    points = sorted(run["curves"].get(f"val/avg@{val_k}", []))
    if not points:
        return None
    curve = [(0, before_held_out)] + [(int(step), v) for step, v in points]
    peak_step, peak = max(curve, key=lambda p: (p[1], -p[0]))
    ratio = sorted(run["curves"].get(MAJORITY_RATIO, []))
    flips = dict(run["curves"].get(FLIP_RATE, []))  # logged once questions come round again
    history = {MAJORITY_RATIO: [v for _, v in ratio],
               COMPLETION_LEN: [v for _, v in sorted(run["curves"].get(COMPLETION_LEN, []))],
               FLIP_RATE: [flips.get(step, float("nan")) for step, _ in ratio]}
    decision = stop_decision(history) if ratio else None
    out = {"curve": curve, "peak": peak, "peak_step": peak_step, "final": curve[-1][1], "final_step": curve[-1][0],
           "stop_step": None, "stop_reason": None, "at_stop": None, "lost_at_stop": None}
    if decision is not None:
        step = int(ratio[decision[0]][0])
        at = [v for s_, v in curve if s_ <= step][-1]
        out.update(stop_step=step, stop_reason=decision[1], at_stop=at, lost_at_stop=peak - at)
    return out


def _horizon_table(report: dict, task: str, val_k: int) -> str:
    """One line per run: held-out peak (step), final, the stopping rule's step, its accuracy and the loss; the
    run's step means of reward accuracy, flip rate and coverage (:data:`RUN_MEANS`), and its wall time."""
    w = max([34] + [len(key) for key in report["runs"]])
    lines = [f"\nlong horizon, {task}: held-out avg@{val_k} every {report['settings']['val_every']} steps "
             "(step 0: the checkpoint, validated so), the label-free stopping rule, and the run's step means",
             f"{'run':<{w}} {'peak (step)':>12} {'last eval (step)':>16} {'stop step':>9} {'at stop':>8} "
             f"{'lost':>6}" + "".join(f" {head:>{len(head)}}" for head in RUN_MEANS.values()) + f" {'min':>5}"]
    for key, run in report["runs"].items():
        h = _horizon(run, _curve_start(report, run), val_k) if run["task"] == task else None
        if h is None:
            continue
        stop = "none" if h["stop_step"] is None else str(h["stop_step"])
        at = "" if h["at_stop"] is None else f"{100 * h['at_stop']:.1f}"
        lost = "" if h["lost_at_stop"] is None else f"{100 * h['lost_at_stop']:+.1f}"
        means = "".join(f" {_step_mean(run, name):>{len(head)}}" for name, head in RUN_MEANS.items())
        lines.append(f"{key:<{w}} {100 * h['peak']:6.1f} ({h['peak_step']:>3}) {100 * h['final']:10.1f} "
                     f"({h['final_step']:>3}) {stop:>9} {at:>8} {lost:>6}{means} {run['seconds'] / 60:5.1f}")
    return "\n".join(lines)


#: the per-step metrics whose run mean the long-horizon table prints, with their column heads
RUN_MEANS = {"train/reward_accuracy": "reward acc", "train/flip_rate": "flip rate", "train/coverage": "coverage"}


def _step_mean(run: dict, name: str) -> str:
    """The mean over a run's logged steps of per-step metric ``name``, to 2 decimals; ``n/a`` where it was not
    logged (reward accuracy for a reward that is not a label's, the flip rate before any question recurs)."""
    mean = curve_mean(run["curves"].get(name) or [])
    return "n/a" if mean is None else f"{mean:.2f}"


def _summary(report: dict, task: str, args) -> dict:
    """Per arm: means over seeds of every split's avg/maj after, gains over the checkpoint, the seeds' spread
    of avg after, and the run metrics."""
    before = report["before"][task]
    out = {"before": before, "arms": {}}
    for arm in args.arms:
        runs = [report["runs"][f"{task}/{arm}/seed{s}"] for s in args.seeds
                if f"{task}/{arm}/seed{s}" in report["runs"]]
        if not runs:
            continue
        entry: dict = {"seeds": [r["seed"] for r in runs]}
        for split in before:
            avg = [r["after"][split]["avg"] for r in runs]
            maj = [r["after"][split]["maj"] for r in runs]
            entry[split] = {"avg": statistics.mean(avg), "maj": statistics.mean(maj),
                            "avg_gain": statistics.mean(avg) - before[split]["avg"],
                            "maj_gain": statistics.mean(maj) - before[split]["maj"],
                            "avg_spread": max(avg) - min(avg), "avg_per_seed": avg}
        for name in ("label_accuracy", "kl_p95", "vote_tokens_per_s", "fit_seconds", "seconds", "seconds_per_step"):
            vals = [r[name] for r in runs if r.get(name) is not None]
            entry[name] = statistics.mean(vals) if vals else None
        out["arms"][arm] = entry
    return out


def _table(report: dict, task: str, k: int) -> str:
    s = report["summary"][task]
    splits = list(s["before"])
    pct = lambda v: "  n/a" if v is None else f"{100 * v:5.1f}"  # noqa: E731
    w = max([15] + [len(arm) for arm in s["arms"]])  # the arm column fits the longest name
    head = f"{'arm':<{w}} {'n':>3}" + "".join(f" {split + ' avg@' + str(k) + ' (gain, spread)':>32} {'maj@' + str(k):>6}"
                                    for split in splits)
    # label acc, KL P95: step means; s/step: the run's fit time (its held-out evaluations in it) per step
    head += f" {'label acc':>9} {'KL P95':>7} {'tok/s':>6} {'min/run':>7} {'s/step':>6}"
    lines = [f"\n{task}: mean over each arm's seeds of {report['settings']['seeds']} (n: how many; an arm of one "
             "seed was screened, its spread unknown); the checkpoint first; label acc (over the questions each step "
             "labelled) and KL P95: means over the run's steps", head, "-" * len(head)]
    row = f"{'checkpoint':<{w}}    " + "".join(f" {pct(s['before'][sp]['avg']):>32} {pct(s['before'][sp]['maj']):>6}"
                                          for sp in splits)
    lines.append(row)
    for arm, e in s["arms"].items():
        row = f"{arm:<{w}} {len(e['seeds']):>3}"
        for sp in splits:  # one seed has no spread: "-", never a 0.0 that reads as seeds that agree
            spread = f"{100 * e[sp]['avg_spread']:4.1f}" if len(e["seeds"]) > 1 else "   -"
            cell = f"{pct(e[sp]['avg'])} ({100 * e[sp]['avg_gain']:+5.1f}, {spread})"
            row += f" {cell:>32} {pct(e[sp]['maj']):>6}"
        kl = "n/a" if e["kl_p95"] is None else f"{e['kl_p95']:.3f}"
        tps = "n/a" if e["vote_tokens_per_s"] is None else f"{e['vote_tokens_per_s']:.0f}"
        per_step = "n/a" if e.get("seconds_per_step") is None else f"{e['seconds_per_step']:.1f}"
        row += f" {pct(e['label_accuracy']):>9} {kl:>7} {tps:>6} {e['seconds'] / 60:7.1f} {per_step:>6}"
        lines.append(row)
    return "\n".join(lines)


def _compared(a: float, b: float) -> str:
    """``a`` against ``b`` as the table prints them: accuracies are counts over k x questions, so two equal
    counts can differ by float round-off, and a tie is said as one (never as "exceeds")."""
    if abs(a - b) <= 1e-9:
        return "equals it (does not exceed)"
    return "exceeds" if a > b else "does not exceed"


def _checks(summary: dict, k: int) -> str:
    """The issue's acceptance checks, as measured."""
    arms = summary["arms"]
    lines = []
    if "majority" in arms:
        m = arms["majority"]["trained_on"]
        before = summary["before"]["trained_on"]["avg"]
        per_seed = ", ".join(f"{100 * (a - before):+.1f}" for a in m["avg_per_seed"])
        line = (f"majority: trained-on avg@{k} gain {100 * m['avg_gain']:+.1f} (per seed: {per_seed}) "
                + (f"vs its seeds' spread {100 * m['avg_spread']:.1f}: {_compared(m['avg_gain'], m['avg_spread'])}"
                   if len(m["avg_per_seed"]) > 1 else "(one seed: its spread is unknown)"))
        if "random_reward" in arms:
            r = arms["random_reward"]["trained_on"]["avg_gain"]
            line += f"; vs random reward's gain {100 * r:+.1f}: {_compared(m['avg_gain'], r)}"
        lines.append(line)
    if "gold_reward" in arms:
        g = arms["gold_reward"]["trained_on"]["avg"]
        above = [a for a, e in arms.items() if a != "gold_reward" and e["trained_on"]["avg"] > g]
        lines.append(f"gold reward: trained-on avg@{k} {100 * g:.1f}%, " + (
            "bounds every arm from above" if not above else f"below {', '.join(above)} (see the note in the README)"))
    return "\n".join(lines)


def _held_out_curves(report: dict, runs: list[dict], val_k: int) -> tuple[list[dict], dict[int, list[float]]]:
    """The runs' horizons (:func:`_horizon`, runs without a held-out curve left out) and their held-out
    avg@val_k by step, one value per seed (step 0: the start, :func:`_curve_start`)."""
    horizons = [h for h in (_horizon(r, _curve_start(report, r), val_k) for r in runs) if h is not None]
    by_step: dict[int, list[float]] = {}
    for h in horizons:
        for step, v in h["curve"]:
            by_step.setdefault(step, []).append(v)
    return horizons, by_step


#: the arms that are controls, not label-free methods (issue goal: a label-free arm against them)
CONTROLS = ("gold_reward", "random_reward")


def _goal(report: dict, task: str, val_k: int) -> str:
    """The study's goal, per label-free arm, as measured (held-out): over the whole horizon the mean-over-seeds
    curve never falls below the checkpoint by more than the arm's seeds' spread (max - min of the final
    held-out avg@k), and the final held-out avg@k (mean over seeds) ends above both the checkpoint and the
    random-reward control by more than that spread. With one seed the spread is unknown: not decided. A line
    that is not met names each condition that fails with the figure it was decided on (points). Each
    figure is compared with the checkpoint's measured the same way: the curve with its own step 0 (the mean
    of the seeds' start validations, :func:`_curve_start`), the final avg@k with the checkpoint's avg@k."""
    summary = report["summary"][task]
    before = summary["before"]["held_out"]["avg"]
    random = summary["arms"].get("random_reward", {}).get("held_out", {}).get("avg")
    lines = [f"\ngoal, {task} (held-out; spread: max - min over seeds of the final avg@{report['settings']['k']})"]
    for arm, e in summary["arms"].items():
        if arm in CONTROLS:
            continue
        runs = [r for r in report["runs"].values() if r["task"] == task and r["arm"] == arm]
        _, curve = _held_out_curves(report, runs, val_k)
        end, spread, n = e["held_out"]["avg"], e["held_out"]["avg_spread"], len(e["seeds"])
        low_step, low = min(((step, statistics.mean(v)) for step, v in curve.items() if step > 0),
                            key=lambda p: (p[1], p[0]), default=(None, None))
        start = statistics.mean(curve[0]) if 0 in curve else before
        said = (f"{arm} ({n} seed{'s' if n > 1 else ''}): end {100 * end:.1f} vs checkpoint {100 * before:.1f}"
                + ("" if random is None else f" and random {100 * random:.1f}")
                + ("" if low is None else f"; lowest mean avg@{val_k} {100 * low:.1f} (step {low_step}) vs "
                                          f"its step 0 {100 * start:.1f}"))
        if n < 2:
            lines.append(f"{said}: not decided (one seed: its spread is unknown)")
            continue
        # each condition of the goal: whether it holds, and the figure it was decided on (points)
        checks = {"never more than the spread below the checkpoint":
                  (low is None or low >= start - spread,
                   "no evaluation" if low is None else f"lowest {100 * (low - start):+.1f} vs its step 0"),
                  "ends above the checkpoint by more than the spread": (end - before > spread,
                                                                         f"{100 * (end - before):+.1f}"),
                  "ends above random by more than the spread":
                  (random is not None and end - random > spread,
                   "no random control" if random is None else f"{100 * (end - random):+.1f}")}
        failed = [f"{name}: {figure}" for name, (ok, figure) in checks.items() if not ok]
        lines.append(f"{said}, spread {100 * spread:.1f}: " + ("goal met" if not failed else
                                                                  "not met, it fails: " + "; ".join(failed)))
    return "\n".join(lines)


def _seeds_label(arm: str, n_seeds: int) -> str:
    """A curve's legend entry: the arm and how many seeds drew that curve (a run may lack a panel's metric)."""
    return f"{arm} ({n_seeds} seed{'s' if n_seeds > 1 else ''})"


def _figure(report: dict):
    """The study's figure: per arm, the mean over that arm's seeds (each panel's legend names how many seeds
    the curve holds: a screened arm's curve is one seed, not a mean); the held-out panel starts each curve at
    the checkpoint's step 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = report["settings"]
    val_k = settings.get("val_k")
    window = settings.get("val_every") or 8  # the trailing mean of the per-step panels
    held = bool(settings.get("val_every")) and any(r["curves"].get(f"val/avg@{val_k}") for r in report["runs"].values())
    fig, axes = plt.subplots(1, 3 if held else 2, figsize=(15 if held else 10, 3.8))
    arms = list(dict.fromkeys(r["arm"] for r in report["runs"].values()))
    # one colour per arm: tab10 holds ten, so more arms take tab20's dark shades, then its light ones
    palette = plt.get_cmap("tab20")
    colours = [f"C{i}" for i in range(len(arms))] if len(arms) <= 10 else \
        [palette((2 * i) % 20 + (2 * i) // 20) for i in range(len(arms))]
    for i, arm in enumerate(arms):
        runs = [r for r in report["runs"].values() if r["arm"] == arm]
        style = "--" if len({r["seed"] for r in runs}) == 1 else "-"  # a one-seed screen: dashed
        if held:  # the held-out curve, mean over seeds (band: min to max) from the checkpoint's step 0
            horizons, curve = _held_out_curves(report, runs, val_k)
            by_step = {step: [100 * v for v in values] for step, values in curve.items()}
            steps = sorted(by_step)
            if steps:
                axes[2].plot(steps, [statistics.mean(by_step[s]) for s in steps], marker=".", color=colours[i],
                             linestyle=style, label=_seeds_label(arm, len(horizons)))
                if len(horizons) > 1:
                    axes[2].fill_between(steps, [min(by_step[s]) for s in steps], [max(by_step[s]) for s in steps],
                                         color=colours[i], alpha=0.15)
            for h in horizons:  # a cross where the label-free rule stops each seed
                if h["stop_step"] is not None:
                    axes[2].plot([h["stop_step"]], [100 * h["at_stop"]], marker="x", markersize=9, color=colours[i])
        for ax, key, scale in ((axes[0], "train/vote_accuracy", 100), (axes[1], "train/kl_p95", 1)):
            by_step: dict[int, list[float]] = {}
            drawn = [r for r in runs if r["curves"].get(key)]
            for r in drawn:
                for step, v in r["curves"][key]:
                    by_step.setdefault(step, []).append(v)
            if by_step:  # one colour per arm in both panels (pixel logs no KL: it never updates)
                steps = sorted(by_step)
                means = [scale * statistics.mean(by_step[s]) for s in steps]
                # a step holds 4 questions: the step's own value (thin) moves with the batch more than with the
                # arm, so the arm reads from the trailing mean over `window` logged steps (bold)
                trailing = [statistics.mean(means[max(0, j - window + 1):j + 1]) for j in range(len(means))]
                ax.plot(steps, means, linewidth=0.6, alpha=0.3, color=colours[i])
                ax.plot(steps, trailing, linewidth=1.8, label=_seeds_label(arm, len({r["seed"] for r in drawn})),
                        color=colours[i], linestyle=style)
    axes[0].set_ylabel(f"trained-on vote accuracy, avg@M (%)\nbold: mean of the last {window} steps")
    axes[1].set_ylabel(f"token KL to the initial policy, P95\nbold: mean of the last {window} steps")
    if held:
        axes[2].set_ylabel(f"held-out avg@{val_k} (%); x: label-free stop")
    for ax in axes:
        ax.set_xlabel("TTRL step")
        if ax.get_legend_handles_labels()[0]:  # a panel with no curve (no arm logged it) has no legend
            ax.legend(fontsize=7)
    model = os.path.basename(report["settings"]["model"])
    fig.suptitle(f"{model}: each arm's mean over its seeds (how many: the legend)", fontsize=9)
    fig.tight_layout()
    return fig


def _plot(report: dict, path: str) -> None:
    import matplotlib.pyplot as plt

    from ttrl_lightning.safe_files import atomic_write_path

    fig = _figure(report)
    with atomic_write_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(report_only(sys.argv[1:]) if "--report-only" in sys.argv[1:] else main())
