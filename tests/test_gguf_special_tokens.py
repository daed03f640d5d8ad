"""The BOS / EOS a GGUF file's tokenizer asks for (real_models.special_token_flags, set_special_tokens):
transformers' GGUF tokenizer ignores tokenizer.ggml.add_bos_token, and Gemma 3 270M's file sets it, so the
import sets it; a file without the flags (SmolLM2's says add_bos_token False) leaves the tokenizer as it is."""
from __future__ import annotations

import pytest

gguf = pytest.importorskip("gguf")

from ttrl_lightning.models import build_char_tokenizer  # noqa: E402
from ttrl_lightning.real_models import adds_special_tokens, set_special_tokens, special_token_flags  # noqa: E402


def _gguf_file(path, **flags) -> str:
    """A readable GGUF file with no tensors and the given ``tokenizer.ggml.<flag>`` booleans."""
    writer = gguf.GGUFWriter(str(path), "gemma3")
    for key, value in flags.items():
        writer.add_bool(f"tokenizer.ggml.{key}", value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def test_the_flags_are_read_from_the_file(tmp_path):
    assert special_token_flags(gguf.GGUFReader(_gguf_file(tmp_path / "a.gguf", add_bos_token=True))) == (True, False)
    both = _gguf_file(tmp_path / "b.gguf", add_bos_token=True, add_eos_token=True)
    assert special_token_flags(gguf.GGUFReader(both)) == (True, True)
    assert special_token_flags(gguf.GGUFReader(_gguf_file(tmp_path / "c.gguf", add_bos_token=False))) == (False, False)
    assert special_token_flags(gguf.GGUFReader(_gguf_file(tmp_path / "d.gguf"))) == (False, False)


def test_the_tokenizer_gets_the_bos_and_eos_the_file_asks_for_and_keeps_them_when_saved(tmp_path):
    from transformers import AutoTokenizer

    tok = build_char_tokenizer()
    bos, eos = tok.bos_token_id, tok.eos_token_id
    assert adds_special_tokens(tok) == (False, False) and tok("12")["input_ids"][0] != bos
    set_special_tokens(tok, False, False)  # what it already does: unchanged
    assert adds_special_tokens(tok) == (False, False)
    set_special_tokens(tok, True, False)
    plain = tok("12", add_special_tokens=False)["input_ids"]
    assert tok("12")["input_ids"] == [bos] + plain and adds_special_tokens(tok) == (True, False)
    tok.save_pretrained(tmp_path / "tok")
    reloaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert reloaded("12")["input_ids"] == [bos] + plain  # the saved folder adds it too
    assert reloaded("12", add_special_tokens=False)["input_ids"] == plain
    set_special_tokens(tok, True, True)
    assert tok("12")["input_ids"] == [bos] + plain + [eos]
    set_special_tokens(tok, False, False)  # and back: a file that asks for neither
    assert tok("12")["input_ids"] == plain
