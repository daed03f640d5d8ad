"""Benchmark: prompt-shared sampling of an image question against ``generate`` on repeated prompts, in one run.

The HF engine samples an image question's n completions either by ``model.generate`` on the prompt repeated n
times (``HFGenerateEngine(share_prompt=False)``: the image encoded and the prompt prefilled n times) or prompt-
shared (the default: the image encoded and the prompt prefilled once, the KV cache repeated n ways, M-RoPE
continued from the prompt's ``rope_deltas``; ``rollout.shared_prefill``). On one image question at n 1 and
``--n`` (16), with one new token so that the prefill is the work:

* wall time of ``engine.generate``, the candidates in turns for ``--rounds`` rounds (paired ratios, the verdict
  rule of ``benchmarks.common``); the prompt-shared path must stay O(prompt): its time at n 16 at most
  ``--growth`` (2x) its time at n 1, the same test as the text path (``rollout_engines.py --parts prefill``);
* vision-tower forwards and the images they encode, counted by a hook on the model's vision tower: one image
  per question prompt-shared (a check); ``generate`` is counted beside it (with transformers 5.19 it too
  encodes the image once and repeats the prompt's tokens, so its extra cost is the decoder's prefill).

The model is a Qwen2-VL of the given size with random weights (built in code, no download), the question a
generated scene (``generate.scene_questions``) shown at ``--pixels`` (448 x 448: 256 image tokens). Writes
``--out`` (JSON). Usage::

    python -m benchmarks.engines.vlm_prompt_sharing                  # ~15 s on 2 CPU cores
    python -m benchmarks.engines.vlm_prompt_sharing --device cuda --dtype bfloat16 --hidden 1024 --layers 8
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from benchmarks.common import write_json
from benchmarks.common import paired_ratios, paired_verdict

ENGINES = ("generate", "shared")


def build(args):
    """The model, its tokenizer and processor, and one image question as the engine takes it."""
    from benchmarks.engines.generate_signals import random_qwen2_vl

    from ttrl_lightning.data.questions import read_questions
    from ttrl_lightning.generate.scene_questions import write_scene_questions
    from ttrl_lightning.models import TinyVLProcessor
    from ttrl_lightning.rollout.requests import PromptRenderer, SamplingRequest

    model, tok = random_qwen2_vl(args)
    processor = TinyVLProcessor(tok, min_pixels=args.pixels, max_pixels=args.pixels)
    q = read_questions(write_scene_questions(os.path.join(args.workdir, "scenes"), 1, seed=0))[0]
    (prompt,) = PromptRenderer(tok, processor).render([SamplingRequest(q["prompt"], q["images"])])
    return model, tok, processor, prompt


class VisionCounter:
    """Counts the vision tower's forwards and the images they encode (rows of ``grid_thw``)."""

    def __init__(self, model):
        tower = getattr(getattr(model, "model", model), "visual", None)
        if tower is None:
            raise RuntimeError(f"{type(model).__name__} has no vision tower at .model.visual")
        self.calls = self.images = 0
        tower.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs):
        grid = kwargs.get("grid_thw", args[1] if len(args) > 1 else None)
        self.calls += 1
        self.images += int(grid.shape[0]) if grid is not None else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=32000, help="vocabulary size of the model")
    p.add_argument("--pixels", type=int, default=448 * 448, help="the image's pixels (448 x 448: 256 tokens)")
    p.add_argument("--n", type=int, default=16, help="samples of the large case (the small one is 1)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--growth", type=float, default=2.0,
                   help="the most the prompt-shared time may grow from n 1 to --n (x)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--workdir", default="outputs/vlm_prompt_sharing")
    p.add_argument("--out", default="outputs/vlm_prompt_sharing.json")
    args = p.parse_args(argv)
    import torch

    from ttrl_lightning.rollout import HFGenerateEngine, SamplingParams
    from ttrl_lightning.rollout.image_sampling import image_inputs

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok, processor, prompt = build(args)
    prompt_tokens = int(image_inputs(processor, prompt.text, prompt.images)["input_ids"].shape[1])
    engines = {"generate": HFGenerateEngine(tok, processor=processor, share_prompt=False),
               "shared": HFGenerateEngine(tok, processor=processor)}
    counter = VisionCounter(model)
    cases = [(name, n) for name in ENGINES for n in (1, args.n)]

    def sample(name, n, seed):
        return engines[name].generate(model, [prompt], SamplingParams(n=n, max_new_tokens=1, seed=seed))

    forwards = {}
    for case in cases:  # warm-up, and the vision-tower count of one call
        before = (counter.calls, counter.images)
        sample(*case, seed=0)
        forwards[case] = {"calls": counter.calls - before[0], "images": counter.images - before[1]}
    times = {case: [] for case in cases}
    for r in range(args.rounds):
        for name, n in cases[r % len(cases):] + cases[:r % len(cases)]:
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
            sample(name, n, seed=r + 1)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[(name, n)].append(time.perf_counter() - t)
    big = args.n
    growth = {name: paired_ratios(times[(name, big)], times[(name, 1)]) for name in ENGINES}
    speedup = paired_ratios(times[("generate", big)], times[("shared", big)])
    result = {"settings": vars(args), "threads": torch.get_num_threads(), "load": os.getloadavg()[0],
              "prompt_tokens": prompt_tokens, "seconds": {f"{name}_n{n}": ts for (name, n), ts in times.items()},
              "vision_forwards": {f"{name}_n{n}": v for (name, n), v in forwards.items()},
              "growth": growth, "generate_over_shared": speedup}
    print(f"Qwen2-VL hidden {args.hidden} x {args.layers} layers, one image question of {prompt_tokens} tokens "
          f"({args.pixels} pixels), one new token, on {args.device} ({args.dtype}, {torch.get_num_threads()} "
          f"threads, load {result['load']:.2f}), {args.rounds} rounds in turns")
    print(f"{'engine':<10}{'n 1 (s)':>10}{'n ' + str(big) + ' (s)':>11}{'growth':>9}"
          f"{'vision forwards / images at n ' + str(big):>34}")
    for name in ENGINES:
        f = forwards[(name, big)]
        print(f"{name:<10}{statistics.median(times[(name, 1)]):>10.3f}{statistics.median(times[(name, big)]):>11.3f}"
              f"{statistics.median(growth[name]):>8.2f}x{f['calls']:>20} / {f['images']}")
    result["verdicts"] = {
        "shared_O_prompt": paired_verdict(growth["shared"], args.growth, at_least=False),
        "one_image_encoding_per_question": "PASS" if forwards[("shared", big)]["images"] == 1 else
        f"FAIL ({forwards[('shared', big)]['images']} images encoded)"}
    print(f"generate / shared at n {big}: x{statistics.median(speedup):.2f} (paired median)")
    print(f"target: prompt-shared time at n {big} <= {args.growth:g}x its time at n 1 (O(prompt)): "
          f"{result['verdicts']['shared_O_prompt']}")
    print(f"target: one image encoded per question prompt-shared: {result['verdicts']['one_image_encoding_per_question']}")
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
