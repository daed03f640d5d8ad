"""Memory-lean per-token log-probabilities of a linear LM head, with gradients (``linear_logprobs``).

With ``z = (h W^T + b) / T`` (hidden ``h: [M, H]``, head ``W: [V, H]``, bias ``b: [V]``, temperature ``T``),
``lse_i = log sum_v exp z_iv`` and ``p_iv = exp(z_iv - lse_i)``:

    logprob_i = z_iy - lse_i,                 entropy_i = lse_i - mu_i,   mu_i = sum_v p_iv z_iv.

Gradients with respect to the logits (``g``, ``g_H``: upstream gradients of logprob and entropy, known only
in backward):

    d logprob_i / d z_iv = delta_vy - p_iv,   d entropy_i / d z_iv = p_iv (mu_i - z_iv),
    grad_z_iv = g_i delta_vy - p_iv (g_i + g_H,i (z_iv - mu_i)),
    grad_h = grad_z W / T,   grad_W = grad_z^T h / T,   grad_b = 1^T grad_z / T.

Nothing of size ``[M, V]`` is ever held: the vocabulary is walked in chunks of ``chunk`` columns (and the
tokens in row blocks so a logits tile holds at most ``TILE_ELEMS`` floats), so peak extra memory is one
``rows x chunk`` tile, one ``chunk x H`` float32 slice of W, and ``[M, H]`` float32 buffers (besides the
gradients themselves). Per tile the backend's ``forward_tile`` updates an online softmax (running max ``m``,
``s = sum e^(z-m)``, ``t = sum z e^(z-m)``, rescaled by ``alpha = e^(m_old - m_new)`` when ``m`` grows, as in
FlashAttention), and ``backward_tile`` turns a recomputed tile into ``grad_z`` in place.

Two gradient plans, chosen from which inputs need a gradient:

* frozen head (W and b need no gradient, e.g. LoRA on the body or a frozen ``lm_head``): the forward pass also
  accumulates ``A = sum_v e^(z-m) W_v`` (and ``B = sum_v e^(z-m) z_v W_v`` when the entropy is returned),
  rescaled with the running max, so ``sum_v p_v W_v = A / s`` and the backward pass is one ``[M, H]`` formula,
  ``grad_h_i = (g_i W_yi - (g_i - g_H,i mu_i) A_i / s_i - g_H,i B_i / s_i) / T`` (no vocabulary pass);
* trainable head: the forward pass keeps only ``lse`` and ``mu``; backward recomputes each tile once and
  takes both ``grad_W`` and ``grad_h`` from it (one GEMM each, the same count as accumulating in forward).

Backends (``torch``: chunked PyTorch on any device; ``cpp``: the OpenMP tile epilogues of
``csrc/linear_logprobs/linear_logprobs_cpu.cpp``; ``triton``: the tile kernels of ``linear_logprobs_triton``)
share this driver and its GEMMs (always float32) and differ only in the two tile epilogues. They are
registered with ``ops.backends`` (``register_op``), which picks one per device (``AUTO_ORDER``,
``TTRL_KERNEL_IMPL``) on first use and caches it until ``backends.reset_backend_cache()``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from . import backends
from .checks import check_token_stats_inputs

OP = "linear_logprobs"
# Vocabulary columns per chunk and the largest logits tile (floats) per device type: 4096 x 1024 float32
# (16 MiB) on CPU, where the tile stays near the last-level cache; larger tiles on GPU keep the GEMMs big.
CHUNK = {"cpu": 4096, "cuda": 8192}
TILE_ELEMS = {"cpu": 1 << 22, "cuda": 1 << 25}


# --------------------------------------------------------------------------------------------------------
# The torch tile epilogues (the "torch" backend); cpp and triton implement the same two functions.
# --------------------------------------------------------------------------------------------------------
def _label_columns(ids: torch.Tensor, v0: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of a tile whose label lies in columns ``[v0, v0 + cols)`` and the label's column in the tile."""
    rows = ((ids >= v0) & (ids < v0 + cols)).nonzero()[:, 0]
    return rows, ids[rows] - v0


