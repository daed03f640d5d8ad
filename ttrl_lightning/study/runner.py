"""``run_study``: a study from its spec to its record, top to bottom.

1. **Questions**: the splits as question files (``study.questions``), bound to the record by their digests.
2. **Starts**: per start seed, the start's checkpoint (``study.starts``; kept under ``<out>/starts/`` and
   reused), bound to the record by the digest of its weights; then the start evaluated like a run, once per run
   seed with that seed's evaluation seed (``study.evaluate``), per-question counts kept.
3. **Runs**: per start seed, run seed and arm (seed-major: a partial record holds every arm of its first
   seeds), ``ttrl fit`` of the composed config (``study.runs``) under ``<out>/runs/<arm>/start<s>/seed<s>/``,
   then its evaluation; the record is written after every run. A run killed mid-way is not in the record; its
   folder is cleared and the run redone on ``--resume``.

Each run logs to the config's Lightning loggers plus a CSV log (the curves kept in the record); a W&B logger gets
the study's name as its ``group``, the run's key as its ``name`` and the arm and seeds as tags and config, so the
runs of one study sit together and a sweep agent (``configs/sweeps/study_*.yaml``, ``ttrl study --only``) can
drive the arms.
"""
from __future__ import annotations

import gc
import os
import shutil
import time
from collections.abc import Sequence

from ..provenance import peak_rss_gb, provenance
from .digest import weights_digest
from .evaluate import eval_settings, evaluate_split, load_for_evaluation
from .questions import build_questions, split_digests
from .record import StudyRecord
from .runs import compose_config, curve_mean, fit_in_process, logged_curves, seed_overrides, write_config
from .spec import SpecError, StudySpec
from .starts import START_KINDS, StartContext, csv_logger, file_data

__all__ = ["run_study", "planned_runs", "run_config", "parse_only"]


def parse_only(spec: StudySpec, only: Sequence[str] | None) -> set[tuple[str, int | None]] | None:
    """``--only ARM[/SEED]`` values as ``{(arm, seed or None)}``; an unknown arm or seed is one line."""
    if not only:
        return None
    out = set()
    for item in only:
        arm, _, seed = item.partition("/")
        if arm not in spec.arms:
            raise SpecError(f"--only {item}: unknown arm {arm!r} (arms: {', '.join(spec.arms)})")
        if seed and (not seed.isdigit() or int(seed) not in spec.seeds):
            raise SpecError(f"--only {item}: unknown seed {seed!r} (seeds: {', '.join(map(str, spec.seeds))})")
        out.add((arm, int(seed) if seed else None))
    return out


def planned_runs(spec: StudySpec, only: set | None = None) -> list[tuple[str, int, int]]:
    """Every ``(arm, start seed, run seed)`` of the spec, seed-major, filtered by ``only``."""
    runs = [(arm, ss, s) for ss in spec.start.seeds for s in spec.seeds for arm in spec.arms]
    if only is not None:
        runs = [r for r in runs if (r[0], None) in only or (r[0], r[2]) in only]
    return runs


def _loggers(given, spec: StudySpec, key: str, arm: str, start_seed: int, seed: int, root: str) -> list[dict]:
    """The run's loggers: the config's (a W&B logger joined to the study's group) and a CSV log under ``root``."""
    from ..cli.fit import DEFAULT_LOGGER

    if given is None or given is True:
        given = [DEFAULT_LOGGER]
    elif given is False:
        given = []
    elif isinstance(given, dict):
        given = [given]
    out = []
    for logger in given:
        path = str(logger.get("class_path", "")) if isinstance(logger, dict) else ""
        if path.endswith("CSVLogger"):
            continue
        if path.endswith("WandbLogger"):
            init = dict(logger.get("init_args") or {})
            init.update(group=spec.name, name=key, tags=[f"arm:{arm}", f"seed:{seed}", f"start:{start_seed}"])
            logger = {**logger, "init_args": init}
        out.append(logger)
    return out + [csv_logger(root)]


