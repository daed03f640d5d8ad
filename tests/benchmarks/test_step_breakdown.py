"""benchmarks/training/ttrl_step_breakdown.py's own parts: every --extra kept, and what a step holds counted
without the parameters of a reference kept on disk."""
from types import SimpleNamespace

import torch
from torch import nn

from benchmarks.training.ttrl_step_breakdown import build_parser, held_tensors


def test_every_extra_option_is_kept():
    args = build_parser().parse_args(["--model", "m", "--extra=--trainer.precision=32-true",
                                      "--extra=--model.init_args.policy.activation_checkpointing=true"])
    assert args.extra == ["--trainer.precision=32-true", "--model.init_args.policy.activation_checkpointing=true"]
    assert build_parser().parse_args(["--model", "m"]).extra == []


def test_held_tensors_counts_each_storage_once_and_no_meta_parameter():
    policy = nn.Linear(256, 256, bias=False)  # 256 KiB
    shared = nn.Linear(256, 256, bias=False)
    shared.weight = policy.weight  # a reference that shares the policy's storage: not counted again
    on_disk = nn.Linear(256, 256, bias=False).to("meta")  # a reference on disk between uses: holds nothing
    opt = torch.optim.SGD(policy.parameters(), lr=0.1, momentum=0.9)
    policy.weight.grad = torch.ones_like(policy.weight)
    opt.step()  # one momentum buffer, 256 KiB
    kib = 2 ** -20
    for ref, want in ((shared, 0.0), (on_disk, 0.0), (nn.Linear(256, 256, bias=False), 256 * kib)):
        held = held_tensors(SimpleNamespace(policy=policy, reference_model=ref), opt)
        assert held["policy"] == 256 * kib and held["optimizer_state"] == 256 * kib
        assert held["reference"] == want
