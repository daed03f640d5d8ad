"""Probe: can the installed vLLM serve a vision-language model with an image here, and does the rollout engine's
image path agree with the policy? A tiny Qwen2-VL (head dim 64, which vLLM's CPU attention accepts) is built
in code with random weights, saved with a stock transformers Qwen2-VL image processor, loaded by ``vllm.LLM``
with ``limit_mm_per_prompt={"image": 1}`` and asked for two samples of one image prompt
(``multi_modal_data``). Then, when that works, ``VLLMEngine`` samples 2 generated scene questions x 4 with
their images (``record_signals``) and the policy's teacher-forced pass with the images scores the same
tokens: the largest gap between the sampler's and the policy's log-probs must stay under ``--tolerance``.

It prints ``OK`` and the figures, or the stage that failed and vLLM's own error line (vLLM inspects the
model in a subprocess, so the root cause is in its log lines above the verdict), and writes the same as
JSON. Usage::

    python -m benchmarks.engines.vllm_vlm_probe --out outputs/bench/vllm_vlm_probe.json [--device cuda]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import traceback



def _error_chain(err: BaseException) -> dict:
    chain, cause = [], err
    while cause is not None:
        chain.append(f"{type(cause).__name__}: {str(cause).splitlines()[0][:300] if str(cause) else ''}")
        cause = cause.__cause__ or cause.__context__
    missing = re.findall(r"No module named '([^']+)'", traceback.format_exc())
    return {"errors": chain, "missing_modules": sorted(set(missing))}


def engine_check(device: str, tolerance: float) -> dict:
    """``VLLMEngine`` on 2 scene questions x 4 samples with their images, against the policy's teacher-forced
    log-probs with the same images (``signal_recording.replay_token_signals``)."""
    import torch

    from ttrl_lightning.data.questions import read_questions
    from ttrl_lightning.generate.scene_questions import write_scene_questions
    from ttrl_lightning.models import load_model, load_processor, load_tokenizer
    from ttrl_lightning.rollout import SamplingParams, VLLMEngine
    from ttrl_lightning.rollout.requests import PromptRenderer, SamplingRequest
    from ttrl_lightning.rollout.signal_recording import replay_token_signals

    tok, proc = load_tokenizer("tiny:qwen2_vl"), load_processor("tiny:qwen2_vl")
    model = load_model("tiny:qwen2_vl", tok, tiny_kwargs=dict(hidden=128, heads=2, kv_heads=2, vision_heads=2),
                       seed=0).to(device)
    questions = read_questions(write_scene_questions(tempfile.mkdtemp(prefix="vllm-vlm-scenes-"), 2, seed=0,
                                                     kinds=["colour", "shape"]))
    prompts = PromptRenderer(tok, proc).render([SamplingRequest(q["prompt"], q["images"]) for q in questions])
    engine = VLLMEngine(tok, processor=proc, record_signals=True, max_model_len=1024, dtype="float32")
    ro = engine.generate(model, prompts, SamplingParams(n=4, temperature=1.0, max_new_tokens=16, seed=0))
    own = ro.completion_mask.bool()
    policy = replay_token_signals(model, ro)["logprob"]
    gap = float((ro.sampler_logprobs[own] - policy[own]).abs().max())
    v = ro.signals["visual_engagement"][own]
    engine.close()
    return {"engine_ok": gap < tolerance, "rows": int(own.shape[0]), "tokens": int(own.sum()),
            "max_logprob_gap": gap, "tolerance": tolerance, "visual_engagement_mean": float(v.mean()),
            "images_per_row": sorted({len(r) for r in ro.images})}


def probe() -> dict:
    import torch
    from transformers import Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from ttrl_lightning.models import TINY_CONFIGS, load_tokenizer

    stage = "build"
    try:
        tok = load_tokenizer("tiny:qwen2_vl")
        cfg = TINY_CONFIGS["qwen2_vl"](tok, hidden=128, heads=2, kv_heads=2, vision_heads=2)
        torch.manual_seed(0)
        folder = tempfile.mkdtemp(prefix="vllm-vlm-probe-")
        Qwen2VLForConditionalGeneration(cfg).save_pretrained(folder)
        tok.save_pretrained(folder)
        Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112).save_pretrained(folder)
        stage = "import vllm"
        import vllm


        stage = "vllm.LLM"
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        llm = vllm.LLM(model=folder, tokenizer=folder, dtype="float32", max_model_len=1024, enforce_eager=True,
                       limit_mm_per_prompt={"image": 1}, gpu_memory_utilization=0.25)
        stage = "generate"
        from PIL import Image

        text = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What colour?<|im_end|>\n"
                "<|im_start|>assistant\n")
        out = llm.generate([{"prompt": text, "multi_modal_data": {"image": [Image.new("RGB", (112, 112), "red")]}}],
                           vllm.SamplingParams(n=2, max_tokens=5, temperature=1.0))
        samples = [o.text for o in out[0].outputs]
        del llm, out  # its GPU memory goes back before the engine check starts another engine
        import gc

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return {"ok": True, "stage": "done", "samples": samples, "vllm": vllm.__version__}
    except Exception as err:  # noqa: BLE001 - the point is to report whatever vLLM raises
        return {"ok": False, "stage": stage, **_error_chain(err)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="outputs/bench/vllm_vlm_probe.json")
    parser.add_argument("--device", default="cpu", help="the policy's device for the engine check (cuda on a GPU)")
    parser.add_argument("--tolerance", type=float, default=2e-2,
                        help="largest sampler-vs-policy log-prob gap the engine check accepts (float32)")
    parser.add_argument("--require", action="store_true",
                        help="exit 1 when vLLM cannot serve the model (a GPU machine, where it must)")
    args = parser.parse_args()
    result = probe()
    if result["ok"]:
        print(f"OK: vLLM {result['vllm']} served a tiny Qwen2-VL with an image: {result['samples']}")
        try:
            result["engine"] = engine_check(args.device, args.tolerance)
        except Exception as err:  # noqa: BLE001 - reported, and the exit code says it failed
            result["engine"] = {"engine_ok": False, **_error_chain(err)}
        e = result["engine"]
        if "max_logprob_gap" in e:
            print(f"engine: {e['rows']} rows, {e['tokens']} tokens, images per row {e['images_per_row']}; sampler vs "
                  f"policy log-prob gap {e['max_logprob_gap']:.2e} (tolerance {e['tolerance']:.0e}): "
                  f"{'PASS' if e['engine_ok'] else 'FAIL'}; mean visual engagement {e['visual_engagement_mean']:.4f}")
        else:
            print("engine: FAILED: " + " <- ".join(e["errors"]))
    else:
        print(f"FAILED at {result['stage']}: " + " <- ".join(result["errors"]))
        if result["missing_modules"]:
            print(f"missing modules: {', '.join(result['missing_modules'])}")
        else:  # vLLM inspects the model in a subprocess and logs the cause there (its log lines above)
            print("the cause is in vLLM's log lines above (it inspects the model in a subprocess)")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    from ttrl_lightning.safe_files import atomic_write

    with atomic_write(args.out) as fh:
        json.dump(result, fh, indent=1)
        fh.write("\n")
    if not result["ok"]:
        return 1 if args.require else 0
    return 0 if result["engine"]["engine_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
