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
