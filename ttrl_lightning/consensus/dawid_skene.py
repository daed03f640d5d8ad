"""Dawid--Skene EM over rollouts-as-annotators, batched and vectorised in torch (Pixelis appendix S2).

Model (Dawid & Skene, 1979): item ``i`` has a latent true class ``y_i ~ Categorical(prior)``; annotator
``j`` (a rollout) reports ``z_ij`` with probability ``confusion[j, y_i, z_ij] = P(z_j = l | y = c)``.

EM, as in Pixelis S2 ("standard Dawid-Skene EM updates ... initialize with majority-vote labels; each Pi^(j)
starts as a Laplace-smoothed diagonal with eps=1e-2; iterate until relative log-likelihood improvement
< 1e-6 or 50 iterations"):

* init (registry ``INITS``):
  ``"majority"`` (default, the paper's): hard majority-vote labels ``T0[i, c] = [c = argmax_l votes[i, l]]``
  (a tie splits the item evenly over its tied classes), ``prior[c] = mean_i T0[i, c]``, and every
  annotator's confusion the Laplace-smoothed diagonal ``confusion[j, c, l] = ([c = l] + eps) / (1 + C eps)``
  (``eps`` = 1e-2, applied once: the M-steps then add ``smoothing``, 0 by default = the standard updates);
  ``"soft"``: ``T0[i, c]`` = share of item ``i``'s labels equal to ``c`` (soft majority vote) followed by one
  M-step, the start crowd-kit uses.
* E-step (log space, no underflow with many annotators):
  ``log T[i, c] = log prior[c] + sum_j log confusion[j, c, z_ij] - logsumexp_c(...)``;
* M-step: ``prior[c] = mean_i T[i, c]``;
  ``confusion[j, c, l] = (sum_i T[i, c] [z_ij = l] + smoothing) / (sum_i T[i, c] [z_ij observed] + C smoothing)``;
* stop when ``(ll_t - ll_{t-1}) < tol * |ll_{t-1}|`` with ``ll = sum_i logsumexp_c(...)`` the observed-data
  log-likelihood, or after ``max_iter`` iterations (one iteration = M-step + E-step). In a batch every
  problem stops on its own criterion (finished problems are frozen), so a batch gives exactly what one call
  per problem gives.

The returned posteriors are the E-step under the returned ``prior`` / ``confusion``. Prior and confusion
counts are floored at 1e-10 before the log. An annotator with no labels gets uniform rows.
Reliability (Pixelis S2): ``r_j = (1/C) sum_c confusion[j, c, c]``.

Items and annotators for rollouts. The paper treats "rollouts as annotators", but one query with its N
rollouts is a single item: each rollout gives one label, so every confusion matrix is fitted to one
observation and DS degenerates to (weighted) majority vote. Here (``rollout_annotator_labels``) the *items*
are the queries of a batch (or of a sliding window of recent queries), the *annotators* are the rollout
slots ``j = 0..N-1`` (the j-th sample of every query), and the *classes* are per-query answer ranks: class
0 = the query's most frequent answer, 1 = the next (ties by first appearance), so ``confusion[j, c, l]`` is
the probability that slot j gives the l-th most voted answer when the truth is the c-th, a quantity shared
across queries. Unextractable answers are missing labels (-1). Slots are meaningful annotators when they
differ systematically (a per-slot temperature, prompt view, reframing strategy or sampler); with i.i.d.
slots their reliabilities are exchangeable and only estimate sampling noise.

Relation to crowd-kit's ``DawidSkene`` (the test oracle): crowd-kit starts from the soft majority vote
(MajorityVote's label shares) with one M-step, i.e. ``init="soft"``; the paper's start differs by more than
smoothing (hard labels, and a data-independent smoothed-identity confusion instead of one estimated from the
votes). crowd-kit has no smoothing (it floors counts at 1e-10, i.e. ours with ``smoothing=0``), stops on an
absolute change of its ELBO per label (``tol=1e-5``) and returns posteriors one E-step behind its error
matrices. With ``init="soft"``, smoothing=0 and the same number of steps the two agree to 1e-10. The
previous default of this function is ``init="soft", smoothing=1e-2``.
"""
from __future__ import annotations

import math

import torch

__all__ = ["INITS", "dawid_skene", "dawid_skene_reliability", "rollout_annotator_labels"]

