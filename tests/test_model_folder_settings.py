"""A model folder's settings files are checked before transformers reads them: a JSON file that is not an object
(a list-shaped tokenizer_config.json), a non-finite number (``rms_norm_eps: NaN``, which failed only while
sampling: "probability tensor contains either inf, nan"), and a config whose sizes this machine cannot hold
(``num_hidden_layers: 1000000`` was still building after 90 s) are one line naming the file and the key."""
import json

import pytest

from ttrl_lightning.errors import UserError
from ttrl_lightning.models import estimated_parameters, load_model, load_tokenizer, max_parameters


@pytest.fixture
def folder(tmp_path):
    path = tmp_path / "m"
    load_model("tiny:llama", load_tokenizer("tiny:llama")).save_pretrained(path)
    load_tokenizer("tiny:llama").save_pretrained(path)
    return path


def _edit(path, change):
    content = json.loads(path.read_text())
    path.write_text(json.dumps(change(content)))


def test_a_non_finite_setting_is_refused(folder):
    _edit(folder / "config.json", lambda c: {**c, "rms_norm_eps": float("nan")})
    with pytest.raises(UserError, match=r"config\.json: rms_norm_eps is not a finite number \(nan\)"):
        load_model(str(folder), None)
    _edit(folder / "config.json", lambda c: {**c, "rms_norm_eps": 1e-6, "rope_scaling": {"factor": float("inf")}})
    with pytest.raises(UserError, match=r"rope_scaling\.factor is not a finite number \(inf\)"):
        load_tokenizer(str(folder))


def test_a_settings_file_that_is_not_an_object_is_refused(folder):
    (folder / "tokenizer_config.json").write_text(json.dumps(["not", "settings"]))
    with pytest.raises(UserError, match=r"tokenizer_config\.json: must be a JSON object of settings, got a JSON list"):
        load_tokenizer(str(folder))


def test_a_model_too_large_for_this_machine_is_refused_before_it_is_built(folder):
    _edit(folder / "config.json", lambda c: {**c, "num_hidden_layers": 1_000_000})
    with pytest.raises(UserError, match=r"config\.json: the sizes describe about [\d,]+ parameters, more than this "
                                        r"machine's memory holds in float32"):
        load_model(str(folder), None)


def test_the_estimate_counts_a_real_config():
    """SmolLM2-135M's sizes (its config.json): 134.5 million parameters, tied embeddings."""
    smollm2 = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
               "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152, "tie_word_embeddings": True}
    assert estimated_parameters(smollm2) == 134_479_872
    assert estimated_parameters({"text_config": smollm2, "vision_config": {}}) == 134_479_872
    assert max_parameters() > 10**9


@pytest.mark.parametrize("template, message", [
    ("{% for m in messages %}{{ m['content'] }}", r"cannot render a one-message prompt \(TemplateSyntaxError"),
    ("{{ raise_exception('this folder refuses every prompt') }}",
     r"cannot render a one-message prompt \(TemplateError: this folder refuses every prompt\)"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}ok",
     r"did not render a one-message prompt within 5 s; the template runs away"),
    ("{% for i in range(20000) %}0123456789{% endfor %}", r"renders a one-message prompt as 200,000 characters"),
])
def test_a_chat_template_that_fails_or_runs_away_is_refused_at_load(folder, template, message):
    """The folder's chat template is rendered once on a probe at load (cause 6: a template that raises or does
    not parse was a 47-line traceback at the first prompt; cause 7: a Jinja loop reached 5 GB in 33 s)."""
    (folder / "chat_template.jinja").write_text(template)
    with pytest.raises(UserError, match=r"m: its chat template " + message):
        load_tokenizer(str(folder))


def test_a_working_chat_template_loads(folder):
    (folder / "chat_template.jinja").write_text("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}"
                                                "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")
    tok = load_tokenizer(str(folder))
    assert tok.apply_chat_template([{"role": "user", "content": "2+2"}], tokenize=False,
                                   add_generation_prompt=True) == "<user>2+2<assistant>"


def test_a_saved_vision_language_folder_whose_processor_needs_torchvision_is_one_line(tmp_path):
    """Cause 11: AutoProcessor builds Qwen2-VL's video processor, which needs torchvision (not in the CPU
    install): a 38-line ImportError, now one line naming the package."""
    pytest.importorskip("transformers")
    try:
        import torchvision  # noqa: F401
        pytest.skip("torchvision is installed here: the processor loads")  # pragma: no cover
    except ImportError:
        pass
    from ttrl_lightning.models import load_processor

    path = tmp_path / "vl"
    tok = load_tokenizer("tiny:qwen2_vl")
    load_model("tiny:qwen2_vl", tok).save_pretrained(path)
    tok.save_pretrained(path)
    (path / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor", "patch_size": 14,
        "merge_size": 2, "temporal_patch_size": 2, "min_pixels": 3136, "max_pixels": 12845056}))
    with pytest.raises(UserError, match=r"vl: transformers builds this model's processor with a package that is not "
                                        r"installed \(torchvision\)"):
        load_processor(str(path))


def _processor(template: str):
    """A real transformers processor (LLaVA's: its image processor needs no torchvision) with ``template``."""
    transformers = pytest.importorskip("transformers")
    image_processor = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
    return transformers.LlavaProcessor(image_processor=image_processor(), tokenizer=load_tokenizer("tiny:llama"),
                                       chat_template=template)


def test_a_processors_chat_template_is_probed_with_an_image_part_when_the_processor_loads(monkeypatch):
    """A vision-language model's prompts are rendered by its processor (``prompt_format``), from a template of its
    own (``chat_template.json``): it is probed at load too, with the message as the processor is given it (an
    image part, then the text), so a template that fails there is one line naming the folder."""
    from ttrl_lightning import models

    parts = "{% for m in messages %}{% for c in m['content'] %}[{{ c['type'] }}]{% endfor %}{% endfor %}"
    models.check_chat_template(_processor(parts), "vl")  # iterates parts: a string message would fail it
    bad = "{% for m in messages %}{{ m['content'][0]['text'].upper() }}{% endfor %}"  # the image part has no text
    with pytest.raises(UserError, match=r"^vl: its chat template cannot render a one-message prompt"):
        models.check_chat_template(_processor(bad), "vl")
    monkeypatch.setattr(models, "is_vision_config", lambda config: True)
    monkeypatch.setattr(models, "from_pretrained", lambda cls, name, **kw: _processor(bad) if
                        cls.__name__ == "AutoProcessor" else None)
    with pytest.raises(UserError, match=r"^/some/vl: its chat template cannot render"):
        models.load_processor("/some/vl")


def test_a_vision_tower_too_deep_for_this_machine_is_refused_before_it_is_built(tmp_path):
    """The size check counted the text model only: a vision_config of depth 10^6 was built (unbounded)."""
    from ttrl_lightning.models import _vision_parameters

    path = tmp_path / "vl"
    load_model("tiny:qwen2_vl").save_pretrained(path)
    load_tokenizer("tiny:qwen2_vl").save_pretrained(path)
    _edit(path / "config.json", lambda c: {**c, "vision_config": {**c["vision_config"], "depth": 10**6}})
    with pytest.raises(UserError, match=r"config\.json: the sizes describe about [\d,]+ parameters, more than this "
                                        r"machine's memory holds in float32"):
        load_model(str(path), None)
    # Qwen2-VL's blocks: qkv and proj (4 d^2), an MLP of mlp_ratio 4 (8 d^2); the tiny tower's 12,288 per block
    assert _vision_parameters({"depth": 1, "embed_dim": 32, "hidden_size": 32, "mlp_ratio": 4}) == 12_288
