"""Backend registry of the ops (``token_stats``, ``attention_with_mass``, ``linear_logprobs``), resolved
lazily: on first use, then cached.

Backends (by name): ``triton`` (GPU; CPU only under ``TRITON_INTERPRET=1``), ``cuda`` (the ``_C_cuda``
extension built from ``csrc/``), ``cpp`` (the OpenMP ``_C`` extension), ``torch`` (chunked PyTorch, any
device). ``TTRL_KERNEL_IMPL`` selects one for every call (``auto`` by default); a requested backend that is
missing raises at the first call of an op it implements (or :func:`selected_backend`), an op it does not
implement (``linear_logprobs`` has no ``cuda`` backend) uses its ``auto`` choice with one log line, and an
unknown name raises naming the known ones. ``auto`` picks per device and op from ``AUTO_ORDER`` and logs one
line when it falls back.

The signal ops live in each backend's module as ``<op>_<backend>``; an op that brings its own
implementations (``linear_logprobs``: tile epilogues shared by one driver) registers them with
:func:`register_op` when its module is imported, with a probe of its own where it needs more than the
backend (the ``cpp`` tile kernels need an extension built with ``csrc/linear_logprobs``).

The environment is read, and the backends probed, at first use; :func:`reset_backend_cache` forgets all of
it, so the next call reads ``TTRL_KERNEL_IMPL`` (and ``TRITON_INTERPRET``) again -- e.g. a test that sets
them in-process.
"""
from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import torch  # noqa: F401  (the compiled extensions link against torch's libraries: load them first)

log = logging.getLogger("ttrl_lightning.ops")

ENV_VAR = "TTRL_KERNEL_IMPL"
#: the ops found in every backend's module as ``<op>_<backend>``
OPS = ("token_stats", "attention_with_mass")

