"""The best-of-N report (ttrl_lightning/eval/bon/report.py): strict JSON, atomic writes of the JSON and the plot,
nothing undefined when no question was evaluated."""
import json
import math
import os

import pytest
import torch

from ttrl_lightning.eval.bon import report as report_module
from ttrl_lightning.eval.bon.protocol import BoNResult
from ttrl_lightning.eval.bon.config import BoNConfig
from ttrl_lightning.eval.bon.report import build_report, format_table, plot_accuracy, write_report


def _result(num_questions: int, complete: bool = True) -> BoNResult:
    gen = torch.Generator().manual_seed(0)
    per_q = {m: {n: torch.rand(num_questions, generator=gen, dtype=torch.float64) for n in (4, 8)}
             for m in ("majority", "visconf_rwc")}
    return BoNResult(per_question=per_q, config=BoNConfig(ns=(4, 8)), complete=complete,
                     num_questions=num_questions, without_gold=["q9"])


def _strict_load(path):
    def refuse(constant):
        raise AssertionError(f"non-finite literal {constant}")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh, parse_constant=refuse)


def test_report_counts_and_strict_json(tmp_path):
    rep = build_report(_result(5), "visconf_rwc", replicates=20)
    assert rep["num_questions"] == 5 and rep["questions_without_gold"] == 1
    path = tmp_path / "r.json"
    write_report(rep, str(path))
    assert _strict_load(path)["accuracy"] == rep["accuracy"]
    assert os.listdir(tmp_path) == ["r.json"]  # no temporary file left behind


def test_no_question_evaluated_gives_nulls_not_nan(tmp_path):
    """Interrupted before the first chunk: the means of nothing would be NaN; the report says null and the
    table leaves the cells (and the average) blank."""
    rep = build_report(_result(0, complete=False), "visconf_rwc", replicates=20)
    assert rep["accuracy"] == {"majority": {"4": None, "8": None}, "visconf_rwc": {"4": None, "8": None}}
    assert "bootstrap" not in rep
    path = tmp_path / "r.json"
    write_report(rep, str(path))
    assert _strict_load(path)["num_questions"] == 0
    table = format_table(rep)
    assert "nan" not in table.lower() and "0.00" not in table
    assert "INTERRUPTED: only the first 0 questions" in table
    plot_accuracy(rep, str(tmp_path / "r.png"))
    assert (tmp_path / "r.png").stat().st_size > 1000


def test_non_finite_values_refused_before_the_old_report_is_touched(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"old": true}\n')
    bad = {"accuracy": {"majority": {"8": math.nan}}}
    with pytest.raises(ValueError, match="JSON compliant"):
        write_report(bad, str(path))
    assert path.read_text() == '{"old": true}\n' and os.listdir(tmp_path) == ["r.json"]


def test_failed_writes_keep_the_previous_files(tmp_path, monkeypatch):
    """A failure while the JSON or the plot is being written leaves the previous file byte-identical and
    no temporary file behind."""
    old_json, old_png = b'{"old": 1}\n', b"\x89PNG old plot"
    (tmp_path / "r.json").write_bytes(old_json)
    (tmp_path / "r.png").write_bytes(old_png)
    rep = build_report(_result(3), None)

    class Unserialisable:
        pass

    with pytest.raises(TypeError):
        write_report({**rep, "meta": {"x": Unserialisable()}}, str(tmp_path / "r.json"))

    import matplotlib.figure

    def failing_savefig(self, fname, **kwargs):
        with open(fname, "wb") as fh:
            fh.write(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", failing_savefig)
    with pytest.raises(OSError, match="disk full"):
        plot_accuracy(rep, str(tmp_path / "r.png"))
    assert (tmp_path / "r.json").read_bytes() == old_json
    assert (tmp_path / "r.png").read_bytes() == old_png
    assert sorted(os.listdir(tmp_path)) == ["r.json", "r.png"]


def test_interleaved_writers_of_one_report_both_succeed(tmp_path, monkeypatch):
    """A second writer that runs entirely while the first is writing (the shared `X.tmp` of old made the first
    one's rename fail): both finish and the file holds one complete report."""
    path = str(tmp_path / "r.json")
    real = report_module.atomic_write
    inner = build_report(_result(4), None, meta={"writer": "second"})
    calls = []

    def interleaving(target, *args, **kwargs):
        calls.append(target)
        cm = real(target, *args, **kwargs)
        if len(calls) == 1:
            class Outer:
                def __enter__(self):
                    fh = cm.__enter__()
                    write_report(inner, path)  # the second writer, start to finish
                    return fh

                def __exit__(self, *exc):
                    return cm.__exit__(*exc)
            return Outer()
        return cm

    monkeypatch.setattr(report_module, "atomic_write", interleaving)
    write_report(build_report(_result(4), None, meta={"writer": "first"}), path)
    assert len(calls) == 2
    assert _strict_load(path)["meta"] == {"writer": "first"}  # the last rename wins, whole
    assert os.listdir(tmp_path) == ["r.json"]
