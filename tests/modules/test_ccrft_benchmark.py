"""The pixel agent benchmark end to end at smoke size (slow: SFT, CC-RFT and evaluations on CPU)."""
import json

import pytest

pytest.importorskip("cv2")


@pytest.mark.slow
def test_pixel_agent_quick_run_writes_the_table(tmp_path, capsys):
    from benchmarks.pixel_agent import main

    out = tmp_path / "agent.json"
    assert main(["--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "acceptance: tool error rate after SFT" in printed and "CC-RFT - SFT accuracy" in printed
    report = json.loads(out.read_text())
    assert set(report["table"]) == {"sft", "ccrft"}
    for stage in ("sft", "ccrft"):
        acc = report["results"]["0"][stage]["accuracy"]
        assert 0.0 <= acc <= 1.0
