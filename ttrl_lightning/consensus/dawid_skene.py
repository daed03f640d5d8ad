"""Dawid--Skene EM over rollouts-as-annotators, batched and vectorised in torch (Pixelis appendix S2).

Model (Dawid & Skene, 1979): item ``i`` has a latent true class ``y_i ~ Categorical(prior)``; annotator
``j`` (a rollout) reports ``z_ij`` with probability ``confusion[j, y_i, z_ij] = P(z_j = l | y = c)``.

EM, as in Pixelis S2 ("initialize with majority-vote labels; each Pi^(j) starts as a Laplace-smoothed
diagonal with eps=1e-2; iterate until relative log-likelihood improvement < 1e-6 or 50 iterations"):

* init:   ``T[i, c]`` = share of item ``i``'s labels equal to ``c`` (soft majority vote);
* M-step: ``prior[c] = mean_i T[i, c]``;
  ``confusion[j, c, l] = (sum_i T[i, c] [z_ij = l] + eps) / (sum_i T[i, c] [z_ij observed] + C eps)``
  (Laplace smoothing ``eps``; the first M-step on majority-vote labels gives the smoothed near-diagonal
  start);
* E-step (log space, no underflow with many annotators):
  ``log T[i, c] = log prior[c] + sum_j log confusion[j, c, z_ij] - logsumexp_c(...)``;
* stop when ``(ll_t - ll_{t-1}) < tol * |ll_{t-1}|`` with ``ll = sum_i logsumexp_c(...)`` the observed-data
  log-likelihood, or after ``max_iter`` iterations. In a batch every problem stops on its own criterion
  (finished problems are frozen), so a batch gives exactly what one call per problem gives.

The returned posteriors are the E-step under the returned ``prior`` / ``confusion``. Prior and confusion
counts are floored at 1e-10 before the log. An annotator with no labels gets uniform rows.
Reliability (Pixelis S2): ``r_j = (1/C) sum_c confusion[j, c, c]``.

Relation to crowd-kit's ``DawidSkene`` (the test oracle): the same soft-majority init, M-step and log-space
E-step; crowd-kit has no smoothing (it floors counts at 1e-10, i.e. ours with ``smoothing=0``), stops on
an absolute change of its ELBO per label (``tol=1e-5``) and returns posteriors one E-step behind its
error matrices. With smoothing=0 and the same number of steps the two agree to 1e-10.
"""
from __future__ import annotations

import math

import torch

__all__ = ["dawid_skene", "dawid_skene_reliability"]

_FLOOR = 1e-10  # floor on prior / confusion counts before the log (the same floor crowd-kit clips to)


def _validate(labels: torch.Tensor, num_classes: int, max_iter: int, tol: float, smoothing: float) -> None:
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"labels must be a torch.Tensor, got {type(labels).__name__}")
    if labels.dtype == torch.bool or labels.dtype.is_floating_point or labels.dtype.is_complex:
        raise ValueError(f"labels must have an integer dtype (class ids, -1 = missing), got {labels.dtype}")
    if labels.dim() not in (2, 3):
        raise ValueError(
            "labels must be [items, annotators] or [batch, items, annotators], "
            f"got shape {tuple(labels.shape)}"
        )
    if labels.numel() == 0:
        raise ValueError(f"labels is empty (shape {tuple(labels.shape)})")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive int, got {max_iter!r}")
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    if not (isinstance(smoothing, (int, float)) and math.isfinite(smoothing) and smoothing >= 0):
        raise ValueError(f"smoothing must be a finite number >= 0, got {smoothing!r}")
    lo, hi = int(labels.min()), int(labels.max())
    if lo < -1:
        raise ValueError(f"labels must be >= -1 (-1 = missing), found {lo}")
    if hi >= num_classes:
        raise ValueError(f"labels must be < num_classes={num_classes}, found {hi}")
    unlabelled = (labels >= 0).sum(-1) == 0  # [.., items]
    if bool(unlabelled.any()):
        where = unlabelled.nonzero()[0].tolist()
        raise ValueError(f"every item needs at least one label; item at index {where} has none (all -1)")


