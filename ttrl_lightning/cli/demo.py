"""``ttrl demo``: the README's main job on the embedded default -- a tiny model improves itself on unlabeled
questions by test-time RL, on CPU, with no download. It is a study (``ttrl study``) of a packaged config:

* ``--part ttrl`` (default): ``configs/study/demo.yaml``. SFT of a tiny randomly initialised Llama on generated
  two-number additions (Solver and Self-Harmony's fused Reframe-and-Solve formats; no trace shows a question of
  the TTRL splits answered), then test-time RL on unlabeled, shifted questions (two carries) once per
  pseudo-labeler (``majority``, ``self_harmony``, ``pixel``) from the same SFT checkpoint, with the EMA anchor and
  the PID-controlled KL coefficient; avg@8 / maj@8 before and after, per-question counts kept, the difference
  from the SFT model with a paired 95% interval. One seed: ``configs/study/demo_seeds.yaml`` is the same study
  over 3 SFT seeds x 3 TTRL seeds with the random-, null- and gold-reward controls.
* ``--part vlm``: ``configs/study/demo_vlm.yaml``, a tiny Qwen2-VL on generated scene questions with
  ``majority``, ``visconf``, ``pixel`` and the ``random_reward`` / ``gold_reward`` controls over 3 seeds.
* ``--part bon``: best-of-N on a synthetic rollout pool with VisConf's Table-1 protocol (its numbers describe
  the selection rules, not a model).

The demos run under portable numerics (``cli.numerics``: PyTorch's AVX2 kernels, ``MKL_CBWR=AVX2``, 2 threads,
in a child process). A finished demo's record is kept (``outputs/demo/study.json``): running it again prints
its tables; ``--restart`` moves the record aside and runs it again.
"""
from __future__ import annotations

import argparse
import os

from . import main as ttrl_main
from .arguments import positive_int

#: --part -> the packaged study config it runs
DEMO_STUDIES = {"ttrl": "study/demo.yaml", "vlm": "study/demo_vlm.yaml"}


def demo_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ttrl demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("ttrl", "vlm", "bon"), default="ttrl",
                   help="ttrl: the test-time RL demo (default); vlm: the vision-language one; bon: best-of-N on a "
                        "synthetic pool")
    p.add_argument("--out", default=None, help="output folder (default: the study config's; bon: outputs/demo)")
    p.add_argument("--restart", action="store_true", help="move an earlier record aside and run the demo again")
    p.add_argument("--only", action="append", default=None, metavar="ARM[/SEED]", help="run only this arm")
    p.add_argument("--pool-questions", type=positive_int, default=600,
                   help="questions in the synthetic pool (--part bon)")
    p.add_argument("--numerics-digest", action="store_true",
                   help="print the SHA-256 of the demo's SFT weights after --digest-steps steps under portable "
                        "numerics, and the CPU: two CPU kinds that print the same digest train the same demo")
    p.add_argument("--digest-steps", type=positive_int, default=50, help="SFT steps of --numerics-digest")
    args = p.parse_args(argv)
    if args.numerics_digest:
        return numerics_digest(DEMO_STUDIES["vlm" if args.part == "vlm" else "ttrl"], args.digest_steps, argv)
    if args.part == "bon":
        return _bon_part(args.out or "outputs/demo", args.pool_questions)
    study = ["study", "--config", DEMO_STUDIES[args.part], "--restart" if args.restart else "--resume"]
    if args.out:
        study += ["--out", args.out]
    for only in args.only or ():
        study += ["--only", only]
    return ttrl_main(study)


def numerics_digest(study: str, steps: int, argv: list[str]) -> int:
    """The SHA-256 of the weights of the study's SFT start (start seed 0) after ``steps`` steps, trained under
    portable numerics (``cli.numerics``) in a temporary folder, with the CPU's model and float features and the
    pinned variables: the check that a demo trains the same model on two CPU kinds (docs/studies/demo.md lists
    the digests measured)."""
    import json
    import tempfile
    from dataclasses import replace

    from ..hardware import cpu_features
    from .numerics import is_portable, numerics_report, run_portable

    if not is_portable():
        return run_portable(["demo", *argv])
    from ..study.digest import weights_digest
    from ..study.questions import build_questions
    from ..study.spec import load_spec
    from ..study.starts import START_KINDS, StartContext

    spec = load_spec(study)
    spec = replace(spec, start=replace(spec.start, steps=steps))
    with tempfile.TemporaryDirectory() as folder:
        paths = build_questions(spec.questions, folder)
        ckpt = START_KINDS[spec.start.kind](StartContext(spec, spec.start.seeds[0], os.path.join(folder, "sft"),
                                                         paths))
        digest = weights_digest(ckpt)
    cpu = cpu_features()
    flags = ", ".join(k for k, v in cpu.items() if v is True) or "none"
    print(f"\nnumerics digest: {digest}")
    print(f"  {study}: SFT start seed {spec.start.seeds[0]}, {steps} steps; CPU {cpu.get('model')} ({flags}); "
          f"numerics {json.dumps(numerics_report(), sort_keys=True)}")
    return 0


def _bon_part(out: str, questions: int) -> int:
    os.makedirs(out, exist_ok=True)
    pool = os.path.join(out, "pool.jsonl")
    print("== best-of-N on a synthetic pool (its numbers describe the selection rules, not a model)")
    rc = ttrl_main(["pool", "simulate", "--out", pool, "--questions", str(questions), "--seed", "0"])
    if rc:
        return rc
    return ttrl_main(["bon", "--pool", pool, "--out", os.path.join(out, "bon_report.json")])
