"""Model loading: the built-in character tokenizer, tiny configs, local checkpoints, LoRA."""
import pytest
import torch

from ttrl_lightning.models import SPECIAL_TOKENS, build_char_tokenizer, load_model, load_tokenizer
from ttrl_lightning.tools.protocol import TOOL_TOKENS


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def test_char_tokenizer_round_trip(tok):
    text = "12+7=<call>add(12,7)</call><out>19</out>19"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert tok.convert_ids_to_tokens(ids)[5] == "<call>"


def test_tool_tokens_keep_their_ids(tok):
    """The protocol's tokens are single tokens with the ids they always had (checkpoints stay valid)."""
    assert SPECIAL_TOKENS == ["<pad>", "<eos>", "<bos>", "<unk>", "<call>", "</call>", "<out>", "</out>", "<hid>"]
    assert tok.convert_tokens_to_ids(list(TOOL_TOKENS)) == [4, 5, 6, 7, 8]


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_tiny_models_and_local_checkpoint(arch, tok, tmp_path):
    m = load_model(f"tiny:{arch}", tok, seed=3)
    m2 = load_model(f"tiny:{arch}", tok, seed=3)
    for a, b in zip(m.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)  # same seed, same weights
    m.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path))
    for (k, a), b in zip(m.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), k
    tok2 = load_tokenizer(str(tmp_path))
    assert tok2("3+4=", add_special_tokens=False)["input_ids"] == tok("3+4=", add_special_tokens=False)["input_ids"]
    x = torch.tensor([[10, 11, 12]])
    torch.testing.assert_close(m(x).logits, loaded(x).logits)


def test_lora_trains_only_adapters(tok):
    m = load_model("tiny:qwen2", tok, lora={"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    trainable = [n for n, p in m.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