_FLOOR = 1e-10  # floor on prior / confusion counts before the log (the same floor crowd-kit clips to)


def _validate(labels: torch.Tensor, num_classes: int, max_iter: int, tol: float, smoothing: float, init: str,
              eps: float) -> None:
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
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    if init not in INITS:
        raise ValueError(f"init must be one of {sorted(INITS)}, got {init!r}")
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


def _init_majority(votes, onehot_t, smoothing, eps, annotators):
    """Hard majority labels -> prior; every confusion the smoothed identity ([c = l] + eps) / (1 + C eps)."""
    top = votes == votes.max(dim=-1, keepdim=True).values  # [B, N, C], ties split evenly
    hard = top.to(votes.dtype) / top.sum(dim=-1, keepdim=True)
    log_prior = hard.mean(dim=1).clamp_min(_FLOOR).log()
    b, c = votes.shape[0], votes.shape[-1]
    eye = torch.eye(c, dtype=votes.dtype, device=votes.device)
    diag = ((eye + eps) / (1 + c * eps)).clamp_min(_FLOOR).log()  # [C true, L observed]; symmetric
    log_conf_t = diag.t().expand(b, annotators, c, c).reshape(b, annotators * c, c)
    return log_prior, log_conf_t


def _init_soft(votes, onehot_t, smoothing, eps, annotators):
    """Soft majority vote (label shares) followed by one M-step (crowd-kit's start)."""
    return _m_step(votes / votes.sum(dim=-1, keepdim=True), onehot_t, smoothing, annotators)


#: init name -> (votes [B, N, C], onehot_t, smoothing, eps, annotators) -> (log_prior, log_confusion_t)
INITS = {"majority": _init_majority, "soft": _init_soft}


def dawid_skene(
    labels: torch.Tensor,
    num_classes: int,
    max_iter: int = 50,
    tol: float = 1e-6,
    smoothing: float = 0.0,
    *,
    init: str = "majority",
    eps: float = 1e-2,
    dtype: torch.dtype = torch.float64,
    return_info: bool = False,
):
    """Dawid--Skene EM (Pixelis appendix S2); see the module docstring for the updates.

    Args:
        labels: ``[N, J]`` or batched ``[B, N, J]`` integer class ids in ``0..C-1``; ``-1`` = missing. Every
            item needs at least one label. ``B`` independent problems are solved at once (for rollouts: items
            = queries, annotators = rollout slots, see ``rollout_annotator_labels``; not one query per
            problem, which degenerates).
        num_classes: ``C``.
        max_iter: at most this many EM iterations (Pixelis: 50).
        tol: stop when the relative observed-data log-likelihood improvement is below ``tol`` (1e-6).
        smoothing: pseudo-count added to every confusion count in each M-step; 0 (default) = the standard
            maximum-likelihood updates. The former default was ``init="soft", smoothing=1e-2``.
        init: ``"majority"`` (the paper's: hard majority labels, smoothed-identity confusions) or ``"soft"``
            (label shares + one M-step, as crowd-kit); see ``INITS``.
        eps: Laplace ``eps`` of the ``"majority"`` start's diagonal (Pixelis: 1e-2); unused by ``"soft"``.
        dtype: floating dtype of the computation and of the results.
        return_info: also return ``{"iterations": [B] long, "log_likelihood": [B]}`` (unbatched: scalars).

    Returns:
        ``(posteriors [.., N, C], confusion [.., J, C, C], prior [.., C])`` with
        ``confusion[.., j, c, l] = P(z_j = l | y = c)`` (rows sum to 1) and posteriors the E-step under the
        returned parameters; plus the info dict when ``return_info``.

    Raises:
        TypeError: ``labels`` is not a tensor.
        ValueError: non-integer dtype, wrong rank, empty, a label ``< -1`` or ``>= num_classes``, an item
            with no label, or a bad ``num_classes`` / ``max_iter`` / ``tol`` / ``smoothing`` / ``init`` /
            ``eps``.
    """
    _validate(labels, num_classes, max_iter, tol, smoothing, init, eps)
    unbatched = labels.dim() == 2
    z = labels.unsqueeze(0) if unbatched else labels
    z = z.long()
    batch, items, annotators = z.shape
    observed = z >= 0  # [B, N, J]
    onehot = torch.nn.functional.one_hot(z.clamp_min(0), num_classes).to(dtype) * observed.unsqueeze(-1)
    votes = onehot.sum(dim=2)  # [B, N, C]
    onehot = onehot.view(batch, items, annotators * num_classes)  # [B, N, J*L]
    onehot_t = onehot.transpose(1, 2).contiguous()  # [B, J*L, N]

    log_prior, log_conf = INITS[init](votes, onehot_t, smoothing, eps, annotators)
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


