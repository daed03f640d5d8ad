"""The `ttrl` dispatcher (ttrl_lightning/cli/__init__.py) and `python -m ttrl_lightning.cli`."""
import os
import subprocess
import sys
import types

import pytest

from ttrl_lightning.cli import SUBCOMMANDS, main
from ttrl_lightning.errors import UserError


def test_unknown_command_and_help(capsys):
    assert main(["nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ttrl: unknown command 'nope'; commands: bon, pool") and len(err.splitlines()) == 1
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
        "heavy = {m.split('.')[0] for m in sys.modules}\n"
        "heavy &= {'lightning', 'pytorch_lightning', 'transformers'}\n"
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


@pytest.fixture
def fake_command(monkeypatch):
    """Registers `ttrl fake`, which raises what the test puts in ``raised`` and records its argv."""
    state = {"raised": None, "argv": None}

    def run(argv):
        state["argv"] = argv
        state["env"] = os.environ.get("TTRL_DEBUG")
        if state["raised"] is not None:
            raise state["raised"]
        return 0

    module = types.ModuleType("fake_ttrl_command")
    module.run = run
    monkeypatch.setitem(sys.modules, "fake_ttrl_command", module)
    monkeypatch.setitem(SUBCOMMANDS, "fake", ("fake_ttrl_command:run", "a test command"))
    monkeypatch.delenv("TTRL_DEBUG", raising=False)
    return state


@pytest.mark.parametrize("error, line", [
    (UserError("pool.jsonl, line 3 (id='q2'): rollouts[1].entropy holds a string"),
     "ttrl fake: pool.jsonl, line 3 (id='q2'): rollouts[1].entropy holds a string"),
    (UserError("two\nlines"), "ttrl fake: two lines"),
    (FileNotFoundError(2, "No such file or directory", "missing.jsonl"),
     "ttrl fake: missing.jsonl: No such file or directory"),
    (IsADirectoryError(21, "Is a directory", "outputs"), "ttrl fake: outputs: Is a directory"),
    (PermissionError(13, "Permission denied", "/root/x.json"), "ttrl fake: /root/x.json: Permission denied"),
])
def test_user_errors_are_one_line_exit_1(fake_command, capsys, error, line):
    fake_command["raised"] = error
    assert main(["fake", "--x"]) == 1
    out, err = capsys.readouterr()
    assert err == line + "\n" and out == ""


def test_debug_flag_and_environment_show_the_traceback(fake_command, monkeypatch, capsys):
    fake_command["raised"] = UserError("bad --n")
    with pytest.raises(UserError, match="bad --n"):
        main(["fake", "--n", "3", "--debug"])
    assert fake_command["argv"] == ["--n", "3"]  # removed before the command parses its options
    assert fake_command["env"] == "1" and "TTRL_DEBUG" not in os.environ  # set while the command runs
    with pytest.raises(UserError):
        main(["--debug", "fake"])
    monkeypatch.setenv("TTRL_DEBUG", "1")
    with pytest.raises(UserError):
        main(["fake"])
    monkeypatch.setenv("TTRL_DEBUG", "0")
    assert main(["fake"]) == 1
    assert capsys.readouterr().err == "ttrl fake: bad --n\n"


def test_other_errors_are_not_hidden(fake_command):
    """A bug (not a user error) keeps its traceback: hiding it would hide the bug."""
    fake_command["raised"] = ZeroDivisionError("bug")
    with pytest.raises(ZeroDivisionError):
        main(["fake"])


def test_interrupt_is_exit_130_with_one_line(fake_command, capsys):
    fake_command["raised"] = KeyboardInterrupt()
    assert main(["fake"]) == 130
    assert capsys.readouterr().err == "ttrl fake: interrupted\n"
    with pytest.raises(KeyboardInterrupt):
        main(["fake", "--debug"])


def test_exit_of_a_command_is_left_alone(fake_command):
    """`--help` (argparse, LightningCLI) exits by itself; the dispatcher does not turn that into an error."""
    fake_command["raised"] = SystemExit(0)
    with pytest.raises(SystemExit) as info:
        main(["fake", "--help"])
    assert info.value.code == 0


@pytest.mark.subprocess
def test_console_entry_prints_one_line_without_traceback(tmp_path):
    """The real process: a refused pool is one line on stderr and exit code 1; with TTRL_DEBUG=1 the
    traceback is shown."""
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"id": "q1", "rollouts": [{"answer": "1", "entropy": [1, "x"]}]}\n')
    cmd = [sys.executable, "-m", "ttrl_lightning.cli", "pool", "validate", str(bad)]
    env = {k: v for k, v in os.environ.items() if k != "TTRL_DEBUG"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ttrl pool: {bad}, line 1") and "entropy" in lines[0]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**env, "TTRL_DEBUG": "1"})
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "PoolError" in proc.stderr
