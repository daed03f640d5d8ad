"""`ttrl bon` (ttrl_lightning/cli/bon.py): the JSON report holds the protocol's numbers, not just plausible
ones."""
import json
import os
import re
import signal

import pytest

from ttrl_lightning.cli import main
from ttrl_lightning.data.pool import load_pool
from ttrl_lightning.eval.bon.protocol import DEFAULT_METHODS, BoNConfig, evaluate_pool

ALL_METHODS = {"first", "oracle", "majority", "self_certainty", "self_certainty_borda_p1.2", "lookback",
               "lookback_rwc", "visconf_top1", "visconf_rwc", "visconf_wc", "min_length", "hms",
               "dual_view_majority"}


def test_bon_report_matches_evaluate_pool(tmp_path, capsys):
    """Simulated pool -> parquet -> `ttrl bon`: every accuracy equals `evaluate_pool` run directly on the same
    pool and config, the bootstrap entries are the target minus each comparator, and the plot is written."""
    pool = str(tmp_path / "pool.jsonl")
    assert main(["pool", "simulate", "--out", pool, "--questions", "30", "--rollouts", "8",
                 "--tokens", "8"]) == 0
    pq = str(tmp_path / "pool.parquet")
    assert main(["pool", "convert", pool, pq]) == 0
    out = str(tmp_path / "r" / "report.json")
    rc = main(["bon", "--pool", pq, "--n", "4", "8", "--subsets", "5", "--seed", "3", "--borda-p", "1.2",
               "--bootstrap", "50", "--out", out, "--no-progress"])
    assert rc == 0
    report = json.load(open(out))
    acc = report["accuracy"]
    assert set(acc) >= ALL_METHODS and set(acc["visconf_rwc"]) == {"4", "8"}

    cfg = BoNConfig(ns=(4, 8), subsets=5, seed=3, borda_p=(1.2,))
    direct = evaluate_pool(load_pool(pq), list(DEFAULT_METHODS), cfg, progress=False)
    assert acc == direct.accuracy()  # JSON round-trips floats exactly
    assert report["num_questions"] == 30 and report["complete"] is True
    # bootstrap diffs: target (visconf_rwc) minus comparator, on the same per-question numbers
    for comp in ("majority", "first"):
        for n in ("4", "8"):
            ci = report["bootstrap"][comp][n]
            assert ci["diff"] == pytest.approx(acc["visconf_rwc"][n] - acc[comp][n], abs=1e-9)
            assert ci["lo"] <= ci["diff"] <= ci["hi"]
    assert os.path.getsize(os.path.splitext(out)[0] + ".png") > 1000
    printed = capsys.readouterr().out
    assert "visconf_rwc" in printed and "N=8" in printed
    assert f"{100 * acc['majority']['8']:.2f}" in printed  # the table prints the report's numbers


def test_bon_hand_computed_pool(tmp_path):
    """Three questions x 4 rollouts, N = 4 (the full pool, one subset). ``first`` is the accuracy of one
    rollout of the subset (the mean correctness): (2/4 + 1/4 + 3/4) / 3 = 1/2; majority 2/3; oracle 1."""
    answers = {"q1": ("1", "2 1 1 3"),   # majority right
               "q2": ("5", "5 6 6 7"),   # majority wrong
               "q3": ("4", "3 4 4 4")}   # majority right
    records = [{"id": q, "gold": gold, "rollouts": [{"answer": a} for a in seq.split()]}
               for q, (gold, seq) in answers.items()]
    pool = tmp_path / "hand.jsonl"
    pool.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "hand.json"
    assert main(["bon", "--pool", str(pool), "--methods", "first", "majority", "oracle", "--n", "4",
                 "--bootstrap", "0", "--out", str(out), "--no-progress"]) == 0
    acc = json.load(open(out))["accuracy"]
    expected = {"first": 0.5, "majority": 2 / 3, "oracle": 1.0}
    assert {m: v["4"] for m, v in acc.items()} == pytest.approx(expected)