def run_config(spec: StudySpec, arm: str, start: str, start_seed: int, seed: int, root: str,
               paths: dict[str, str]) -> dict:
    """The composed ``ttrl fit`` config of one run: the TTRL config, the study's overrides, the arm's labeler and
    overrides, the seeds, the start, the study's question files and the run's folder and loggers."""
    t, a = spec.train, spec.arms[arm]
    trainer: dict = {"default_root_dir": root}
    if t.steps:
        trainer["max_steps"] = t.steps
    if t.epochs:
        trainer["max_epochs"] = t.epochs
    config = compose_config(t.config, t.overrides, {"model": {"init_args": {"voting": {"labeler": a.labeler}}}},
                            a.overrides, seed_overrides(seed, seed),
                            {"model": {"init_args": {"policy": {"model": start}}}, "trainer": trainer})
    data = config.get("data") or {}
    config["data"] = {"class_path": "ttrl_lightning.data.questions.QuestionDataModule",
                      "init_args": file_data(data.get("init_args") or {}, paths[t.split],
                                              paths.get(t.validation) if t.validation else None,
                                              paths.get(t.calibration) if t.calibration else None)}
    config["trainer"]["logger"] = _loggers(config["trainer"].get("logger"), spec,
                                           spec.run_key(arm, start_seed, seed), arm, start_seed, seed, root)
    return config


def _build_start(spec: StudySpec, record: StudyRecord, start_seed: int, paths: dict[str, str], sitting: dict
                 ) -> str:
    """Start ``start_seed``'s checkpoint: the one the record names when it is still there, else built anew; bound
    to the record by its digest either way."""
    entry = record.start(start_seed)
    ckpt = entry.get("checkpoint")
    if not (ckpt and os.path.exists(ckpt)):
        folder = os.path.join(spec.out, "starts", f"start{start_seed}")
        print(f"== start {start_seed}: {spec.start.kind} ({spec.start.config or spec.start.path})", flush=True)
        t0 = time.perf_counter()
        ckpt = START_KINDS[spec.start.kind](StartContext(spec, start_seed, folder, paths))
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        entry["provenance"] = sitting
    record.check_start(start_seed, weights_digest(ckpt))
    entry["checkpoint"] = ckpt
    record.save()
    return ckpt


def run_study(spec: StudySpec, record: StudyRecord, only: Sequence[str] | None = None) -> None:
    """Steps 1-3 of the module docstring; the record is written after each."""
    chosen = parse_only(spec, only)
    t_start = time.perf_counter()
    # the code this process runs: taken once, at its start (a checkout that moves on while a study runs does not
    # change the code already imported)
    sitting = provenance(spec.out)
    record.data["sittings"].append({**sitting, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                                    "argv_only": list(only or [])})

    def save() -> None:
        record.data["sittings"][-1].update(seconds=round(time.perf_counter() - t_start, 1),
                                           peak_rss_gb=round(peak_rss_gb(), 2))
        record.save()

    paths = build_questions(spec.questions, spec.out)
    record.check_questions(split_digests(paths))
    sizes = ", ".join(f"{name} {v['n']}" for name, v in record.data["questions"].items())
    print(f"== {spec.name}: questions {sizes} (pairwise disjoint by problem) under "
          f"{os.path.join(spec.out, 'questions')}", flush=True)
    base = compose_config(spec.train.config, spec.train.overrides)
    settings = eval_settings(spec.evaluation, base)
    eval_paths = {name: paths[name] for name in spec.evaluation.splits}
    todo = [r for r in planned_runs(spec, chosen) if spec.run_key(*r) not in record.data["runs"]]
    starts = {}
    for start_seed in sorted({ss for _, ss, _ in todo} or ()):
        starts[start_seed] = _build_start(spec, record, start_seed, paths, sitting)
        evals = record.start(start_seed).setdefault("eval", {})
        missing = [s for s in map(spec.evaluation.seed_for, spec.seeds) if str(s) not in evals]
        model = load_for_evaluation(starts[start_seed]) if missing else None  # once for all its seeds
        for eval_seed in missing:
            print(f"== start {start_seed}: evaluation seed {eval_seed} ({settings.k} samples per question at "
                  f"T={settings.temperature})", flush=True)
            evals[str(eval_seed)] = {split: evaluate_split(*model, path, settings, eval_seed)
                                     for split, path in eval_paths.items()}
            save()
        del model
        gc.collect()
        for eval_seed in map(spec.evaluation.seed_for, spec.seeds):
            line = "  ".join(f"{split} avg@{settings.k} {100 * e['avg']:.1f}% maj@{settings.k} {100 * e['maj']:.1f}%"
                             for split, e in evals[str(eval_seed)].items())
            print(f"   start {start_seed}, evaluation seed {eval_seed}: {line}", flush=True)
    print(f"== runs: {len(todo)} to do; the record holds {len(record.data['runs'])}", flush=True)
    for i, (arm, start_seed, seed) in enumerate(todo, 1):
        key = spec.run_key(arm, start_seed, seed)
        print(f"\n== run {i}/{len(todo)}: {key} (labeler {spec.arms[arm].labeler})", flush=True)
        record.data["runs"][key] = _run(spec, arm, start_seed, seed, starts[start_seed], paths, eval_paths, settings,
                                        sitting)
        save()
        after = record.data["runs"][key]["eval"]
        print(f"   {key}: " + "  ".join(f"{split} avg@{settings.k} {100 * e['avg']:.1f}%" for split, e in after.items())
              + f" ({record.data['runs'][key]['seconds']:.0f} s)", flush=True)
    save()