def forward_tile_torch(z, m, s, t, zy, ids, v0, write_e, ez):
    """Online-softmax update of one ``[R, C]`` logits tile (all float32, ``m, s, t, zy, ids: [R]``, in place).

    ``m <- max(m, max_v z)``, ``s <- alpha s + sum e``, ``t <- alpha t + sum e z`` with
    ``e = exp(z - m_new)``, ``alpha = exp(m_old - m_new)``; ``zy`` takes the label logit if the label is in
    this tile. With ``write_e`` the tile is overwritten by ``e``; ``ez`` (or None) receives ``e * z``.
    Returns ``alpha: [R]``.
    """
    m_new = torch.maximum(m, z.amax(1))
    alpha = torch.exp(m - m_new)
    rows, cols = _label_columns(ids, v0, z.shape[1])
    zy[rows] = z[rows, cols]
    e = torch.exp(z - m_new[:, None])
    ez_tile = torch.mul(e, z, out=ez) if ez is not None else e * z
    s.mul_(alpha).add_(e.sum(1))
    t.mul_(alpha).add_(ez_tile.sum(1))
    m.copy_(m_new)
    if write_e:
        z.copy_(e)
    return alpha


def backward_tile_torch(z, lse, mu, g_logprob, g_entropy, ids, v0):
    """Recomputed logits tile -> ``grad_z`` in place: ``g delta_vy - p (g + g_H (z - mu))``,
    ``p = e^(z - lse)``.

    ``g_logprob`` is 0 on rows without a label; ``g_entropy`` may be None (no entropy gradient).
    """
    p = torch.exp(z - lse[:, None])
    coef = g_logprob[:, None]
    if g_entropy is not None:
        coef = coef + g_entropy[:, None] * (z - mu[:, None])
    torch.mul(p, coef, out=z).neg_()
    rows, cols = _label_columns(ids, v0, z.shape[1])
    z[rows, cols] += g_logprob[rows]


def _forward_tile_cpp(z, m, s, t, zy, ids, v0, write_e, ez):
    return torch.ops.ttrl.linear_logprobs_forward_tile(z, m, s, t, zy, ids, v0, write_e,
                                                       ez if ez is not None else z.new_empty(0))


def _backward_tile_cpp(z, lse, mu, g_logprob, g_entropy, ids, v0):
    g_h = g_entropy if g_entropy is not None else z.new_empty(0)
    torch.ops.ttrl.linear_logprobs_backward_tile(z, lse, mu, g_logprob, g_h, ids, v0)


@dataclass(frozen=True)
class TileKernels:
    """The two per-tile epilogues a backend provides (signatures of ``forward_tile_torch`` and
    ``backward_tile_torch``)."""

    forward_tile: Callable
    backward_tile: Callable


def _load_torch() -> TileKernels:
    return TileKernels(forward_tile_torch, backward_tile_torch)


def _load_cpp() -> TileKernels:
    import ttrl_lightning._C  # noqa: F401  (registers torch.ops.ttrl.linear_logprobs_*)

    return TileKernels(_forward_tile_cpp, _backward_tile_cpp)


def _load_triton() -> TileKernels:
    from . import linear_logprobs_triton as kernels

    return TileKernels(kernels.forward_tile_triton, kernels.backward_tile_triton)


def _probe_cpp() -> str | None:
    """The ``_C`` extension imports (the backend's probe); this op also needs its tile kernels in it."""
    if not hasattr(torch.ops.ttrl, "linear_logprobs_forward_tile"):
        return "ttrl_lightning._C was built without csrc/linear_logprobs (rebuild the extension)"
    return None


backends.register_op(OP, {
    "triton": backends.OpImplementation(_load_triton),
    "cpp": backends.OpImplementation(_load_cpp, _probe_cpp),
    "torch": backends.OpImplementation(_load_torch),
})


