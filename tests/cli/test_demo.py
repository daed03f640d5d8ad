"""`ttrl demo` (ttrl_lightning/cli/demo.py): its configs are packaged, and the best-of-N part runs."""
import json
from pathlib import Path

import pytest

from ttrl_lightning.cli import main
from ttrl_lightning.cli.configs import config_path
from ttrl_lightning.cli.demo import TRAINING_STEPS

ROOT = Path(__file__).resolve().parents[2]


def test_training_step_configs_are_packaged():
    for _, name, _ in TRAINING_STEPS:
        assert Path(config_path(name)).read_bytes() == (ROOT / "configs" / name).read_bytes()


def test_demo_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["demo", "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ttrl demo")


@pytest.mark.slow  # ~6 s on 2 cores (the demo's full protocol: 100 subsets, 2,000 bootstrap replicates)
def test_demo_best_of_n_part(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--skip-training", "--questions", "20", "--out", str(out)]) == 0
    report = json.loads((out / "bon_report.json").read_text())
    assert report["num_questions"] == 20 and set(report["accuracy"]["visconf_rwc"]) == {"8", "16", "32"}
    printed = capsys.readouterr().out
    assert "== 1/1  best-of-N on a synthetic pool" in printed and "visconf_rwc" in printed
