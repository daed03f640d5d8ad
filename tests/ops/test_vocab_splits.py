"""The GPU kernels' shared epilogue, fed with partials computed by hand from full logits."""
import torch

from ttrl_lightning.ops.reference import token_stats_reference
from ttrl_lightning.ops.vocab_splits import finish_token_stats


def _partials(z: torch.Tensor, ids: torch.Tensor, split: int) -> torch.Tensor:
    parts = []
    for v0 in range(0, z.shape[1], split):
        zs = z[:, v0:v0 + split]
        m = zs.amax(1)
        e = torch.exp(zs - m[:, None])
        in_slice = (ids >= v0) & (ids < v0 + split)
        zy = torch.where(in_slice, zs.gather(1, (ids - v0).clamp(0, zs.shape[1] - 1)[:, None])[:, 0], 0.0)
        parts.append(torch.stack([m, e.sum(1), (zs * e).sum(1), zy]))
    return torch.stack(parts)


def test_finish_token_stats_matches_reference_on_odd_split():
    g = torch.Generator().manual_seed(0)
    M, H, V, T = 9, 16, 1271, 0.7
    hidden = torch.randn(M, H, generator=g)
    weight = torch.randn(V, H, generator=g)
    bias = torch.randn(V, generator=g)
    ids = torch.randint(0, V, (M,), generator=g)
    ids[3] = -1  # unlabelled position
    z = (hidden @ weight.T + bias) / T
    got = finish_token_stats(_partials(z, ids, 300), hidden, weight, ids, bias, T)
    ref = token_stats_reference(hidden, weight, ids, bias, T)
    for a, b in zip(got, ref):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-5)
    assert got[0][3] == 0.0
