"""The decode-step levers of issue "a real-model TTRL step at the speed of the machine", measured side by side.

The sampling stage of a real-model TTRL step decodes ``--questions`` x ``--votes`` sequences (8 x 8 in the
real-model config) for ``--new-tokens`` tokens. Its per-token cost above the GEMM floor is per-op overhead:
the KV cache's ``torch.cat`` per layer and step, rotary embedding, RMSNorm. Three ways of running the same
decode through transformers' ``generate`` (the same prompts, ``min_new_tokens = max_new_tokens`` so every row
decodes every token, sampling at T 1.0) are timed in turns in one process (``benchmarks.common.time_interleaved``):

=================  ==========================================================================================
``dynamic``        ``DynamicCache`` (grown by ``torch.cat`` every step): what the project's samplers use
``static``         ``cache_implementation="static"``: a pre-allocated cache written in place
``static_compiled`` the static cache with transformers' ``torch.compile`` of the forward (``CompileConfig``,
                   allowed on CPU); its compilation runs in the untimed first call and is reported apart
=================  ==========================================================================================

``generate`` prefills every row's prompt (the project's prompt-shared sampler prefills each prompt once), so
each variant is also timed with one new token, and its decode time is the difference: the ``new_tokens - 1``
decode steps alone. Prints each variant's median decode seconds, decode tokens/s and its ratio to ``dynamic``
(and the whole call's); writes JSON with the CPU's float features, threads and commit. A lever pays where its
decode ratio is clearly below 1 on this machine.

    python -m benchmarks.training.decode_levers --model models/smollm2 [--questions 8 --votes 8 --new-tokens 16]
"""
from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.common import cpu_features, git_commit, peak_rss_gb, time_interleaved, write_json
from benchmarks.training.ttrl_step_breakdown import CHAIN_SUM, INSTRUCTION

VARIANTS = ("dynamic", "static", "static_compiled")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a local model folder (ttrl model import --out DIR)")
    p.add_argument("--questions", type=int, default=8, help="distinct prompts (the config's batch: 8)")
    p.add_argument("--votes", type=int, default=8, help="rows per prompt (the config's M: 8)")
    p.add_argument("--new-tokens", type=int, default=16, help="decoded tokens per row (the config's: 16)")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per variant, in turns")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--out", default="outputs/bench/decode_levers.json")
    return p


def _prompts(tokenizer, n: int) -> list[str]:
    """``n`` chain_sum questions of the real-model config, as the model reads them (the project's prompt rule:
    the chat template where the model has one)."""
    from ttrl_lightning.data.reasoning_gym_tasks import reasoning_gym_questions
    from ttrl_lightning.rollout.requests import PromptRenderer

    questions = reasoning_gym_questions("reasoning_gym:chain_sum", n, seed=1, **CHAIN_SUM)
    return [r.text for r in PromptRenderer(tokenizer).render([f"{q['prompt']} {INSTRUCTION}" for q in questions])]


def main(argv: list[str] | None = None) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, CompileConfig, GenerationConfig

    args = build_parser().parse_args(argv)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    batch = tokenizer(_prompts(tokenizer, args.questions), return_tensors="pt", padding=True)
    inputs = {k: v.repeat_interleave(args.votes, dim=0) for k, v in batch.items()}
    rows, prompt_len = inputs["input_ids"].shape

    def config(cache: str | None, compiled: bool, new_tokens: int) -> GenerationConfig:
        compile_config = None
        if compiled:
            compile_config = CompileConfig(fullgraph=False, dynamic=False)
            compile_config._compile_all_devices = True  # transformers compiles on CUDA-like devices only by default
        return GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
                                min_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id,
                                cache_implementation=cache, compile_config=compile_config,
                                disable_compile=not compiled)

    first_call_s = {}

    def run(name: str, new_tokens: int):
        compiled = name == "static_compiled"
        generation_config = config("static" if name != "dynamic" else None, compiled, new_tokens)

        def call():
            with torch.inference_mode():
                out = model.generate(**inputs, generation_config=generation_config)
            assert out.shape == (rows, prompt_len + new_tokens), out.shape
        return call

    fns = {}
    for name in args.variants:  # the first call of each (compilation included) is timed apart
        for n in (args.new_tokens, 1):
            fn = run(name, n)
            t0 = time.perf_counter()
            fn()
            first_call_s[f"{name}@{n}"] = time.perf_counter() - t0
            fns[f"{name}@{n}"] = fn
    times = time_interleaved(fns, repeats=args.repeats)
    decode_tokens = rows * (args.new_tokens - 1)
    results = {}
    for name in args.variants:
        whole, prefill = times[f"{name}@{args.new_tokens}"], times[f"{name}@1"]
        decode = [a - b for a, b in zip(whole["times_s"], prefill["times_s"])]
        results[name] = {"whole_s": whole, "one_token_s": prefill, "decode_s": decode,
                         "decode_median_s": statistics.median(decode),
                         "first_call_s": first_call_s[f"{name}@{args.new_tokens}"]}
    base = results.get("dynamic")
    print(f"decode levers: {rows} rows ({args.questions} prompts x {args.votes}), prompt {prompt_len} tokens, "
          f"{args.new_tokens} new tokens, {torch.get_num_threads()} threads, CPU {cpu_features()}")
    print(f"{'variant':<16} {'decode s':>9} {'tokens/s':>9} {'vs dynamic':>11} {'whole call s':>13} "
          f"{'vs dynamic':>11} {'first call s':>13}")
    fmt = (lambda x: f"{x:>10.2f}x" if x is not None else f"{'-':>11}")
    for name, r in results.items():
        r["decode_tokens_per_s"] = decode_tokens / r["decode_median_s"]
        r["decode_ratio_to_dynamic"] = r["decode_median_s"] / base["decode_median_s"] if base else None
        r["whole_ratio_to_dynamic"] = (r["whole_s"]["median_s"] / base["whole_s"]["median_s"]) if base else None
        print(f"{name:<16} {r['decode_median_s']:>9.2f} {r['decode_tokens_per_s']:>9.0f} "
              f"{fmt(r['decode_ratio_to_dynamic'])} {r['whole_s']['median_s']:>13.2f} "
              f"{fmt(r['whole_ratio_to_dynamic'])} {r['first_call_s']:>13.1f}")
    write_json(args.out, {"settings": vars(args), "rows": rows, "prompt_tokens": prompt_len, "results": results,
                          "threads": torch.get_num_threads(), "cpu": cpu_features(), "commit": git_commit(),
                          "peak_rss_gb": peak_rss_gb()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
