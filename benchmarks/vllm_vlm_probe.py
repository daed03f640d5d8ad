"""Probe: can the installed vLLM serve a vision-language model with an image here? A tiny Qwen2-VL (head dim 64,
which vLLM's CPU attention accepts) is built in code with random weights, saved with a stock transformers
Qwen2-VL image processor, loaded by ``vllm.LLM`` with ``limit_mm_per_prompt={"image": 1}`` and asked for two
samples of one image prompt (``multi_modal_data``). It prints ``OK`` and the samples, or the stage that failed
and vLLM's own error line (vLLM inspects the model in a subprocess, so the root cause is in its log lines
above the verdict), and writes the same as JSON. The rollout engine's image path for vLLM is built on
what this shows. Usage::

    python benchmarks/vllm_vlm_probe.py --out outputs/bench/vllm_vlm_probe.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
                       limit_mm_per_prompt={"image": 1})
        stage = "generate"
        from PIL import Image

        text = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What colour?<|im_end|>\n"
                "<|im_start|>assistant\n")
        out = llm.generate([{"prompt": text, "multi_modal_data": {"image": [Image.new("RGB", (112, 112), "red")]}}],
                           vllm.SamplingParams(n=2, max_tokens=5, temperature=1.0))
        return {"ok": True, "stage": "done", "samples": [o.text for o in out[0].outputs], "vllm": vllm.__version__}
    except Exception as err:  # noqa: BLE001 - the point is to report whatever vLLM raises
        chain, cause = [], err
        while cause is not None:
            chain.append(f"{type(cause).__name__}: {str(cause).splitlines()[0][:300] if str(cause) else ''}")
            cause = cause.__cause__ or cause.__context__
        missing = re.findall(r"No module named '([^']+)'", traceback.format_exc())
        return {"ok": False, "stage": stage, "errors": chain, "missing_modules": sorted(set(missing))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="outputs/bench/vllm_vlm_probe.json")
    args = parser.parse_args()
    result = probe()
    if result["ok"]:
        print(f"OK: vLLM {result['vllm']} served a tiny Qwen2-VL with an image: {result['samples']}")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