def dawid_skene_reliability(confusion: torch.Tensor, prior: torch.Tensor | None = None) -> torch.Tensor:
    """Per-annotator reliability ``r_j = (1/C) sum_c confusion[j, c, c]`` (Pixelis appendix S2), or, with
    ``prior``, the prior-weighted ``r_j = sum_c prior[c] confusion[j, c, c]`` (annotator j's accuracy).

    For rollouts (``rollout_annotator_labels``) annotator ``j`` is rollout slot ``j`` over the queries of a
    batch or window, and ``r_j`` multiplies the voting weight ``w_j`` of slot ``j``'s rollout of every query.
    With answer-rank classes the truth is nearly always rank 0 or 1, so the rows of the rarely-true ranks
    are barely identified and dominate the paper's unweighted mean; pass the fitted ``prior`` there.

    Args:
        confusion: ``[.., J, C, C]`` with ``confusion[.., j, c, l] = P(z_j = l | y = c)``.
        prior: optional ``[.., C]`` class prior (``dawid_skene``'s third output).
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
    diagonal = confusion.diagonal(dim1=-2, dim2=-1)  # [.., J, C]
    if prior is None:
        return diagonal.mean(dim=-1)
    if not isinstance(prior, torch.Tensor) or prior.shape != confusion.shape[:-3] + confusion.shape[-1:]:
        raise ValueError(f"prior must be a tensor of shape {tuple(confusion.shape[:-3] + confusion.shape[-1:])}, "
                         f"got {tuple(prior.shape) if isinstance(prior, torch.Tensor) else type(prior).__name__}")
    if not bool(torch.isfinite(prior).all()) or bool((prior < 0).any()):
        raise ValueError("prior must be finite and >= 0")
    weights = prior / prior.sum(dim=-1, keepdim=True)
    return (diagonal * weights.unsqueeze(-2).to(diagonal.dtype)).sum(dim=-1)


def rollout_annotator_labels(answers, max_classes: int | None = None) -> tuple[torch.Tensor, int]:
    """Dawid--Skene labels of rollouts: items = queries, annotators = rollout slots, classes = answer ranks.

    Args:
        answers: one sequence per query of its rollouts' answers (hashable; ``None`` = unextractable), the
            j-th entry of every query coming from slot ``j``; shorter rows leave the missing slots unlabelled.
        max_classes: keep at most this many ranks; rarer answers become missing labels (None = all).
    Returns:
        ``(labels [Q, J] long, C)``: ``labels[q, j]`` = rank of slot j's answer among query q's answers
        (0 = most frequent, ties by first appearance), -1 for ``None`` / missing / dropped; ``C`` = the
        largest number of ranks of any query (at least 1).
    Raises:
        ValueError: no queries, or a bad ``max_classes``.
    """
    rows = [list(row) for row in answers]
    if not rows:
        raise ValueError("answers is empty: need at least one query")
    if max_classes is not None and (isinstance(max_classes, bool) or not isinstance(max_classes, int)
                                    or max_classes < 1):
        raise ValueError(f"max_classes must be a positive int or None, got {max_classes!r}")
    width = max(len(row) for row in rows)
    labels = torch.full((len(rows), width), -1, dtype=torch.long)
    num_classes = 1
    for q, row in enumerate(rows):
        counts: dict = {}
        for a in row:
            if a is not None:
                counts[a] = counts.get(a, 0) + 1
        order = sorted(counts, key=lambda a, first=list(counts): (-counts[a], first.index(a)))
        if max_classes is not None:
            order = order[:max_classes]
        rank = {a: r for r, a in enumerate(order)}
        num_classes = max(num_classes, len(order))
        for j, a in enumerate(row):
            if a is not None and a in rank:
                labels[q, j] = rank[a]
    return labels, num_classes