def _run(spec: StudySpec, arm: str, start_seed: int, seed: int, start: str, paths: dict[str, str],
         eval_paths: dict[str, str], settings, sitting: dict) -> dict:
    """One run: its folder cleared (a killed attempt's logs would join its curves), ``ttrl fit``, evaluation."""
    root = os.path.join(spec.out, "runs", arm, f"start{start_seed}", f"seed{seed}")
    if os.path.isdir(root):
        shutil.rmtree(root)
    config = write_config(run_config(spec, arm, start, start_seed, seed, root, paths),
                          os.path.join(root, "study_run.yaml"))
    t0 = time.perf_counter()
    cli = fit_in_process(["--config", config])
    fit_seconds = time.perf_counter() - t0
    module = cli.model
    eval_seed = spec.evaluation.seed_for(seed)
    after = {split: evaluate_split(module.policy, module.tokenizer, getattr(module, "processor", None), path,
                                   settings, eval_seed) for split, path in eval_paths.items()}
    curves = logged_curves(cli.trainer)
    counters = getattr(module, "counters", None)
    seen = max(getattr(counters, "questions_seen", 0), 1)
    labelled = spec.arms[arm].role == "label_free"
    metrics = {
        "label_accuracy": curve_mean(curves.get("train/label_accuracy")) if labelled else None,
        "kl_p95": curve_mean(curves.get("train/kl_p95")),
        "kl_p95_max": max((v for _, v in curves.get("train/kl_p95", [])), default=None),
        "coverage": counters.questions_accepted / seen if counters is not None else None,
        "accepted_per_1k": 1000.0 * counters.questions_accepted / seen if counters is not None else None,
        "label_vs_majority": dict(counters.label_vs_majority) if counters is not None else {},
        "steps": int(cli.trainer.global_step),
    }
    if not spec.train.keep_checkpoints:
        for path in _checkpoints(root):
            os.remove(path)
    del cli, module
    gc.collect()
    return {"arm": arm, "labeler": spec.arms[arm].labeler, "start_seed": start_seed, "seed": seed,
            "eval_seed": eval_seed, "eval": after, "metrics": metrics, "curves": curves,
            "fit_seconds": round(fit_seconds, 1), "seconds": round(time.perf_counter() - t0, 1),
            "peak_rss_gb": round(peak_rss_gb(), 2), "config": os.path.relpath(config, spec.out), **sitting}


def _checkpoints(root: str) -> list[str]:
    import glob

    return glob.glob(os.path.join(root, "**", "*.ckpt"), recursive=True)
