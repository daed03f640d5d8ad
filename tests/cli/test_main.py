"""The `ttrl` dispatcher (ttrl_lightning/cli/__init__.py) and `python -m ttrl_lightning.cli`."""
import subprocess
import sys

import pytest

from ttrl_lightning.cli import SUBCOMMANDS, main


def test_unknown_command_and_help(capsys):
    assert main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err
    assert main([]) == 0
    printed = capsys.readouterr().out
    assert all(name in printed for name in SUBCOMMANDS)


def test_every_subcommand_resolves():
    import importlib

    for name, (target, help_) in SUBCOMMANDS.items():
        module, fn = target.split(":")
        assert module.startswith("ttrl_lightning.cli."), name
        assert callable(getattr(importlib.import_module(module), fn)) and help_


@pytest.mark.subprocess
def test_pool_and_bon_do_not_import_lightning_or_transformers(tmp_path):
    """Subcommands are imported lazily: `ttrl pool` and `ttrl bon` never pay for Lightning or transformers;
    also runs the package as `python -m ttrl_lightning.cli`."""
    pool = tmp_path / "p.jsonl"
    code = (
        "import sys; from ttrl_lightning.cli import main\n"
        f"assert main(['pool', 'simulate', '--out', {str(pool)!r}, '--questions', '6', '--rollouts', '4',"
        " '--tokens', '2']) == 0\n"
        f"assert main(['bon', '--pool', {str(pool)!r}, '--n', '2', '4', '--subsets', '2', '--bootstrap', '0',"
        f" '--out', {str(tmp_path / 'r.json')!r}, '--no-progress']) == 0\n"
        "heavy = {m.split('.')[0] for m in sys.modules} & {'lightning', 'pytorch_lightning', 'transformers'}\n"
        "heavy = sorted(heavy)\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "HEAVY []" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "ttrl_lightning.cli", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "usage: ttrl <command>" in proc.stdout and "demo" in proc.stdout
