"""Benchmark: attention_with_mass vs (a) SDPA without mass and (b) eager attention with output_attentions.

Default size is the issue's: B = 1, T = 2048, 16 heads, d = 128, causal, 50% image keys (the rest prompt /
generated / special), on CPU in float32. Peak extra memory: each candidate once in its own process (see
``benchmarks.common``); time: all candidates in one process, called in turns (``--repeats`` rounds). Ours is also
run at T/2 to show how its peak memory grows (O(T): about 2x, O(T^2): about 4x). Targets: ours within 1.25x
of (a), faster than (b), memory O(T). The verdict uses the paired ratio: the median over rounds of
ours / SDPA in the same round, which load drifting between rounds does not skew as much as a ratio of medians.
On CPU, ``sdpa_padded_no_mass`` (SDPA alone at the padded head dim of the indicator-channel trick, inputs
padded beforehand) shows how much of ours is the wider head and how much the copies into it.
On CUDA (``--device cuda --dtype bfloat16``) the baselines add SDPA-flash and FlashAttention-2 (if
installed; target within 1.05x). Usage:

    python -m benchmarks.kernels.attention_mass
    python -m benchmarks.kernels.attention_mass --device cuda --dtype bfloat16
"""
from __future__ import annotations

import argparse
import json
import statistics

from benchmarks.common import paired_ratios, paired_verdict
from benchmarks.common import (add_protocol_args, measure_candidates, mib, peak_extra_memory,
                     protocol_argv, time_interleaved, write_json)

NUM_GROUPS = 4
CANDIDATES = {
    "cpu": ["sdpa_no_mass", "sdpa_padded_no_mass", "eager_output_attentions", "ours_torch", "ours_cpp",
            "ours_torch_half_T", "ours_cpp_half_T"],
    "cuda": ["sdpa_no_mass", "sdpa_flash_no_mass", "flash_attn2_no_mass", "eager_output_attentions", "ours_triton",
             "ours_cuda", "ours_torch", "ours_triton_half_T", "ours_cuda_half_T"],
}


