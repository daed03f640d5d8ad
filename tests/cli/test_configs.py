"""Packaged configs (ttrl_lightning/cli/configs.py): one copy in the repository's configs/, found through
importlib.resources, also from a non-editable install run outside the repository."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ttrl_lightning.cli.configs import ConfigNotFoundError, config_path, packaged_configs

ROOT = Path(__file__).resolve().parents[2]
REPO_CONFIGS = sorted(p.relative_to(ROOT / "configs").as_posix() for p in (ROOT / "configs").rglob("*.yaml"))
#: what a build needs from the checkout (the C++ extension is skipped: TTRL_SKIP_CPU_BUILD)
BUILD_INPUTS = ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "requirements.txt",
                "requirements-dev.txt", "configs", "ttrl_lightning")


def test_every_repository_config_is_packaged():
    assert REPO_CONFIGS and packaged_configs() == REPO_CONFIGS
    for name in REPO_CONFIGS:
        assert Path(config_path(name)).read_bytes() == (ROOT / "configs" / name).read_bytes()
    assert config_path("configs/sft/tiny_arith.yaml") == config_path("sft/tiny_arith.yaml")


@pytest.mark.parametrize("name", ["sft/nope.yaml", "sft", "../setup.py", "sft/../rft/tiny_grpo.yaml"])
def test_unknown_config_lists_the_packaged_ones(name):
    with pytest.raises(ConfigNotFoundError) as e:
        config_path(name)
    message = str(e.value)
    assert repr(name) in message and "sft/tiny_arith.yaml" in message and "rft/tiny_grpo.yaml" in message


@pytest.mark.subprocess
def test_non_editable_install_runs_demo_help_and_finds_every_config(tmp_path):
    """`pip install --target` of a copy of the build inputs (no C++ build), run from a folder outside the
    repository with only that install on the path for ttrl_lightning: `ttrl demo --help` works (the console
    script) and every file under configs/ resolves inside the install, with the repository's bytes."""
    src, target, elsewhere = tmp_path / "src", tmp_path / "site", tmp_path / "elsewhere"
    src.mkdir()
    elsewhere.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, src / name)
    env = {**os.environ, "TTRL_SKIP_CPU_BUILD": "1", "TTRL_SKIP_CUDA_BUILD": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(target), str(src)],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    env["PYTHONPATH"] = str(target)
    proc = subprocess.run([sys.executable, str(target / "bin" / "ttrl"), "demo", "--help"], cwd=elsewhere,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage: ttrl demo")

    code = ("import json, ttrl_lightning\n"
            "from ttrl_lightning.cli.configs import config_path, packaged_configs\n"
            "print(json.dumps({'package': ttrl_lightning.__file__,"
            " 'configs': {n: config_path(n) for n in packaged_configs()}}))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout)
    assert Path(found["package"]).is_relative_to(target)
    assert sorted(found["configs"]) == REPO_CONFIGS
    for name, path in found["configs"].items():
        assert Path(path).is_relative_to(target / "ttrl_lightning" / "configs"), (name, path)
        assert Path(path).read_bytes() == (ROOT / "configs" / name).read_bytes()
