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


def _fit_checkpoint(tmp_path, lora=None):
    """A one-step SFT run's checkpoint (what ``ttrl fit`` writes)."""
    import lightning.pytorch as pl

    from ttrl_lightning.data.datamodules import SFTDataModule
    from ttrl_lightning.modules import PolicySpec, SFTModule

    module = SFTModule(policy=PolicySpec(model="tiny:llama", tiny_kwargs={"hidden": 48, "layers": 1},
                                         lora=lora, lr=5e-2, seed=3))
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(module, SFTDataModule(task="arith", n_train=8, n_val=2, batch_size=4))
    path = tmp_path / "sft.ckpt"
    trainer.save_checkpoint(path)
    return module, str(path)


@pytest.mark.parametrize("lora", [None, {"r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"]}])
def test_fit_checkpoint_as_model_name(tmp_path, lora):
    module, path = _fit_checkpoint(tmp_path, lora)
    model = load_model(path)
    assert load_tokenizer(path).get_vocab() == module.tokenizer.get_vocab()
    assert model.config.hidden_size == 48 and model.config.num_hidden_layers == 1  # the saved spec's sizes
    assert not any("lora" in name for name in model.state_dict())  # adapters merged
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        trained = module.policy.eval()(input_ids=ids).logits
        torch.testing.assert_close(model.eval()(input_ids=ids).logits, trained, rtol=1e-4, atol=1e-5)
        fresh = load_model("tiny:llama", tiny_kwargs={"hidden": 48, "layers": 1}, seed=3)(input_ids=ids).logits
    assert not torch.allclose(fresh, trained)  # the checkpoint's weights, not a new initialisation


def test_bad_checkpoint_as_model_name_is_one_named_error(tmp_path):
    from ttrl_lightning.errors import UserError

    bad = tmp_path / "x.ckpt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="x.ckpt"):
        load_model(str(bad))
    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {}}, other)
    with pytest.raises(UserError, match="no policy spec"):
        load_model(str(other))


def test_tiny_qwen2_vl_tokenizer_processor_and_model():
    """tiny:qwen2_vl: Qwen's markers are single tokens after the character tokenizer's ids (which keep
    theirs), the chat template places one image placeholder, and the processor expands it to one token per
    merged 2 x 2 patch of the image's grid (Qwen2-VL: prod(grid_thw) / 4), which the model accepts."""
    from PIL import Image

    from ttrl_lightning.models import TINY_VL_TOKENS, TinyVLProcessor, load_processor

    char, tok = build_char_tokenizer(), load_tokenizer("tiny:qwen2_vl")
    assert tok.convert_tokens_to_ids(SPECIAL_TOKENS) == char.convert_tokens_to_ids(SPECIAL_TOKENS)
    assert [len(tok(t, add_special_tokens=False)["input_ids"]) for t in TINY_VL_TOKENS] == [1] * 6
    assert load_processor("tiny:qwen2") is None and load_tokenizer("tiny:qwen2").chat_template is None
    proc = load_processor("tiny:qwen2_vl")
    assert isinstance(proc, TinyVLProcessor)
    text = proc.apply_chat_template([{"role": "user", "content": [{"type": "image"},
                                                                  {"type": "text", "text": "how many?"}]}])
    assert text == ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>how many?<|im_end|>\n"
                    "<|im_start|>assistant\n")
    image = Image.new("RGB", (100, 60), (200, 10, 10))
    enc = proc(text=[text], images=[[image]])
    grid = enc["image_grid_thw"][0].tolist()
    assert grid[0] == 1 and grid[1] * 14 <= 112 and grid[2] * 14 <= 112  # at most 112 x 112 pixels
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    assert int((enc["input_ids"] == pad).sum()) == grid[0] * grid[1] * grid[2] // 4 > 1
    assert torch.equal(enc["mm_token_type_ids"], (enc["input_ids"] == pad).long())
    assert enc["pixel_values"].shape[0] == grid[0] * grid[1] * grid[2]
    model = load_model("tiny:qwen2_vl", tok, seed=0)
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration"
    with torch.no_grad():
        logits = model(**{k: v for k, v in enc.items()}).logits
    assert logits.shape == (1, enc["input_ids"].shape[1], len(tok)) and bool(torch.isfinite(logits).all())
    with pytest.raises(ValueError, match="1 images for 0 image placeholders"):
        proc(text=["no image here"], images=[[image]])


class _WritesAFile:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.path}",))


