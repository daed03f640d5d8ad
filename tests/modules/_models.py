"""Small model variants for the log-prob path tests: an untied LM head with a bias, a soft-capped Gemma 2, random
rollouts."""
from __future__ import annotations

import copy

import torch
from torch import nn

from ttrl_lightning.rollout import Rollouts


def untied_with_bias(model: nn.Module, seed: int = 7) -> nn.Module:
    """A copy of ``model`` (in train mode) whose LM head is its own ``nn.Linear`` with a bias, not the input
    embeddings: the copy's weights plus a seeded perturbation of the head."""
    from transformers import AutoModelForCausalLM

    cfg = copy.deepcopy(model.config)
    cfg.tie_word_embeddings = False
    untied = AutoModelForCausalLM.from_config(cfg)
    untied.load_state_dict(model.state_dict())
    gen = torch.Generator().manual_seed(seed)
    old = model.get_output_embeddings().weight
    head = nn.Linear(old.shape[1], old.shape[0], bias=True)
    with torch.no_grad():
        head.weight.copy_(old + 0.05 * torch.randn(old.shape, generator=gen))
        head.bias.copy_(0.1 * torch.randn(old.shape[0], generator=gen))
    untied.set_output_embeddings(head)
    assert untied.get_output_embeddings().weight.data_ptr() != untied.get_input_embeddings().weight.data_ptr()
    return untied.train()


def tiny_gemma2(vocab_size: int, softcap: float = 0.5, seed: int = 0) -> nn.Module:
    """A 1-layer Gemma 2 with ``final_logit_softcapping = softcap`` (small, so the capping changes the
    log-probs of a random model visibly)."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(seed)
    cfg = Gemma2Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                       final_logit_softcapping=softcap, attn_implementation="eager")
    return Gemma2ForCausalLM(cfg).train()


def random_rollouts(vocab: int, R: int = 4, P: int = 3, C: int = 5, seed: int = 0) -> Rollouts:
    """Random rollouts: left padding in row 0's prompt, right padding in row 1's completion."""
    gen = torch.Generator().manual_seed(seed)
    prompt_mask = torch.ones(R, P, dtype=torch.long)
    prompt_mask[0, 0] = 0
    completion_mask = torch.ones(R, C, dtype=torch.long)
    completion_mask[1, -2:] = 0
    return Rollouts(prompt_ids=torch.randint(3, vocab, (R, P), generator=gen), prompt_mask=prompt_mask,
                    completion_ids=torch.randint(3, vocab, (R, C), generator=gen), completion_mask=completion_mask,
                    texts=[""] * R, group=torch.arange(R) // 2, n=2)
