"""A model folder's own code is never run: a folder whose config maps the Auto classes to its own module
(``auto_map``) is refused with one line by every loader, even with ``y`` on stdin, and the module never runs."""
import json
import subprocess
import sys

import pytest

from ttrl_lightning.errors import UserError
from ttrl_lightning.models import load_model, load_processor, load_tokenizer


@pytest.fixture
def remote_code_folder(tmp_path):
    folder = tmp_path / "custom"
    folder.mkdir()
    marker = tmp_path / "ran"
    (folder / "custom_code.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                           "from transformers import PretrainedConfig\n"
                                           "class CustomConfig(PretrainedConfig):\n    model_type = 'custom_x'\n")
    (folder / "config.json").write_text(json.dumps({
        "model_type": "custom_x", "architectures": ["CustomModel"],
        "auto_map": {"AutoConfig": "custom_code.CustomConfig", "AutoModelForCausalLM": "custom_code.CustomModel",
                     "AutoTokenizer": ["custom_code.CustomTokenizer", None]}}))
    return folder, marker


@pytest.mark.parametrize("load", [lambda f: load_model(f, None), load_processor, load_tokenizer])
def test_every_loader_refuses_a_folder_that_asks_to_run_its_code(remote_code_folder, load):
    folder, marker = remote_code_folder
    with pytest.raises(UserError, match=r"asks to run its own code to load \(auto_map in config.json\).*trust_remote_code=False"):
        load(str(folder))
    assert not marker.exists()


@pytest.mark.subprocess
def test_ttrl_eval_with_yes_on_stdin_runs_nothing(remote_code_folder, tmp_path):
    folder, marker = remote_code_folder
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "a", "prompt": "1+1=", "gold": "2"}) + "\n")
    proc = subprocess.run([sys.executable, "-m", "ttrl_lightning.cli", "eval", "--model", str(folder), "--data",
                           str(questions), "--k", "1", "--max-new-tokens", "4"], input="y\ny\ny\n", capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 1 and "asks to run its own code" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not marker.exists()


@pytest.mark.parametrize("file", ["video_preprocessor_config.json", "preprocessor_config.json",
                                  "processor_config.json", "tokenizer_config.json", "generation_config.json",
                                  "image_processor_config.json", "feature_extractor_config.json",
                                  "some_future_config.json"])
@pytest.mark.parametrize("load", [lambda f: load_model(f, None), load_processor, load_tokenizer])
def test_auto_map_in_any_json_file_of_the_folder_is_refused(tmp_path, file, load):
    """Every JSON file transformers' sub-loaders may read, not a list of names: the video processor's config
    was not checked, and AutoProcessor asked [y/N] on stdin to run the folder's module."""
    from ttrl_lightning.models import load_model as build

    folder = tmp_path / "m"
    build("tiny:llama", load_tokenizer("tiny:llama")).save_pretrained(folder)
    load_tokenizer("tiny:llama").save_pretrained(folder)
    (folder / file).write_text(json.dumps({"auto_map": {"AutoVideoProcessor": "custom_code.Video"}}))
    with pytest.raises(UserError, match=rf"asks to run its own code to load \(auto_map in {file}\)"):
        load(str(folder))
    # a file that only mentions the words, not as its own key, is no reason to refuse
    (folder / file).write_text(json.dumps({"note": "auto_map", "nested": {"auto_map": {}}}))
    load_tokenizer(str(folder))
