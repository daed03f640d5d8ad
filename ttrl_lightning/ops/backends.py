"""Backend registry for the signal ops, resolved lazily: on first use, then cached.

Backends (by name): ``triton`` (GPU; CPU only under ``TRITON_INTERPRET=1``), ``cuda`` (the ``_C_cuda``
extension built from ``csrc/``), ``cpp`` (the OpenMP ``_C`` extension), ``torch`` (chunked PyTorch, any
device). ``TTRL_KERNEL_IMPL`` selects one for every call (``auto`` by default); a requested backend that is
missing raises at the first op call (or :func:`selected_backend`), an unknown name raises naming the known
ones. ``auto`` picks per device and op from ``AUTO_ORDER`` and logs one line when it falls back.

The environment is read, and the backends probed, at first use; :func:`reset_backend_cache` forgets all of
it, so the next call reads ``TTRL_KERNEL_IMPL`` (and ``TRITON_INTERPRET``) again -- e.g. a test that sets
them in-process.
"""
from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass, field
from typing import Callable

import torch  # noqa: F401  (the compiled extensions link against torch's libraries: load them first)

log = logging.getLogger("ttrl_lightning.ops")

ENV_VAR = "TTRL_KERNEL_IMPL"
OPS = ("token_stats", "attention_with_mass")

# Preference order per device type and op for ``auto``. On CPU the order follows benchmarks/token_stats.py
# and benchmarks/attention_mass.py: the fused C++ epilogue wins for token_stats, while SDPA with indicator
# channels (torch) beats the hand-written C++ flash loop for attention (see docs/kernels.md).
AUTO_ORDER = {
    "cuda": {"token_stats": ("triton", "cuda", "torch"), "attention_with_mass": ("triton", "cuda", "torch")},
    "cpu": {"token_stats": ("cpp", "torch"), "attention_with_mass": ("torch", "cpp")},
}


@dataclass
class Backend:
    name: str
    devices: tuple[str, ...]
    module: str  # implementation module, imported lazily
    probe: Callable[[], str | None]  # None if usable, else the reason it is not
    fns: dict = field(default_factory=dict)

    def load(self) -> dict:
        if not self.fns:
            mod = importlib.import_module(self.module)
            self.fns = {op: getattr(mod, f"{op}_{self.name}") for op in OPS}
        return self.fns


def _probe_triton() -> str | None:
    import torch

    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return "no CUDA device (set TRITON_INTERPRET=1 before importing triton to run it on CPU)"
    try:
        import triton  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the install
        return f"triton not importable ({e.__class__.__name__}: {e})"
    return None


def _probe_ext(name: str) -> Callable[[], str | None]:
    def probe() -> str | None:
        try:
            importlib.import_module(f"ttrl_lightning.{name}")
        except ImportError as e:
            return f"extension ttrl_lightning.{name} not built ({e}); rebuild with `pip install --no-build-isolation -e .`"
        return None

    return probe


def _probe_cuda_ext() -> str | None:
    reason = _probe_ext("_C_cuda")()
    if reason:
        return reason
    import torch

    return None if torch.cuda.is_available() else "no CUDA device"


BACKENDS: dict[str, Backend] = {
    "triton": Backend("triton", ("cuda", "cpu"), "ttrl_lightning.ops.triton_impl", _probe_triton),
    "cuda": Backend("cuda", ("cuda",), "ttrl_lightning.ops.cuda_impl", _probe_cuda_ext),
    "cpp": Backend("cpp", ("cpu",), "ttrl_lightning.ops.cpp_impl", _probe_ext("_C")),
    "torch": Backend("torch", ("cpu", "cuda"), "ttrl_lightning.ops.torch_impl", lambda: None),
}

_availability: dict[str, str | None] = {}


def unavailable_reason(name: str) -> str | None:
    if name not in BACKENDS:
        raise ValueError(f"unknown kernel backend {name!r}; known: {sorted(BACKENDS)} or 'auto'")
    if name not in _availability:
        _availability[name] = BACKENDS[name].probe()
    return _availability[name]


def available_backends() -> list[str]:
    return [n for n in BACKENDS if unavailable_reason(n) is None]


def _device_present(dev: str) -> bool:
    if dev == "cpu":
        return True
    import torch

    return torch.cuda.is_available()


def _resolve_auto() -> dict[tuple[str, str], str]:
    chosen = {}
    for dev, per_op in AUTO_ORDER.items():
        for op, order in per_op.items():
            skipped = []
            for name in order:
                reason = unavailable_reason(name)
                if reason is None:
                    chosen[(dev, op)] = name
                    break
                skipped.append(f"{name}: {reason}")
            if skipped and _device_present(dev):
                log.warning("ttrl_lightning.ops: %s on %s uses %s (%s)", op, dev, chosen.get((dev, op)),
                            "; ".join(skipped))
    return chosen


def _resolve() -> tuple[str, dict[tuple[str, str], str]]:
    requested = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if requested == "auto":
        return requested, _resolve_auto()
    reason = unavailable_reason(requested)
    if reason is not None:
        raise RuntimeError(f"{ENV_VAR}={requested} requested but that backend is unavailable: {reason}")
    return requested, {(dev, op): requested for dev in BACKENDS[requested].devices for op in OPS}


_selection: tuple[str, dict[tuple[str, str], str]] | None = None


def _resolved() -> tuple[str, dict[tuple[str, str], str]]:
    """``(requested, {(device, op): backend})`` from ``TTRL_KERNEL_IMPL``: resolved on first use, cached."""
    global _selection
    if _selection is None:
        _selection = _resolve()
    return _selection


def reset_backend_cache() -> None:
    """Forget the resolved selection, the probes and the loaded implementations; the next op call reads
    ``TTRL_KERNEL_IMPL`` (and, for ``triton`` on CPU, ``TRITON_INTERPRET``) and probes the backends again."""
    global _selection
    _selection = None
    _availability.clear()
    for backend in BACKENDS.values():
        backend.fns = {}


def requested_backend() -> str:
    """``TTRL_KERNEL_IMPL`` as resolved at first use (``auto`` by default)."""
    return _resolved()[0]


def pick(op: str, device_type: str, override: str | None = None) -> Callable:
    """The implementation of ``op`` for tensors on ``device_type``; ``override`` names a backend for this call."""
    if override is not None and override != "auto":
        reason = unavailable_reason(override)
        if reason is not None:
            raise RuntimeError(f"kernel backend {override!r} requested but unavailable: {reason}")
        backend = BACKENDS[override]
        if device_type not in backend.devices:
            raise RuntimeError(f"kernel backend {override!r} does not run on {device_type} tensors")
        return backend.load()[op]
    requested, selected = _resolved()
    name = selected.get((device_type, op))
    if name is None:
        if requested != "auto":
            raise RuntimeError(f"{ENV_VAR}={requested} does not run on {device_type} tensors")
        name = "torch"
    return BACKENDS[name].load()[op]


def selected_backend(op: str, device_type: str = "cpu") -> str:
    """Name of the backend ``op`` uses for ``device_type`` tensors (for logs and benchmarks)."""
    return _resolved()[1].get((device_type, op), "torch")