def test_a_pickled_object_in_an_hf_weight_file_is_refused_in_one_line(tmp_path):
    """A Hugging Face folder whose ``pytorch_model.bin`` is a malicious pickle: torch's weights-only loader
    blocks it (nothing runs), and the error is one UserError naming the folder (it was 36 lines)."""
    import os

    from ttrl_lightning.errors import UserError
    from ttrl_lightning.models import build_char_tokenizer, load_model

    tok = build_char_tokenizer()
    folder = tmp_path / "hf"
    load_model("tiny:qwen2", tok).save_pretrained(folder)
    tok.save_pretrained(folder)
    os.remove(folder / "model.safetensors")
    ran = tmp_path / "ran"
    torch.save({"model.embed_tokens.weight": _WritesAFile(ran)}, folder / "pytorch_model.bin")
    with pytest.raises(UserError, match=rf"{folder}: a weight file holds objects other than tensors, which are "
                                        r"not loaded \(.*GLOBAL posix\.system"):
        load_model(str(folder), tok)
    assert not ran.exists()


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    tok = load_tokenizer("tiny:llama")
    folder = tmp_path_factory.mktemp("tiny")
    load_model("tiny:llama", tok).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _edited(folder, tmp_path, config=None, weights=None):
    """A copy of ``folder`` with ``config`` merged into its config.json and ``weights(state)`` applied."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    out = tmp_path / "edited"
    shutil.copytree(folder, out)
    if config:
        content = json.loads((out / "config.json").read_text())
        for path, value in config.items():
            *parents, key = path.split(".")
            node = content
            for p in parents:
                node = node.setdefault(p, {})
            node[key] = value
        (out / "config.json").write_text(json.dumps(content))
    if weights:
        state = load_file(out / "model.safetensors")
        weights(state)
        save_file(state, out / "model.safetensors", metadata={"format": "pt"})
    return str(out)


def _nan(state):
    state["model.layers.0.mlp.down_proj.weight"][0, 0] = float("nan")


@pytest.mark.parametrize("config, weights, message", [
    # each sampled from NaN probabilities: a RuntimeError traceback at the first token
    (None, _nan, "the weight model.layers.0.mlp.down_proj.weight holds non-finite values"),
    ({"rms_norm_eps": -1e-6}, None, "config.json: rms_norm_eps must be a positive number, got -1e-06"),
    ({"rope_parameters.rope_theta": 0}, None, "config.json: rope_parameters.rope_theta must be a positive number"),
    ({"num_attention_heads": -2}, None, "config.json: num_attention_heads must be a size >= 1, got -2"),
])
def test_a_folder_a_model_cannot_sample_from_is_refused_when_it_is_loaded(tiny_folder, tmp_path, config, weights,
                                                                         message):
    from ttrl_lightning.errors import UserError

    folder = _edited(tiny_folder, tmp_path, config, weights)
    with pytest.raises(UserError) as e:
        load_model(folder)
    assert message in str(e.value) and folder in str(e.value)


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.update(state_dict=list(c["state_dict"].values())),
     "is not a Lightning checkpoint (its state_dict is a list, not a mapping of names to tensors)"),
    (lambda c: c["state_dict"].update({"policy.lm_head.weight": 1.0}),
     "its state_dict entry 'policy.lm_head.weight' is a float, not a tensor"),
    (lambda c: c.update(hyper_parameters=[1]), "its hyper_parameters is a list, not a mapping"),
    (lambda c: c["state_dict"]["policy.model.norm.weight"].fill_(float("inf")),
     "its state_dict entry policy.model.norm.weight holds non-finite values"),
])
def test_a_checkpoint_laid_out_otherwise_is_one_line(tmp_path, capsys, monkeypatch, edit, message):
    """Read by ttrl eval as its model (and by ttrl fit's --ckpt_path, through the same checkpoints.load_checkpoint):
    a list state_dict was an AttributeError traceback, NaN weights a sampling RuntimeError."""
    from ttrl_lightning.cli import main
    from ttrl_lightning.modules import PolicySpec, SFTModule

    monkeypatch.delenv("TTRL_DEBUG", raising=False)
    module = SFTModule(policy=PolicySpec(model="tiny:llama"))
    module.configure_model()
    checkpoint = {"state_dict": {f"policy.{k}": v for k, v in module.policy.state_dict().items()},
                  "hyper_parameters": {"policy": {"model": "tiny:llama", "seed": 0}}}
    edit(checkpoint)
    path = tmp_path / "bad.ckpt"
    torch.save(checkpoint, path)
    rc = main(["eval", "--model", str(path), "--task", "arith", "--n", "1", "--k", "1", "--max-new-tokens", "2",
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err and err.count("\n") == 1
    assert err.startswith("ttrl eval: ") and message in err and str(path) in err
