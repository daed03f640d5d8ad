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


#: JSON spellings of the key ``auto_map`` that hold no ``"auto_map"`` bytes: json (and transformers) read each as it
ESCAPED_KEYS = ["auto\\u005fmap", "\\u0061uto_map", "auto_\\u006dap", "\\u0061\\u0075\\u0074\\u006f\\u005f\\u006d\\u0061\\u0070"]


def _escaped_folder(tmp_path, key: str, file: str = "config.json"):
    """A folder whose ``file`` maps AutoConfig (and the processors) to ``custom_code.py`` under the JSON-escaped
    ``key``; importing the module writes a marker file."""
    folder = tmp_path / "escaped"
    folder.mkdir()
    marker = tmp_path / "ran"
    (folder / "custom_code.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                           "from transformers import PretrainedConfig\n"
                                           "class CustomConfig(PretrainedConfig):\n    model_type = 'custom_x'\n")
    mapping = ('{"AutoConfig": "custom_code.CustomConfig", "AutoVideoProcessor": "custom_code.Video", '
               '"AutoProcessor": "custom_code.Processor", "AutoImageProcessor": "custom_code.Image"}')
    (folder / file).write_text('{"model_type": "custom_x", "video_processor_type": "Video", '
                               f'"{key}": {mapping}}}')
    assert b'"auto_map"' not in (folder / file).read_bytes()
    return folder, marker


@pytest.mark.parametrize("key", ESCAPED_KEYS)
@pytest.mark.parametrize("load", [lambda f: load_model(f, None), load_processor, load_tokenizer])
def test_an_escaped_auto_map_key_is_read_as_auto_map(tmp_path, monkeypatch, key, load):
    """The check parsed a file only when its bytes held ``"auto_map"``; ``"auto\\u005fmap"`` passed it, and json
    (as transformers) reads the key as ``auto_map``: the video processor then asked [y/N] and ran the module."""
    import io

    folder, marker = _escaped_folder(tmp_path, key)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 8))
    with pytest.raises(UserError, match=r"asks to run its own code to load \(auto_map in config.json\)"):
        load(str(folder))
    assert not marker.exists()


@pytest.mark.parametrize("file", ["video_preprocessor_config.json", "preprocessor_config.json", "zz_extra.json"])
def test_an_escaped_auto_map_in_any_json_file_is_refused(tmp_path, file):
    from ttrl_lightning.models import auto_mapped_file

    folder, _ = _escaped_folder(tmp_path, ESCAPED_KEYS[0], file)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert auto_mapped_file(str(folder)) == file
    # the same key nested, or as a value, is not a mapping transformers reads
    (folder / file).write_text('{"nested": {"auto\\u005fmap": {}}, "note": "auto\\u005fmap"}')
    assert auto_mapped_file(str(folder)) is None


def test_no_loader_can_prompt_or_import_a_folder_module(tmp_path, monkeypatch):
    """Not detected but impossible: a transformers loader called without ``trust_remote_code`` (as transformers'
    own sub-loaders call the video processor's) asks [y/N] on stdin and imports the folder's module on ``y``.
    Inside :func:`no_remote_code` it raises instead, with ``y`` waiting on stdin, and nothing is imported; the
    prompt and the import are back afterwards."""
    import builtins
    import io
    import sys

    from transformers import AutoConfig
    from transformers import dynamic_module_utils as dynamic

    from ttrl_lightning.models import no_remote_code

    folder, marker = _escaped_folder(tmp_path, ESCAPED_KEYS[0])
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 8))
    before = (dynamic.TIME_OUT_REMOTE_CODE, dynamic.get_class_in_module, builtins.input, sys.stdin)
    with no_remote_code():
        with pytest.raises(ValueError, match="trust_remote_code"):
            AutoConfig.from_pretrained(str(folder))
        with pytest.raises(ValueError, match="trust_remote_code"):
            AutoConfig.from_pretrained(str(folder), trust_remote_code=True)  # even asked for: not imported
        with pytest.raises(ValueError):
            input("run it? [y/N] ")
    assert not marker.exists()
    assert (dynamic.TIME_OUT_REMOTE_CODE, dynamic.get_class_in_module, builtins.input, sys.stdin) == before


def test_a_missed_auto_map_still_runs_nothing(tmp_path, monkeypatch):
    """Were the file check to miss a mapping, every loader still refuses in one line and runs nothing."""
    import io

    import ttrl_lightning.models as models

    folder, marker = _escaped_folder(tmp_path, ESCAPED_KEYS[0])
    monkeypatch.setattr(models, "auto_mapped_file", lambda folder: None)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 8))
    for load in (lambda f: load_model(f, None), load_processor, load_tokenizer):
        with pytest.raises(UserError, match="run its own code"):
            load(str(folder))
    assert not marker.exists()


@pytest.mark.parametrize("command", [
    ["eval", "--k", "1", "--max-new-tokens", "4", "--model", "{folder}", "--data", "{questions}"],
    ["generate", "--n", "1", "--max-new-tokens", "4", "--out", "pool.parquet", "--no-progress", "--model", "{folder}",
     "--data", "{questions}"],
])
def test_commands_with_yes_on_stdin_refuse_an_escaped_auto_map_in_one_line(tmp_path, monkeypatch, capsys, command):
    import io

    from ttrl_lightning.cli import main

    folder, marker = _escaped_folder(tmp_path, ESCAPED_KEYS[0])
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "a", "prompt": "1+1=", "gold": "2"}) + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TTRL_DEBUG", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 8))
    assert main([a.format(folder=folder, questions=questions) for a in command]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "auto_map in config.json" in err and err.startswith(f"ttrl {command[0]}: ")
    assert not marker.exists()


@pytest.mark.subprocess
def test_ttrl_fit_with_yes_on_stdin_refuses_an_escaped_auto_map(tmp_path):
    from ttrl_lightning.cli.configs import config_path

    folder, marker = _escaped_folder(tmp_path, ESCAPED_KEYS[1])
    proc = subprocess.run([sys.executable, "-m", "ttrl_lightning.cli", "fit", "--config",
                           config_path("rft/tiny_grpo_fast.yaml"), "--trainer.logger=false",
                           "--model.init_args.policy.model", str(folder)], input="y\ny\ny\n", capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("ttrl ")]
    assert proc.returncode == 1 and len(said) == 1 and "auto_map in config.json" in said[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "[y/N]" not in proc.stderr and not marker.exists()
