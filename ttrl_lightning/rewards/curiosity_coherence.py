"""CC-RFT's intrinsic rewards (Pixelis 3.2.2 and appendix 1): step embeddings, gated curiosity, coherence.

* Step embedding ``E_t = g([v_t || x_t || onehot(a_{t-1})]) / ||.||_2`` (:class:`StepEncoder`, appendix 1:
  MLP ``[2d + |A|] -> 768 -> 512``, GELU, dropout 0.1, LayerNorm on the output). For a text agent ``x_t`` is
  the mean policy hidden state over the last 32 tokens the model wrote in step t (thought + call) and
  ``v_t`` the mean over the observation it was shown (what the tool returned, the agent's "visual" state).
* Curiosity: a tool-conditioned dynamics head ``h([E_t || onehot(a_t)]) -> v_{t+1}``
  (:class:`DynamicsHead`); its prediction error ``e_t = mean((mu_t - v_{t+1})^2)`` is gated by
  ``1 / (1 + beta sigma_t^2)``, ``mu_t`` and ``sigma_t^2`` the mean and the (per-dimension mean) variance
  of S MC-dropout predictions (S = 4, p = 0.1, beta = 5: supp. S7, "Uncertainty gate in curiosity").
* Coherence: ``c_t = cos(E_t, E_{t+1})``, z-scored over all transitions of the batch
  (:func:`zscore`); a trajectory's coherence is the mean of its z-scores.
* A trajectory's curiosity / coherence is the mean over its transitions; one without a transition gets 0.
"""

from __future__ import annotations

import torch
from torch import nn


class StepEncoder(nn.Module):
    """``g_phi``: ``[v || x || onehot(a_prev)]`` (``2 d + num_actions``) -> unit vector of ``out_dim``."""

    def __init__(self, d: int, num_actions: int, hidden: int = 768, out_dim: int = 512, dropout: float = 0.1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * d + num_actions, hidden), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, out_dim), nn.LayerNorm(out_dim))

    def forward(self, v: torch.Tensor, x: torch.Tensor, prev_action: torch.Tensor) -> torch.Tensor:
        e = self.net(torch.cat([v, x, prev_action], dim=-1))
        return e / e.norm(dim=-1, keepdim=True).clamp_min(1e-12)


class DynamicsHead(nn.Module):
    """``h_psi``: ``[E_t || onehot(a_t)]`` -> predicted ``v_{t+1}`` (dimension ``d``), with dropout ``p``
    (active in MC sampling)."""

    def __init__(self, embed_dim: int, num_actions: int, d: int, hidden: int = 768, p: float = 0.1):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(embed_dim + num_actions, hidden), nn.GELU(), nn.Dropout(p),
                                 nn.Linear(hidden, d))

    def forward(self, e: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([e, action], dim=-1))


def gated_curiosity(head: DynamicsHead, e: torch.Tensor, action: torch.Tensor, v_next: torch.Tensor,
                    samples: int = 4, beta: float = 5.0,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """Per-transition curiosity ``e_t / (1 + beta sigma_t^2)`` [M] from ``samples`` MC-dropout passes of
    ``head`` (dropout on, no gradient). ``e``: [M, embed_dim], ``action``: [M, A], ``v_next``: [M, d]."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    was_training = head.training
    head.train()
    try:
        with torch.no_grad():
            if generator is not None:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
                    preds = torch.stack([head(e, action) for _ in range(samples)])
            else:
                preds = torch.stack([head(e, action) for _ in range(samples)])
    finally:
        head.train(was_training)
    mu = preds.mean(0)
    sigma2 = preds.var(0, unbiased=False).mean(-1)
    error = (mu - v_next).pow(2).mean(-1)
    return error / (1.0 + beta * sigma2)


def zscore(values: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``(c - mean) / std`` over all entries (population std); all zeros when there are fewer than two
    entries or the std is below ``eps``."""
    if values.numel() < 2:
        return torch.zeros_like(values)
    std = values.std(unbiased=False)
    if float(std) < eps:
        return torch.zeros_like(values)
    return (values - values.mean()) / std


def adjacent_cosines(e: torch.Tensor, e_next: torch.Tensor) -> torch.Tensor:
    """``cos(E_t, E_{t+1})`` per transition [M]."""
    return nn.functional.cosine_similarity(e, e_next, dim=-1)


def per_trajectory_mean(values: torch.Tensor, owner: torch.Tensor, num_rows: int) -> torch.Tensor:
    """Mean of ``values`` [M] per row given ``owner`` [M] (row index of each entry) -> [num_rows]; rows
    without an entry get 0."""
    total = torch.zeros(num_rows, dtype=values.dtype, device=values.device).index_add_(0, owner, values)
    count = torch.zeros(num_rows, dtype=values.dtype, device=values.device).index_add_(
        0, owner, torch.ones_like(values))
    return torch.where(count > 0, total / count.clamp_min(1), torch.zeros_like(total))
