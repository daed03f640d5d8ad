"""Peak extra resident memory of one op call, each measured in a fresh Python process.

Measured inside the pytest process, the resident set carries whatever earlier tests left behind: when the
collector frees some of it during the measured call, the resident set falls below its starting point and hides
the call's own peak (a run of the whole suite once read 0 bytes for materialised [256, 65536] logits). A fresh
process holds only the case's inputs. The measurement itself is the benchmarks' (benchmarks/common.py).

    python -m tests.ops._peak_memory CASE [ARG]   # prints one JSON line: {"peak_extra_bytes": ...} or {"skip": ...}
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def peak_extra_bytes(case: str, arg: str = "") -> int:
    """Peak extra bytes of ``case`` (a name in :data:`CASES`, with its one argument) in a fresh process; skips
    the calling test where the peak resident set cannot be reset (it needs Linux's /proc/self/clear_refs)."""
    proc = subprocess.run([sys.executable, "-m", "tests.ops._peak_memory", case, arg], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])})
    if proc.returncode != 0:
        raise RuntimeError(f"peak-memory worker {case} {arg} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    return result["peak_extra_bytes"]


# each case builds its inputs, warms up where the op is ours (thread pools, GEMM buffers, lazy init) and returns
# the call to measure; the baselines that materialise the logits are measured cold (lazy init only adds to them)

def _token_stats(backend: str):
    """M = 1024, H = 32, V = 65536: [M, V] float32 logits would take 256 MiB (tests/ops/test_token_stats.py)."""
    import torch

    from ttrl_lightning.ops import token_stats
    from ttrl_lightning.ops.reference import token_stats_reference

    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(1024, 32, generator=gen)
    weight = torch.randn(65536, 32, generator=gen) * 0.1
    ids = torch.randint(0, 65536, (1024,), generator=gen)
    if backend == "reference":
        return lambda: token_stats_reference(hidden, weight, ids)
    token_stats(hidden, weight, ids, backend=backend)
    return lambda: token_stats(hidden, weight, ids, backend=backend)


def _linear_logprobs(backend: str):
    """Forward + backward at M = 256, H = 16, V = 65536 in chunks of 1024 (tests/ops/test_linear_logprobs.py)."""
    import torch

    from ttrl_lightning.ops.linear_logprobs import linear_logprobs
    from ttrl_lightning.ops.linear_logprobs_reference import linear_logprobs_reference

    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(256, 16, generator=gen).requires_grad_()
    weight = (torch.randn(65536, 16, generator=gen) * 0.1).requires_grad_()
    ids = torch.randint(0, 65536, (256,), generator=gen)
    if backend == "reference":
        fn = linear_logprobs_reference
    else:
        def fn(h, w, y):
            return linear_logprobs(h, w, y, backend=backend, chunk_size=1024)

    def run():
        hidden.grad = weight.grad = None
        fn(hidden, weight, ids).sum().backward()

    if backend != "reference":
        run()
    return run


def _grpo_logprobs(impl: str):
    """GRPOModule.sequence_logprobs forward + backward over R = 16 rollouts of C = 128 tokens, V = 32,768 with a
    tied head (H = 16): [R, C, V] float32 logits would take 256 MiB (tests/modules/test_logprobs.py)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.modules._models import random_rollouts
    from ttrl_lightning.modules import GRPOModule, PolicySpec
    from ttrl_lightning.modules.specs import GRPOSpec

    V = 32768
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
                                         max_position_embeddings=256)).train()
    module = GRPOModule(policy=PolicySpec(model="tiny:qwen2"), grpo=GRPOSpec(logprob_impl=impl))

    def step(rollouts):
        def run():
            model.zero_grad(set_to_none=True)
            (module.sequence_logprobs(model, rollouts) * rollouts.completion_mask).sum().backward()
        return run

    if impl != "materialized":
        step(random_rollouts(V, R=2, P=4, C=8))()
    return step(random_rollouts(V, R=16, P=4, C=128))


CASES = {"token_stats": _token_stats, "linear_logprobs": _linear_logprobs, "grpo_logprobs": _grpo_logprobs}


def main(case: str, arg: str) -> None:
    sys.path.insert(0, ROOT)  # run as a script: the repository root, where the benchmarks package lies
    from benchmarks.common import peak_extra_memory, reset_peak_rss

    if not reset_peak_rss():
        print(json.dumps({"skip": "cannot reset the peak RSS on this system (/proc/self/clear_refs needs Linux)"}))
        return
    fn = CASES[case](arg)
    print(json.dumps({"peak_extra_bytes": peak_extra_memory(fn, "cpu")["peak_extra_bytes"]}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
