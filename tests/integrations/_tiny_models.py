"""Tiny randomly initialised configs of real architectures for the integration tests (no downloads)."""
from __future__ import annotations

import torch

IMAGE_ID, VIDEO_ID, VSTART_ID, VEND_ID = 90, 91, 92, 93
VOCAB = 99


def _text(**extra):
    return dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                **extra)


def qwen2_vl(seed=0, kind="qwen2_vl"):
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLConfig,
                              Qwen2VLForConditionalGeneration)

    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}
    ids = dict(image_token_id=IMAGE_ID, video_token_id=VIDEO_ID, vision_start_token_id=VSTART_ID,
               vision_end_token_id=VEND_ID)
    if kind == "qwen2_vl":
        vision = dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, patch_size=14, spatial_merge_size=2,
                      temporal_patch_size=2, in_channels=3)
        cfg, cls = Qwen2VLConfig(text_config=_text(rope_parameters=rope), vision_config=vision, **ids), \
            Qwen2VLForConditionalGeneration
    else:
        vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, in_channels=3, window_size=56,
                      fullatt_block_indexes=[0])
        cfg, cls = Qwen2_5_VLConfig(text_config=_text(rope_parameters=rope), vision_config=vision, **ids), \
            Qwen2_5_VLForConditionalGeneration
    torch.manual_seed(seed)
    return cls(cfg).eval()


def llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**_text())).eval()


def qwen3(seed=0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    return Qwen3ForCausalLM(Qwen3Config(head_dim=8, **_text())).eval()


def vl_batch(seed=0, B=2, T=16, grid=(1, 4, 4), left_pad=(0, 2), prompt_len=10):
    """Prompt [pad] text <vstart> <image>x4 <vend> text | completion; left padding per row; completion_mask set."""
    gen = torch.Generator().manual_seed(seed)
    n_img = grid[0] * grid[1] * grid[2] // 4
    ids = torch.randint(3, 80, (B, T), generator=gen)
    attn = torch.ones(B, T, dtype=torch.long)
    mm = torch.zeros(B, T, dtype=torch.long)
    completion = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        p = left_pad[b]
        ids[b, :p] = 0
        attn[b, :p] = 0
        ids[b, p + 1] = VSTART_ID
        ids[b, p + 2:p + 2 + n_img] = IMAGE_ID
        mm[b, p + 2:p + 2 + n_img] = 1
        ids[b, p + 2 + n_img] = VEND_ID
        completion[b, prompt_len:] = 1
    patch = 3 * 2 * 14 * 14
    pixels = torch.randn(B * grid[0] * grid[1] * grid[2], patch, generator=gen)
    thw = torch.tensor([list(grid)] * B)
    return dict(input_ids=ids, attention_mask=attn, completion_mask=completion, pixel_values=pixels,
                image_grid_thw=thw, mm_token_type_ids=mm)


def text_batch(seed=0, B=2, T=12, left_pad=(0, 3), prompt_len=6):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 80, (B, T), generator=gen)
    attn = torch.ones(B, T, dtype=torch.long)
    completion = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        ids[b, :left_pad[b]] = 0
        attn[b, :left_pad[b]] = 0
        completion[b, prompt_len:] = 1
    return dict(input_ids=ids, attention_mask=attn, completion_mask=completion)
