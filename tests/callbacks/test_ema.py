"""EMAAnchor's update rule (Pixelis appendix 6 step 8): e <- rho e + (1 - rho) m, never written back."""
import copy

import torch

from ttrl_lightning.callbacks import ema_update_


def test_ema_update_formula_and_no_weight_swap():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    ema = copy.deepcopy(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    before_model = {k: v.clone() for k, v in model.state_dict().items()}
    before_ema = {k: v.clone() for k, v in ema.state_dict().items()}
    ema_update_(ema, model, 0.99)
    for k in before_model:
        torch.testing.assert_close(ema.state_dict()[k], 0.99 * before_ema[k] + 0.01 * before_model[k])
        assert torch.equal(model.state_dict()[k], before_model[k])  # never written into the trained model



class _Tied(torch.nn.Module):
    """An embedding shared with the output layer (tied word embeddings)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(5, 3)
        self.head = torch.nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight


def test_ema_update_averages_a_tied_tensor_once():
    torch.manual_seed(0)
    model = _Tied()
    ema = copy.deepcopy(model)
    assert ema.head.weight is ema.embed.weight
    with torch.no_grad():
        model.embed.weight.add_(1.0)
    before = ema.embed.weight.detach().clone()
    ema_update_(ema, model, 0.9)
    torch.testing.assert_close(ema.head.weight, 0.9 * before + 0.1 * model.embed.weight.detach())