# --- user errors, interrupts and concurrent runs ------------------------------------------------------------

def _pool(tmp_path, questions=12, rollouts=8, name="pool.jsonl", **kw) -> str:
    path = str(tmp_path / name)
    args = ["pool", "simulate", "--out", path, "--questions", str(questions), "--rollouts", str(rollouts),
            "--tokens", "4"]
    for k, v in kw.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    assert main(args) == 0
    return path


def _one_line_error(capsys) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _strict_json(path):
    def refuse(constant):
        raise AssertionError(f"non-finite literal {constant} in {path}")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh, parse_constant=refuse)


@pytest.mark.parametrize("options, flag, says", [
    (["--subsets", "0", "--bootstrap", "0"], "--subsets", "integer >= 1, got '0'"),
    (["--subsets", "-3"], "--subsets", "integer >= 1, got '-3'"),
    (["--bootstrap", "-5"], "--bootstrap", "integer >= 0, got '-5'"),
    (["--borda-p", "nan"], "--borda-p", "finite number > 0, got 'nan'"),
    (["--borda-p", "0.7", "0.70"], "--borda-p", "0.7 is given twice"),
    (["--lookback-lambda", "nan"], "--lookback-lambda", "finite number >= 0, got 'nan'"),
    (["--lookback-alpha", "inf"], "--lookback-alpha", "got 'inf'"),
    (["--visconf-alpha", "1.5"], "--visconf-alpha", "in [0, 1], got '1.5'"),
    (["--n", "0"], "--n", "integer >= 1, got '0'"),
    (["--n", "4.5"], "--n", "got '4.5'"),
    (["--n", "4", "8", "4"], "--n", "4 is given twice"),
    (["--seed", "-1"], "--seed", "got '-1'"),
    (["--target", "vizconf_rwc"], "--target", "'vizconf_rwc' is not among the evaluated methods"),
    (["--methods", "majority", "first", "majority"], "--methods", "'majority' is given twice"),
    (["--out", "report.png"], "--out", "a .json file, got 'report.png'"),
    (["--targ", "majority"], "--targ", "unrecognized arguments"),
])
def test_bad_options_are_refused_naming_the_flag(tmp_path, capsys, options, flag, says):
    """Every option is checked before the pool is read: exit 1, one line naming the flag, nothing written."""
    pool = _pool(tmp_path)
    out = tmp_path / "report.json"
    rc = main(["bon", "--pool", pool, "--no-progress", "--out", str(out), *options])
    line = _one_line_error(capsys)
    assert rc == 1 and line.startswith("ttrl bon: ") and flag in line and says in line, line
    assert not out.exists()


def test_budget_above_the_pool_size_names_the_flag_and_the_file(tmp_path, capsys):
    pool = _pool(tmp_path, rollouts=8)
    assert main(["bon", "--pool", pool, "--n", "4", "16", "--out", str(tmp_path / "r.json")]) == 1
    line = _one_line_error(capsys)
    assert "--n" in line and "N=16" in line and "pool.jsonl" in line and "8 original-view" in line


def test_unknown_methods_are_one_line_naming_them(tmp_path, capsys):
    pool = _pool(tmp_path)
    for name, says in [("visconf_rcw", "unknown best-of-N method 'visconf_rcw'; known: "),
                       ("self_certainty_borda_pX",
                        "'X' after 'self_certainty_borda_p' is not a finite number"),
                       ("self_certainty_borda_pnan", "'nan' after"),
                       ("self_certainty_borda_p-1", "'-1' after")]:
        rc = main(["bon", "--pool", pool, "--methods", "majority", name, "--out", str(tmp_path / "r.json")])
        line = _one_line_error(capsys)
        assert rc == 1 and line.startswith("ttrl bon: argument --methods: ") and says in line, line
        assert "KeyError" not in line and "could not convert" not in line and "visconf_rwc" in line


