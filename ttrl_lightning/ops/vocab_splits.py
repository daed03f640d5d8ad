"""The epilogue shared by the GPU ``token_stats`` kernels (Triton and CUDA).

Both kernels split the vocabulary into slices and write, per slice ``i`` and token, the partials
``(m_i, s_i, t_i, z_y)``: the slice's max logit, ``s_i = sum exp(z - m_i)``, ``t_i = sum z exp(z - m_i)`` and
the label logit if the label falls in the slice (else 0). Merged with ``m = max_i m_i``:

    s = sum_i s_i e^(m_i - m),  t = sum_i t_i e^(m_i - m),  lse = m + log s,  H = lse - t / s,

and self-certainty ``SC = lse - mean(z) - log V`` with ``mean(z) = (h . mean_row(W) + mean(b)) / T``.
"""
from __future__ import annotations

import math

import torch


def finish_token_stats(part: torch.Tensor, hidden: torch.Tensor, weight: torch.Tensor, token_ids: torch.Tensor,
                       bias: torch.Tensor | None, temperature: float):
    """part: ``[splits, 4, M]`` float32 partials -> ``(logprob, entropy, self_certainty, lse)``, all ``[M]``.

    Tokens with a negative id (no label) get logprob 0.
    """
    m_p, s_p, t_p, zy_p = part.unbind(1)
    m = m_p.amax(0)
    scale = torch.exp(m_p - m)
    s = (s_p * scale).sum(0)
    t = (t_p * scale).sum(0)
    lse = m + torch.log(s)
    entropy = lse - t / s
    mean_z = hidden.float() @ weight.mean(0, dtype=torch.float32)
    if bias is not None:
        mean_z = mean_z + bias.float().mean()
    self_certainty = lse - mean_z / float(temperature) - math.log(weight.shape[0])
    logprob = torch.where(token_ids >= 0, zy_p.sum(0) - lse, torch.zeros_like(lse))
    return logprob, entropy, self_certainty, lse
