"""benchmarks/labelers/labelling_stage.py at toy size: the columnar stage and the former loops give the same rewards,
masks and vote groups for every labeler (the benchmark refuses to time them otherwise), and the JSON holds
one paired ratio per round. No timing is asserted."""
import json

from benchmarks.labelers.labelling_stage import main


def test_the_stage_agrees_with_the_former_loops_and_reports_paired_rounds(tmp_path, capsys):
    out = tmp_path / "stage.json"
    assert main(["--questions", "3", "--votes", "6", "--trained", "3", "--rounds", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"majority", "self_harmony", "pixel", "visconf"}
    for r in report["results"].values():
        assert len(r["stage_speedup"]) == len(r["forms_speedup"]) == 2
    assert "disagree" not in capsys.readouterr().out