def unavailable_reason(name: str) -> str | None:
    """None if backend ``name`` of linear_logprobs can run here, else why not (cached by ``ops.backends``)."""
    known = backends.REGISTERED_OPS[OP]
    if name not in known:
        raise ValueError(f"unknown linear_logprobs backend {name!r}; known: {sorted(known)} or 'auto'")
    return backends.unavailable_reason(name, OP)


def selected_backend(device_type: str = "cpu") -> str:
    """The backend ``linear_logprobs`` uses for ``device_type`` tensors: ``backends.selected_backend``."""
    return backends.selected_backend(OP, device_type)


def _kernels(device_type: str, override: str | None) -> TileKernels:
    if override not in (None, "auto"):
        unavailable_reason(override)  # an unknown name raises, naming this op's backends
    return backends.pick(OP, device_type, override)


# --------------------------------------------------------------------------------------------------------
# The chunked driver shared by every backend
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TilePlan:
    chunk: int  # vocabulary columns per chunk
    rows: int  # tokens per logits tile

    @staticmethod
    def for_call(M: int, V: int, device_type: str, chunk: int | None) -> "TilePlan":
        chunk = max(1, min(V, chunk or CHUNK.get(device_type, CHUNK["cuda"])))
        rows = max(1, min(M, TILE_ELEMS.get(device_type, TILE_ELEMS["cuda"]) // chunk))
        return TilePlan(chunk, rows)

    def tiles(self, M: int, V: int):
        """``(v0, v1, [(r0, r1), ...])`` per vocabulary chunk."""
        row_blocks = [(r0, min(M, r0 + self.rows)) for r0 in range(0, M, self.rows)]
        for v0 in range(0, V, self.chunk):
            yield v0, min(V, v0 + self.chunk), row_blocks


def _scaled_hidden(hidden: torch.Tensor, temperature: float) -> torch.Tensor:
    h = hidden.float()
    return h if temperature == 1.0 else h * (1.0 / temperature)


def _logits_tile(buf, h_rows, w, b):
    """``z = h' w^T + b'`` into the reused buffer (``h' = h / T``, ``b' = b / T``)."""
    z = buf[: h_rows.shape[0] * w.shape[0]].view(h_rows.shape[0], w.shape[0])
    if b is None:
        return torch.mm(h_rows, w.t(), out=z)
    return torch.addmm(b, h_rows, w.t(), out=z)


def _chunk(weight, bias, v0, v1, temperature):
    w = weight[v0:v1].float()
    b = None if bias is None else bias[v0:v1].float() * (1.0 / temperature)
    return w, b


def _forward_pass(kern: TileKernels, h, weight, bias, ids, temperature, plan: TilePlan, accumulate: bool,
                  with_entropy: bool):
    """Online softmax over all tiles. Returns ``(logprob, entropy, lse, mu, pw, pzw)``; ``[M, H]``
    ``pw = sum_v p_v W_v`` and ``pzw = sum_v p_v z_v W_v`` only when ``accumulate`` (pzw also needs
    ``with_entropy``)."""
    M, H = h.shape
    V = weight.shape[0]
    f32 = dict(device=h.device, dtype=torch.float32)
    m = torch.full((M,), float("-inf"), **f32)
    s, t, zy = torch.zeros(M, **f32), torch.zeros(M, **f32), torch.zeros(M, **f32)
    acc = torch.zeros(M, H, **f32) if accumulate else None
    acc_z = torch.zeros(M, H, **f32) if accumulate and with_entropy else None
    buf = torch.empty(plan.rows * plan.chunk, **f32)
    ez_buf = torch.empty_like(buf) if acc_z is not None else None
    for v0, v1, row_blocks in plan.tiles(M, V):
        w, b = _chunk(weight, bias, v0, v1, temperature)
        for r0, r1 in row_blocks:
            z = _logits_tile(buf, h[r0:r1], w, b)
            ez = None if ez_buf is None else ez_buf[: z.numel()].view_as(z)
            alpha = kern.forward_tile(z, m[r0:r1], s[r0:r1], t[r0:r1], zy[r0:r1], ids[r0:r1], v0,
                                      accumulate, ez)
            if accumulate:  # z now holds e = exp(z - m_new)
                acc[r0:r1].mul_(alpha[:, None]).addmm_(z, w)
                if acc_z is not None:
                    acc_z[r0:r1].mul_(alpha[:, None]).addmm_(ez, w)
    lse = m + torch.log(s)
    mu = t / s
    logprob = torch.where(ids >= 0, zy - lse, torch.zeros_like(lse))
    pw = acc.div_(s[:, None]) if acc is not None else None
    pzw = acc_z.div_(s[:, None]) if acc_z is not None else None
    return logprob, lse - mu, lse, mu, pw, pzw


def _backward_pass(kern: TileKernels, h, weight, bias, ids, temperature, plan: TilePlan, lse, mu, g_logprob,
                   g_entropy, need_h: bool, need_w: bool, need_b: bool):
    """Recompute every tile once, turn it into ``grad_z`` and take the requested gradients from it."""
    M, H = h.shape
    V = weight.shape[0]
    f32 = dict(device=h.device, dtype=torch.float32)
    grad_h = torch.zeros(M, H, **f32) if need_h else None
    grad_w = torch.empty_like(weight) if need_w else None
    grad_b = torch.empty(V, **f32) if need_b else None
    buf = torch.empty(plan.rows * plan.chunk, **f32)
    for v0, v1, row_blocks in plan.tiles(M, V):
        w, b = _chunk(weight, bias, v0, v1, temperature)
        gw = None
        if need_w:  # accumulate in float32; written straight into grad_w when that is float32
            gw = grad_w[v0:v1] if grad_w.dtype == torch.float32 else torch.empty(v1 - v0, H, **f32)
            gw.zero_()
        if need_b:
            grad_b[v0:v1] = 0.0
        for r0, r1 in row_blocks:
            z = _logits_tile(buf, h[r0:r1], w, b)
            kern.backward_tile(z, lse[r0:r1], mu[r0:r1], g_logprob[r0:r1],
                               None if g_entropy is None else g_entropy[r0:r1], ids[r0:r1], v0)
            if need_h:
                grad_h[r0:r1].addmm_(z, w)
            if need_w:
                gw.addmm_(z.t(), h[r0:r1])  # h is already divided by T
            if need_b:
                grad_b[v0:v1] += z.sum(0)
        if need_w and gw.data_ptr() != grad_w[v0:v1].data_ptr():
            grad_w[v0:v1] = gw
    inv_t = 1.0 / temperature
    return (grad_h.mul_(inv_t) if need_h else None, grad_w,
            grad_b.mul_(inv_t) if need_b else None)


class LinearLogprobsFunction(torch.autograd.Function):
    """Autograd function of :func:`linear_logprobs` (inputs already validated and flattened to ``[M, H]``)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, token_ids, temperature, with_entropy, kern, plan):
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[2]
        accumulate = need_h and not (need_w or need_b)
        h = _scaled_hidden(hidden, temperature)
        logprob, entropy, lse, mu, pw, pzw = _forward_pass(kern, h, weight, bias, token_ids, temperature,
                                                           plan, accumulate, with_entropy)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(hidden, weight, bias, token_ids, lse, mu, pw, pzw)
        ctx.config = (temperature, kern, plan, accumulate, need_h, need_w, need_b)
        return logprob, entropy

    @staticmethod
    def backward(ctx, g_logprob, g_entropy):
        hidden, weight, bias, ids, lse, mu, pw, pzw = ctx.saved_tensors
        temperature, kern, plan, accumulate, need_h, need_w, need_b = ctx.config
        has_label = ids >= 0
        g = torch.zeros_like(lse) if g_logprob is None else torch.where(has_label, g_logprob.float(), 0.0)
        g_h = None if g_entropy is None else g_entropy.float()
        if accumulate:
            # grad_h = (g W_y - (g - g_H mu) PW - g_H PzW) / T from the forward accumulators
            w_y = weight[ids.clamp_min(0)].float()
            coef_pw = g if g_h is None else g - g_h * mu
            grad_h = g[:, None] * w_y - coef_pw[:, None] * pw
            if g_h is not None:
                grad_h -= g_h[:, None] * pzw
            grad_h = grad_h.mul_(1.0 / temperature).to(hidden.dtype)
            return grad_h, None, None, None, None, None, None, None
        h = _scaled_hidden(hidden, temperature)
        grad_h, grad_w, grad_b = _backward_pass(kern, h, weight, bias, ids, temperature, plan, lse, mu, g,
                                                g_h, need_h, need_w, need_b)
        grad_h = grad_h.to(hidden.dtype) if grad_h is not None else None
        grad_b = grad_b.to(bias.dtype) if grad_b is not None else None
        return grad_h, grad_w, grad_b, None, None, None, None, None


def linear_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    token_ids: torch.Tensor,
    temperature: float = 1.0,
    bias: torch.Tensor | None = None,
    return_entropy: bool = False,
    *,
    backend: str | None = None,
    chunk_size: int | None = None,
):
    """Per-token log-probabilities ``log softmax((hidden @ weight.T + bias) / temperature)[token_ids]``.

    hidden: [..., H], weight: [V, H] (the LM head; tied embeddings work the same), token_ids: [...] integer
    (negative = no label: logprob 0 and no gradient from that token), bias: [V] or None. Returns float32
    ``logprob`` shaped like ``token_ids`` and, with ``return_entropy``, also ``entropy = -sum_v p_v log p_v``.
    Differentiable with respect to hidden, weight and bias; the ``[..., V]`` logits are never materialised
    (vocabulary chunks of ``chunk_size`` columns, default per device in ``CHUNK``). ``backend`` overrides the
    backend for this call (``torch``, ``cpp``, ``triton``).
    """
    H = hidden.shape[-1] if hidden.dim() else 0
    if hidden.dim() < 1 or token_ids.shape != hidden.shape[:-1]:
        raise ValueError(f"token_ids {tuple(token_ids.shape)} must have the leading shape of hidden "
                         f"{tuple(hidden.shape)} (hidden: [..., H], token_ids: [...])")
    lead = token_ids.shape
    h2, ids = hidden.reshape(-1, H), token_ids.reshape(-1)
    check_token_stats_inputs(h2, weight, ids, bias, temperature)
    M, V = h2.shape[0], weight.shape[0]
    kern = _kernels(h2.device.type, backend)
    plan = TilePlan.for_call(M, V, h2.device.type, chunk_size)
    if M == 0:
        zero = h2.float().sum(-1)  # [0], attached to hidden's graph
        return (zero.view(lead), zero.view(lead)) if return_entropy else zero.view(lead)
    temperature = float(temperature)
    leaves = (h2, weight) if bias is None else (h2, weight, bias)
    if torch.is_grad_enabled() and any(t.requires_grad for t in leaves):
        logprob, entropy = LinearLogprobsFunction.apply(h2, weight, bias, ids.long(), temperature,
                                                        bool(return_entropy), kern, plan)
    else:  # no graph (needs_input_grad would still say True under no_grad): the plain forward pass
        with torch.no_grad():
            logprob, entropy = _forward_pass(kern, _scaled_hidden(h2, temperature), weight, bias, ids.long(),
                                             temperature, plan, False, False)[:2]
    if not bool(torch.isfinite(logprob).all() & torch.isfinite(entropy).all()):
        raise ValueError("linear_logprobs: non-finite result: hidden/weight/bias contain NaN or inf, or the "
                         "logits overflow")
    if return_entropy:
        return logprob.view(lead), entropy.view(lead)
    return logprob.view(lead)
