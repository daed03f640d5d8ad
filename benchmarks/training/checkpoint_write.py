"""Writing a training checkpoint: Lightning's ``TorchCheckpointIO`` against ``ttrl fit``'s ``StreamingCheckpointIO``.

The checkpoint is what ``ttrl fit`` saves for a model: its ``state_dict`` and its AdamW state after one step
(``exp_avg`` and ``exp_avg_sq`` for every parameter): 1.50 GB (2^30 bytes) for ``--model models/smollm2``.
Lightning's writer serialises it into an ``io.BytesIO`` and then writes the buffer; the streaming writer runs
``torch.save`` into a temporary file beside the target and renames it (``safe_files.atomic_write``, fsynced).
Both write the same bytes (checked here). For each writer: the peak resident memory above the process's
level before the call (``VmHWM`` reset before it) and the wall time of ``--repeats`` calls in turns
(``benchmarks.common.time_interleaved``). Prints both and their ratio; writes JSON with the CPU and commit.

    python -m benchmarks.training.checkpoint_write --model models/smollm2 [--dir /a/local/disk]
"""
from __future__ import annotations

import argparse
import filecmp
import os
import tempfile

from benchmarks.common import cpu_features, git_commit, peak_extra_memory, time_interleaved, write_json

WRITERS = ("lightning", "streaming")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a local model folder (ttrl model import --out DIR)")
    p.add_argument("--repeats", type=int, default=3, help="timed saves per writer, in turns")
    p.add_argument("--dir", default=None, help="where the checkpoints are written (default: a temporary folder)")
    p.add_argument("--out", default="outputs/bench/checkpoint_write.json")
    return p


def training_checkpoint(model_dir: str) -> dict:
    """A Lightning-shaped checkpoint of the model at ``model_dir`` with its AdamW state after one step."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {"state_dict": {f"policy.{k}": v for k, v in model.state_dict().items()},
            "optimizer_states": [optimizer.state_dict()], "epoch": 0, "global_step": 1}


def main(argv: list[str] | None = None) -> int:
    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

    from ttrl_lightning.cli.checkpoint_io import StreamingCheckpointIO
    from ttrl_lightning.cli.allocator import return_large_blocks

    args = build_parser().parse_args(argv)
    return_large_blocks()  # as ttrl fit does: a freed buffer goes back to the system
    checkpoint = training_checkpoint(args.model)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        paths = {name: os.path.join(folder, f"{name}.ckpt") for name in WRITERS}
        writers = {"lightning": TorchCheckpointIO(), "streaming": StreamingCheckpointIO()}
        saves = {name: (lambda n=name: writers[n].save_checkpoint(checkpoint, paths[n])) for name in WRITERS}
        memory = {name: peak_extra_memory(saves[name]) for name in WRITERS}
        if not filecmp.cmp(paths["lightning"], paths["streaming"], shallow=False):
            raise SystemExit("the two writers wrote different files")
        size = os.path.getsize(paths["streaming"])
        times = time_interleaved(saves, repeats=args.repeats)
    gib = 2 ** 30
    print(f"checkpoint of {args.model}: {size / gib:.2f} GB (policy and AdamW state), written {args.repeats} times "
          f"per writer in turns; CPU {cpu_features()}")
    print(f"{'writer':<10} {'median s':>9} {'peak extra GB':>14}")
    for name in WRITERS:
        print(f"{name:<10} {times[name]['median_s']:>9.2f} {memory[name]['peak_extra_bytes'] / gib:>14.2f}")
    time_ratio = times["streaming"]["median_s"] / times["lightning"]["median_s"]
    print(f"streaming / lightning: time {time_ratio:.2f}x, peak extra memory "
          f"{memory['streaming']['peak_extra_bytes'] / gib:.2f} against {memory['lightning']['peak_extra_bytes'] / gib:.2f} GB")
    write_json(args.out, {"settings": vars(args), "checkpoint_bytes": size, "times": times, "memory": memory,
                          "time_ratio": time_ratio, "same_bytes": True, "cpu": cpu_features(),
                          "commit": git_commit()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
