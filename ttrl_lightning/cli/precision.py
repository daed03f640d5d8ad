"""The trainer's precision when a ``ttrl fit`` config names none: bf16-mixed where the CPU has bf16 in hardware.

On a CPU run (``trainer.accelerator: cpu``, or ``auto`` on a machine without a GPU) with no
``trainer.precision`` set, ``ttrl fit`` chooses:

* ``bf16-mixed`` on a CPU with native bf16 dot products (AVX512-BF16 or AMX, ``hardware.native_bf16``): the
  model passes of the step (sampling, the reference and policy log-prob passes, the backward) run under
  ``torch.autocast("cpu", torch.bfloat16)``; the weights, the optimizer state and every update stay fp32
  (Lightning's ``MixedPrecision``), and the module keeps labelling and rewards in fp32
  (``modules.base.full_precision``);
* ``32-true`` elsewhere: without hardware bf16 PyTorch emulates it, slower than fp32.

The choice is printed once, with how to force the other (``--trainer.precision 32-true`` or ``bf16-mixed``); a
config or command line that sets ``trainer.precision`` is used as given. GPU runs keep Lightning's default
(their configs name their precision).
"""
from __future__ import annotations

from ttrl_lightning.hardware import cpu_features, describe_float_features, native_bf16

#: what the choice can be, and what forces it
CPU_BF16, CPU_FP32 = "bf16-mixed", "32-true"


def runs_on_cpu(accelerator, cuda_available: bool) -> bool:
    """Whether a trainer with ``accelerator`` (a name, None or an Accelerator object) runs on the CPU."""
    if accelerator is None or accelerator == "auto":
        return not cuda_available
    return isinstance(accelerator, str) and accelerator.lower() == "cpu"


def choose_precision(accelerator, features: dict, cuda_available: bool) -> tuple[str | None, str]:
    """``(precision, why)`` for a trainer whose config sets no precision: ``bf16-mixed`` or ``32-true`` on a CPU
    run (by ``features``, ``hardware.cpu_features``), None elsewhere (Lightning's default)."""
    if not runs_on_cpu(accelerator, cuda_available):
        return None, "not a CPU run"
    found = describe_float_features(features)
    if native_bf16(features):
        return CPU_BF16, (f"this CPU has bf16 dot products in hardware ({found}); "
                          f"--trainer.precision {CPU_FP32} forces fp32")
    return CPU_FP32, (f"this CPU has no bf16 dot products in hardware ({found}; bf16 needs AVX512-BF16 or AMX "
                      f"and would be emulated, slower than fp32); --trainer.precision {CPU_BF16} forces it")


def fill_precision(trainer_config, features: dict | None = None, cuda_available: bool | None = None) -> str | None:
    """Set ``trainer_config["precision"]`` where it is unset and the run is on the CPU; returns the line that
    says what was chosen and why (None when nothing was chosen)."""
    if trainer_config.get("precision") is not None:
        return None
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    precision, why = choose_precision(trainer_config.get("accelerator"),
                                      cpu_features() if features is None else features, cuda_available)
    if precision is None:
        return None
    trainer_config["precision"] = precision
    return f"precision: {precision} ({why})"