# Preference order per device type and op for ``auto``. On CPU the order follows benchmarks/kernels/token_stats.py,
# benchmarks/kernels/attention_mass.py and benchmarks/kernels/train_logprobs.py: the fused C++ epilogues win for token_stats
# and linear_logprobs, while SDPA with indicator channels (torch) beats the hand-written C++ flash loop for
# attention (see docs/kernels.md).
AUTO_ORDER = {
    "cuda": {"token_stats": ("triton", "cuda", "torch"), "attention_with_mass": ("triton", "cuda", "torch"),
             "linear_logprobs": ("triton", "torch")},
    "cpu": {"token_stats": ("cpp", "torch"), "attention_with_mass": ("torch", "cpp"),
            "linear_logprobs": ("cpp", "torch")},
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
            return (f"extension ttrl_lightning.{name} not built ({e}); "
                    "rebuild with `pip install --no-build-isolation -e .`")
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


@dataclass(frozen=True)
class OpImplementation:
    """One backend's implementation of an op registered with :func:`register_op`: ``load()`` returns it
    (imported lazily); ``probe()`` is None when it can run, else why not (checked after the backend's own)."""

    load: Callable[[], Any]
    probe: Callable[[], str | None] = lambda: None


#: op -> backend -> implementation, for the ops that are not ``<op>_<backend>`` functions of the backends'
#: modules; such an op runs only on the backends it lists
REGISTERED_OPS: dict[str, dict[str, OpImplementation]] = {}


def register_op(op: str, implementations: dict[str, OpImplementation]) -> None:
    """Make ``op`` dispatchable (``pick``, ``selected_backend``, ``TTRL_KERNEL_IMPL``) on the backends in
    ``implementations``; its ``AUTO_ORDER`` entries name the order. Clears the resolved selection."""
    unknown = set(implementations) - set(BACKENDS)
    if unknown or not all(op in per_op for per_op in AUTO_ORDER.values()):
        raise ValueError(f"register_op({op!r}): unknown backends {sorted(unknown)} or no AUTO_ORDER entry")
    REGISTERED_OPS[op] = dict(implementations)
    reset_backend_cache()


def implements(name: str, op: str) -> bool:
    """True when backend ``name`` has an implementation of ``op``."""
    return op in OPS or name in REGISTERED_OPS.get(op, {})


_availability: dict[tuple[str, str | None], str | None] = {}


def unavailable_reason(name: str, op: str | None = None) -> str | None:
    """None if backend ``name`` can run here (and, given ``op``, runs that op), else why not (cached until
    :func:`reset_backend_cache`). An unknown name raises ``ValueError`` naming the known ones."""
    if name not in BACKENDS:
        raise ValueError(f"unknown kernel backend {name!r}; known: {sorted(BACKENDS)} or 'auto'")
    if (name, None) not in _availability:
        _availability[(name, None)] = BACKENDS[name].probe()
    if op is None or _availability[(name, None)] is not None:
        return _availability[(name, None)]
    if not implements(name, op):
        return f"{op} has no {name!r} backend"
    if (name, op) not in _availability:
        impl = REGISTERED_OPS.get(op, {}).get(name)
        _availability[(name, op)] = impl.probe() if impl is not None else None
    return _availability[(name, op)]


def available_backends() -> list[str]:
    return [n for n in BACKENDS if unavailable_reason(n) is None]


def _device_present(dev: str) -> bool:
    if dev == "cpu":
        return True
    import torch

    return torch.cuda.is_available()


def _all_ops() -> tuple[str, ...]:
    return OPS + tuple(op for op in REGISTERED_OPS if op not in OPS)


def _auto_choice(dev: str, op: str) -> str:
    """The first backend of ``AUTO_ORDER[dev][op]`` that can run ``op`` (one log line when it is not the
    first), or ``torch``."""
    skipped = []
    for name in AUTO_ORDER.get(dev, {}).get(op, ("torch",)):
        reason = unavailable_reason(name, op)
        if reason is None:
            if skipped and _device_present(dev):
                log.warning("ttrl_lightning.ops: %s on %s uses %s (%s)", op, dev, name, "; ".join(skipped))
            return name
        skipped.append(f"{name}: {reason}")
    return "torch"


@dataclass(frozen=True)
class _Refusal:
    """A (device, op) that the requested backend cannot serve: the error raised when it is used."""

    message: str


def _requested_choice(requested: str, dev: str, op: str) -> str | _Refusal:
    if not implements(requested, op):
        if _device_present(dev):
            log.warning("ttrl_lightning.ops: %s has no %r backend for %s tensors (%s); using its auto choice",
                        op, requested, dev, ENV_VAR)
        return _auto_choice(dev, op)
    reason = unavailable_reason(requested, op)
    if reason is not None:
        return _Refusal(f"{ENV_VAR}={requested} requested but that backend is unavailable: {reason}")
    if dev not in BACKENDS[requested].devices:
        return _Refusal(f"{ENV_VAR}={requested} does not run on {dev} tensors")
    return requested


def _resolve() -> tuple[str, dict[tuple[str, str], str | _Refusal]]:
    requested = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if requested != "auto" and requested not in BACKENDS:
        unavailable_reason(requested)  # raises, naming the known backends
    chosen: dict[tuple[str, str], str | _Refusal] = {}
    for dev in AUTO_ORDER:
        for op in _all_ops():
            chosen[(dev, op)] = (_auto_choice(dev, op) if requested == "auto"
                                 else _requested_choice(requested, dev, op))
    return requested, chosen


_selection: tuple[str, dict[tuple[str, str], str | _Refusal]] | None = None
_loaded: dict[tuple[str, str], Any] = {}


def _resolved() -> tuple[str, dict[tuple[str, str], str | _Refusal]]:
    """``(requested, {(device, op): backend or refusal})`` from ``TTRL_KERNEL_IMPL``: resolved on first use,
    cached."""
    global _selection
    if _selection is None:
        _selection = _resolve()
    return _selection


def reset_backend_cache() -> None:
    """Forget the resolved selection (every op's, ``linear_logprobs`` included), the probes and the loaded
    implementations; the next op call reads ``TTRL_KERNEL_IMPL`` (and, for ``triton`` on CPU,
    ``TRITON_INTERPRET``) and probes the backends again."""
    global _selection
    _selection = None
    _availability.clear()
    _loaded.clear()
    for backend in BACKENDS.values():
        backend.fns = {}


def requested_backend() -> str:
    """``TTRL_KERNEL_IMPL`` as resolved at first use (``auto`` by default)."""
    return _resolved()[0]


def _load(name: str, op: str) -> Any:
    if op in OPS:
        return BACKENDS[name].load()[op]
    if (name, op) not in _loaded:
        _loaded[(name, op)] = REGISTERED_OPS[op][name].load()
    return _loaded[(name, op)]


def _selected(op: str, device_type: str) -> str:
    requested, selected = _resolved()
    choice = selected.get((device_type, op))
    if choice is None:
        if requested != "auto":
            raise RuntimeError(f"{ENV_VAR}={requested} does not run on {device_type} tensors")
        return "torch"
    if isinstance(choice, _Refusal):
        raise RuntimeError(choice.message)
    return choice


def pick(op: str, device_type: str, override: str | None = None) -> Any:
    """The implementation of ``op`` for tensors on ``device_type`` (a function; for a registered op what its
    ``load`` returns); ``override`` names a backend for this call."""
    if override is not None and override != "auto":
        reason = unavailable_reason(override, op)
        if reason is not None:
            raise RuntimeError(f"kernel backend {override!r} requested but unavailable: {reason}")
        if device_type not in BACKENDS[override].devices:
            raise RuntimeError(f"kernel backend {override!r} does not run on {device_type} tensors")
        return _load(override, op)
    return _load(_selected(op, device_type), op)


def selected_backend(op: str, device_type: str = "cpu") -> str:
    """Name of the backend ``op`` uses for ``device_type`` tensors (for logs and benchmarks); raises as the
    op's first call would when ``TTRL_KERNEL_IMPL`` names a backend that cannot serve it."""
    return _selected(op, device_type)