def test_report_never_overwrites_the_pool(tmp_path, capsys):
    pool = tmp_path / "pool.json"  # a pool file named .json: --out may not be it
    pool.write_bytes(open(_pool(tmp_path), "rb").read())
    before = pool.read_bytes()
    assert main(["bon", "--pool", str(pool), "--n", "4", "--out", str(tmp_path / "." / "pool.json")]) == 1
    assert "would overwrite the pool" in _one_line_error(capsys)
    assert pool.read_bytes() == before


def test_missing_pool_is_one_line(tmp_path, capsys):
    assert main(["bon", "--pool", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "r.json")]) == 1
    assert "nope.jsonl" in _one_line_error(capsys)


def test_no_nan_anywhere_with_the_smallest_settings(tmp_path, capsys):
    """One subset, no bootstrap, N = 1: finite numbers only, strict JSON."""
    pool = _pool(tmp_path, rollouts=2)
    out = tmp_path / "r.json"
    assert main(["bon", "--pool", pool, "--n", "1", "2", "--subsets", "1", "--bootstrap", "0",
                 "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert not re.search(r"\b(nan|inf)\b", printed, flags=re.IGNORECASE)
    values = [v for per_n in _strict_json(out)["accuracy"].values() for v in per_n.values()]
    assert values and all(0.0 <= v <= 1.0 for v in values)


class _InterruptingBar:
    """A progress bar whose ``after``-th update raises KeyboardInterrupt (Ctrl-C during the evaluation), or
    with ``sigterm`` sends the process SIGTERM, which the ``ttrl`` dispatcher raises as ``Terminated``."""

    def __init__(self, after, sigterm=False):
        self.after, self.updates, self.sigterm = after, 0, sigterm

    def update(self, k):
        self.updates += 1
        if self.updates == self.after:
            if self.sigterm:  # the real signal, through the dispatcher's handler
                os.kill(os.getpid(), signal.SIGTERM)
            raise KeyboardInterrupt

    def close(self):
        pass


@pytest.mark.parametrize("sigterm", [False, True], ids=["ctrl_c", "sigterm"])
def test_interrupted_rerun_keeps_the_complete_report(tmp_path, capsys, monkeypatch, sigterm):
    """A complete report exists; a rerun interrupted after two chunks of 32 questions writes
    report.partial.json / .png beside it, leaves report.json and report.png byte-identical, says where, counts
    the questions it evaluated (64 of 100, not 100), and exits 130 (143 for SIGTERM)."""
    pool = _pool(tmp_path, questions=100, rollouts=4)
    out = tmp_path / "report.json"
    argv = ["bon", "--pool", pool, "--methods", "majority", "visconf_rwc", "--n", "2", "4", "--subsets", "3",
            "--bootstrap", "20", "--out", str(out)]
    assert main(argv + ["--no-progress"]) == 0
    capsys.readouterr()
    complete_json, complete_png = out.read_bytes(), (tmp_path / "report.png").read_bytes()

    import ttrl_lightning.eval.bon.protocol as bon_module
    monkeypatch.setattr(bon_module, "progress_bar", lambda **kw: _InterruptingBar(after=2, sigterm=sigterm))
    assert main(argv) == (143 if sigterm else 130)
    printed = capsys.readouterr().out
    assert out.read_bytes() == complete_json and (tmp_path / "report.png").read_bytes() == complete_png
    partial = _strict_json(tmp_path / "report.partial.json")
    assert partial["complete"] is False and partial["num_questions"] == 64
    assert (tmp_path / "report.partial.png").stat().st_size > 1000
    footer = printed.strip().splitlines()[-1]
    word = "terminated (SIGTERM)" if sigterm else "interrupted"
    assert f"{word}: 64 of 100 questions" in footer and "report.partial.json" in footer
    assert f"the report at {out} was left as it was" in footer
    assert "INTERRUPTED: only the first 64 questions" in printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pool.jsonl", "report.json", "report.partial.json",
                                                         "report.partial.png", "report.png"]


def test_interrupt_outside_the_evaluation_is_exit_130(tmp_path, capsys, monkeypatch):
    pool = _pool(tmp_path)
    import ttrl_lightning.data.pool as pool_module

    def interrupted(path):
        raise KeyboardInterrupt
    monkeypatch.setattr(pool_module, "load_pool", interrupted)
    assert main(["bon", "--pool", pool, "--n", "4", "--out", str(tmp_path / "r.json")]) == 130
    assert _one_line_error(capsys) == "ttrl bon: interrupted"
    assert not (tmp_path / "r.json").exists()


def test_interleaved_runs_on_one_out_both_finish(tmp_path, capsys, monkeypatch):
    """A second `ttrl bon` on the same --out runs from start to finish while the first is writing its
    report (a shared `X.tmp` made one of them fail): both exit 0, the report is whole, no temporary file is
    left."""
    pool = _pool(tmp_path)
    out = str(tmp_path / "report.json")
    argv = ["bon", "--pool", pool, "--methods", "majority", "--n", "4", "--bootstrap", "0", "--out", out,
            "--no-progress"]
    import ttrl_lightning.eval.bon.report as report_module

    real, codes, calls = report_module.atomic_write, [], []

    class Interleaved:
        def __init__(self, cm):
            self.cm = cm

        def __enter__(self):
            fh = self.cm.__enter__()
            codes.append(main(argv + ["--seed", "1"]))  # the second run, start to finish
            return fh

        def __exit__(self, *exc):
            return self.cm.__exit__(*exc)

    def atomic_write(path, *args, **kwargs):
        calls.append(path)
        cm = real(path, *args, **kwargs)
        return Interleaved(cm) if len(calls) == 1 else cm

    monkeypatch.setattr(report_module, "atomic_write", atomic_write)
    codes.insert(0, main(argv))
    assert codes == [0, 0]
    assert _strict_json(out)["config"]["seed"] == 0  # the first run renamed last
    assert sorted(os.listdir(tmp_path)) == ["pool.jsonl", "report.json", "report.png"]


@pytest.mark.subprocess
def test_concurrent_processes_on_one_out(tmp_path):
    """Two `ttrl bon` processes started together on the same --out both finish, and the report parses."""
    import subprocess
    import sys

    pool = _pool(tmp_path, questions=64)
    out = str(tmp_path / "report.json")
    cmd = [sys.executable, "-m", "ttrl_lightning.cli", "bon", "--pool", pool, "--n", "2", "4", "8",
           "--subsets", "5", "--bootstrap", "50", "--out", out, "--no-progress"]
    procs = [subprocess.Popen(cmd + ["--seed", str(s)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for s in (0, 1)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in results]
    assert _strict_json(out)["config"]["seed"] in (0, 1)
    assert sorted(os.listdir(tmp_path)) == ["pool.jsonl", "report.json", "report.png"]


def test_help_documents_every_option_the_pool_size_rule_and_exit_codes(capsys):
    from ttrl_lightning.cli.bon import build_parser

    with pytest.raises(SystemExit) as info:
        main(["bon", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    flat = " ".join(text.split())
    for action in build_parser()._actions:
        for option in action.option_strings:
            assert option in text, option
        assert action.help, action.dest
        if action.default not in (None, False) and action.dest != "help":
            shown = " ".join(map(str, action.default)) if isinstance(action.default, list) else action.default
            assert f"(default: {shown})" in flat, action.dest
    assert "N <= pool size" in flat and "A larger N is refused (exit 1)" in flat
    for code, meaning in (("0", "success"), ("1", "user error"), ("130", "interrupted")):
        assert f"{code} {meaning}" in flat, code
