"""VisConf's per-subset calibration, vectorised, against ttrl_lightning.signals.calibrate_confidence."""
import torch

from ttrl_lightning.eval.bon.calibration import SortedTokens, calibrated_confidence_means
from ttrl_lightning.eval.bon.subsets import draw_subsets
from ttrl_lightning.signals import calibrate_confidence


def test_calibration_means_match_torch_quantile_with_variable_lengths():
    g = torch.Generator().manual_seed(0)
    qc, r, t = 3, 7, 11
    tok = torch.randn(qc, r, t, generator=g).float()
    tok[0, 0, :5] = 1.0  # duplicated values
    lengths = torch.randint(1, t + 1, (qc, r), generator=g)
    idx = torch.stack([draw_subsets(1, r, 4, 6, g)[0] for _ in range(qc)])
    got = calibrated_confidence_means(SortedTokens.build(tok, lengths), idx, eps=1e-6)
    for q in range(qc):
        for s in range(idx.shape[1]):
            members = idx[q, s].tolist()
            cal = calibrate_confidence([tok[q, j, : int(lengths[q, j])] for j in members])
            ref = torch.stack([c.mean() for c in cal])
            assert torch.allclose(got[q, s], ref, atol=1e-12)