def _m_step(post: torch.Tensor, onehot_t: torch.Tensor, smoothing: float, annotators: int):
    """post: [B, N, C], onehot_t: [B, J*L, N] -> (log_prior [B, C], log_confusion_t [B, J*L, C]).

    ``log_confusion_t[b, j*L + l, c] = log confusion[b, j, c, l]`` (observed-label-major, so both EM steps
    are one batched matmul each).
    """
    prior = post.mean(dim=1).clamp_min(_FLOOR)
    counts = torch.bmm(onehot_t, post) + smoothing  # [B, J*L, C]: sum_n T[n, c] [z_nj = l]
    counts = counts.clamp_min(_FLOOR)
    b, jl, c = counts.shape
    counts = counts.view(b, annotators, jl // annotators, c)
    confusion_t = counts / counts.sum(dim=2, keepdim=True)  # normalise over the observed label l
    return prior.log(), confusion_t.log().view(b, jl, c)


def _e_step(log_prior: torch.Tensor, log_confusion_t: torch.Tensor, onehot: torch.Tensor):
    """onehot: [B, N, J*L] -> (log posteriors [B, N, C], observed-data log-likelihood [B])."""
    log_joint = log_prior[:, None, :] + torch.bmm(onehot, log_confusion_t)  # sum_j log confusion[j, c, z_nj]
    log_evidence = torch.logsumexp(log_joint, dim=-1, keepdim=True)  # [B, N, 1]
    return log_joint - log_evidence, log_evidence.squeeze(-1).sum(-1)


def dawid_skene(
    labels: torch.Tensor,
    num_classes: int,
    max_iter: int = 50,
    tol: float = 1e-6,
    smoothing: float = 1e-2,
    *,
    dtype: torch.dtype = torch.float64,
    return_info: bool = False,
):
    """Dawid--Skene EM (Pixelis appendix S2); see the module docstring for the updates.

    Args:
        labels: ``[N, J]`` or batched ``[B, N, J]`` integer class ids in ``0..C-1``; ``-1`` = missing. Every
            item needs at least one label. ``B`` independent problems (e.g. one per query, rollouts as
            annotators) are solved at once.
        num_classes: ``C``.
        max_iter: at most this many EM iterations (Pixelis: 50).
        tol: stop when the relative observed-data log-likelihood improvement is below ``tol`` (1e-6).
        smoothing: Laplace pseudo-count ``eps`` added to every confusion count (1e-2); 0 = plain ML.
        dtype: floating dtype of the computation and of the results.
        return_info: also return ``{"iterations": [B] long, "log_likelihood": [B]}`` (unbatched: scalars).

    Returns:
        ``(posteriors [.., N, C], confusion [.., J, C, C], prior [.., C])`` with
        ``confusion[.., j, c, l] = P(z_j = l | y = c)`` (rows sum to 1) and posteriors the E-step under the
        returned parameters; plus the info dict when ``return_info``.

    Raises:
        TypeError: ``labels`` is not a tensor.
        ValueError: non-integer dtype, wrong rank, empty, a label ``< -1`` or ``>= num_classes``, an item
            with no label, or a bad ``num_classes`` / ``max_iter`` / ``tol`` / ``smoothing``.
    """
    _validate(labels, num_classes, max_iter, tol, smoothing)
    unbatched = labels.dim() == 2
    z = labels.unsqueeze(0) if unbatched else labels
    z = z.long()
    batch, items, annotators = z.shape
    observed = z >= 0  # [B, N, J]
    onehot = torch.nn.functional.one_hot(z.clamp_min(0), num_classes).to(dtype) * observed.unsqueeze(-1)
    votes = onehot.sum(dim=2)  # [B, N, C]
    onehot = onehot.view(batch, items, annotators * num_classes)  # [B, N, J*L]
    onehot_t = onehot.transpose(1, 2).contiguous()  # [B, J*L, N]

    # soft majority vote: per-item label frequencies
    post = votes / votes.sum(dim=-1, keepdim=True)
    log_prior, log_conf = _m_step(post, onehot_t, smoothing, annotators)
    log_post, ll = _e_step(log_prior, log_conf, onehot)

    active = torch.ones(batch, dtype=torch.bool, device=z.device)
    iterations = torch.zeros(batch, dtype=torch.long, device=z.device)
    for _ in range(max_iter):
        new_log_prior, new_log_conf = _m_step(log_post.exp(), onehot_t, smoothing, annotators)
        new_log_post, new_ll = _e_step(new_log_prior, new_log_conf, onehot)
        a = active  # finished problems keep their parameters
        log_prior = torch.where(a[:, None], new_log_prior, log_prior)
        log_conf = torch.where(a[:, None, None], new_log_conf, log_conf)
        log_post = torch.where(a[:, None, None], new_log_post, log_post)
        converged = (new_ll - ll) < tol * ll.abs()
        ll = torch.where(a, new_ll, ll)
        iterations += a.long()
        active = a & ~converged
        if not bool(active.any()):
            break

    log_conf = log_conf.view(batch, annotators, num_classes, num_classes).transpose(-1, -2)  # [B, J, C, L]
    posteriors, confusion, prior = log_post.exp(), log_conf.exp(), log_prior.exp()
    info = {"iterations": iterations, "log_likelihood": ll}
    if unbatched:
        posteriors, confusion, prior = posteriors[0], confusion[0], prior[0]
        info = {k: v[0] for k, v in info.items()}
    if return_info:
        return posteriors, confusion, prior, info
    return posteriors, confusion, prior


def dawid_skene_reliability(confusion: torch.Tensor) -> torch.Tensor:
    """Per-annotator reliability ``r_j = (1/C) sum_c confusion[j, c, c]`` (Pixelis appendix S2).

    Args:
        confusion: ``[.., J, C, C]`` with ``confusion[.., j, c, l] = P(z_j = l | y = c)``.
    Returns:
        ``r``: ``[.., J]``, in ``[0, 1]``; ``1/C`` for an annotator at chance with uniform rows.
    """
    if not isinstance(confusion, torch.Tensor):
        raise TypeError(f"confusion must be a torch.Tensor, got {type(confusion).__name__}")
    if confusion.dim() < 3 or confusion.shape[-1] != confusion.shape[-2] or confusion.shape[-1] == 0:
        raise ValueError(
            f"confusion must be [.., annotators, C, C] with C >= 1, got shape {tuple(confusion.shape)}"
        )
    if not confusion.dtype.is_floating_point:
        raise ValueError(f"confusion must be floating point, got {confusion.dtype}")
    if not bool(torch.isfinite(confusion).all()):
        raise ValueError("confusion contains NaN or inf")
    return confusion.diagonal(dim1=-2, dim2=-1).mean(dim=-1)