def build(args, T):
    import torch

    gen = torch.Generator().manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    shape = (args.B, args.heads, T, args.d)
    q, k, v = (torch.randn(shape, generator=gen).to(dtype).to(args.device) for _ in range(3))
    # 50% image keys in one block after a short prompt, as in a VLM prompt; the rest prompt/generated/special
    groups = torch.full((args.B, T), 1, dtype=torch.long)
    start = T // 8
    groups[:, start:start + T // 2] = 0
    groups[:, start + T // 2 + T // 8:] = 2
    groups[:, start - 1] = 3
    groups[:, start + T // 2] = 3
    return q, k, v, groups.to(args.device)


def eager_with_attentions(q, k, v, groups):
    """transformers' eager attention (the ``output_attentions=True`` path) + group sums of the returned map."""
    import torch
    from transformers.models.llama.modeling_llama import eager_attention_forward

    class _Module(torch.nn.Module):
        num_key_value_groups = 1

    T = q.shape[2]
    mask = torch.full((T, T), float("-inf"), device=q.device, dtype=q.dtype).triu(1)[None, None]
    out, weights = eager_attention_forward(_Module().eval(), q, k, v, mask, scaling=q.shape[-1] ** -0.5)
    onehot = torch.nn.functional.one_hot(groups, NUM_GROUPS).to(weights.dtype)
    mass = torch.einsum("bhqk,bkg->bhqg", weights, onehot)
    return out, mass


def candidate(name, args, inputs):
    """(fn, T) for a candidate name; inputs: cache T -> (q, k, v, groups)."""
    import torch.nn.functional as F

    from ttrl_lightning.ops import attention_with_mass

    T = args.T // 2 if name.endswith("_half_T") else args.T
    if T not in inputs:
        inputs[T] = build(args, T)
    q, k, v, groups = inputs[T]
    base_name = name.removesuffix("_half_T")
    if base_name == "sdpa_no_mass":
        return (lambda: (F.scaled_dot_product_attention(q, k, v, is_causal=True), None)), T
    if base_name == "sdpa_padded_no_mass":
        # the floor of the indicator-channel trick: SDPA alone at the padded head dim, inputs padded beforehand
        from ttrl_lightning.ops.torch_impl import padded_head_dim

        pad = padded_head_dim(args.d, NUM_GROUPS) - args.d
        qp, kp, vp = (F.pad(x, (0, pad)) for x in (q, k, v))
        scale = args.d ** -0.5
        return (lambda: (F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, scale=scale), None)), T
    if base_name == "sdpa_flash_no_mass":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def fn():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True), None
        return fn, T
    if base_name == "flash_attn2_no_mass":
        from flash_attn import flash_attn_func  # raises ImportError when not installed -> skipped

        qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        return (lambda: (flash_attn_func(qt, kt, vt, causal=True), None)), T
    if base_name == "eager_output_attentions":
        return (lambda: eager_with_attentions(q, k, v, groups)), T
    backend = base_name.split("_", 1)[1]
    return (lambda: attention_with_mass(q, k, v, groups, NUM_GROUPS, causal=True, backend=backend)), T


def worker(args):
    """Memory of one candidate (fresh process) or, with --worker timing, interleaved times of all."""
    import torch

    inputs = {}
    if args.worker == "timing":
        fns = {n: candidate(n, args, inputs)[0] for n in args.names.split(",")}
        result = time_interleaved(fns, args.device, args.repeats)
    else:
        fn, T = candidate(args.worker, args, inputs)
        result = peak_extra_memory(fn, args.device)
        out, mass = fn()
        result["T"] = T
        result["check"] = {"out_abs_mean": float(out.double().abs().mean())}
        if mass is not None:
            result["check"]["image_attention_mean"] = float(mass[..., 0].double().mean())
    result["threads"] = torch.get_num_threads()
    print(json.dumps(result))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--T", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--d", type=int, default=128)
    add_protocol_args(p, CANDIDATES, repeats=11, out="outputs/benchmarks/attention_mass.json")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    names = args.candidates.split(",") if args.candidates else CANDIDATES[args.device]
    common = ["--B", str(args.B), "--T", str(args.T), "--heads", str(args.heads), "--d", str(args.d)]
    common += protocol_argv(args)
    results, timing = measure_candidates(__spec__.name, names, common)
    print(f"\nattention_with_mass  B={args.B} T={args.T} heads={args.heads} d={args.d} causal, 50% image keys, "
          f"{args.dtype} on {args.device} ({args.repeats} interleaved timing rounds)")
    base = results.get("sdpa_no_mass")
    print(f"{'candidate':<26}{'T':>6}{'peak extra MiB':>16}{'median s':>11}{'time / sdpa':>13}{'paired':>9}")
    for name, r in results.items():
        r["time_ratio_vs_sdpa"] = r["median_s"] / base["median_s"] if base else float("nan")
        # median over rounds of (this / sdpa in the same round): robust to load that drifts between rounds
        r["paired_ratio_vs_sdpa"] = (statistics.median(a / b for a, b in zip(r["times_s"], base["times_s"]))
                                     if base else float("nan"))
        print(f"{name:<26}{r['T']:>6}{mib(r['peak_extra_bytes']):>16.1f}{r['median_s']:>11.4f}"
              f"{r['time_ratio_vs_sdpa']:>13.3f}{r['paired_ratio_vs_sdpa']:>9.3f}")
    ours = [n for n in results if n.startswith("ours_") and not n.endswith("_half_T")]
    eager = results.get("eager_output_attentions")
    if eager:
        ref = eager["check"].get("image_attention_mean")
        for n in ours:
            got = results[n]["check"].get("image_attention_mean")
            if ref is not None and got is not None and abs(got - ref) > 1e-3:
                print(f"[MISMATCH] {n} image mass mean {got} vs eager {ref}")
    flash = [results[n] for n in ("sdpa_flash_no_mass", "flash_attn2_no_mass") if n in results]
    for n in ours:
        r = results[n]
        line = f"target {n}: within 1.25x of SDPA: " \
               f"{paired_verdict(paired_ratios(r['times_s'], base['times_s']), 1.25, at_least=False)} " \
               f"({r['paired_ratio_vs_sdpa']:.3f}x paired median, {r['time_ratio_vs_sdpa']:.3f}x of medians)"
        if eager:
            line += f"; faster than eager: " \
                    f"{paired_verdict(paired_ratios(r['times_s'], eager['times_s']), 1.0, at_least=False)} " \
                    f"({eager['median_s'] / r['median_s']:.2f}x faster)"
        for f in flash:
            line += f"; vs flash {f['median_s']:.4f}s: {r['median_s'] / f['median_s']:.3f}x (target 1.05x)"
        print(line)
        half = results.get(n + "_half_T")
        if half and half["peak_extra_bytes"] > 0:
            growth = r["peak_extra_bytes"] / half["peak_extra_bytes"]
            print(f"memory growth {n} T/2 -> T: {growth:.2f}x ({'O(T)' if growth < 3 else 'looks O(T^2)'})")
    from ttrl_lightning.ops import selected_backend

    auto = selected_backend("attention_with_mass", args.device)
    print(f"auto backend for attention_with_mass on {args.device}: {auto}")
    write_json(args.out, {"config": vars(args), "auto_backend": auto, "results": results})


if __name__ == "__main__":
    main()
