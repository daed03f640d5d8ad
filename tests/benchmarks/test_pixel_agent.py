"""The pixel agent benchmark end to end at smoke size (SFT, CC-RFT and evaluations on CPU, ~20 s)."""
import json

import pytest

pytest.importorskip("cv2")


def test_pixel_agent_quick_run_writes_the_table(tmp_path, capsys):
    from benchmarks.training.pixel_agent import main

    out = tmp_path / "agent.json"
    assert main(["--quick", "--out", str(out), "--sft-dir", str(tmp_path / "sft")]) == 0
    assert len(list((tmp_path / "sft").glob("sft_seed0_*.pt"))) == 1  # kept for a rerun
    printed = capsys.readouterr().out
    assert "acceptance: tool error rate after SFT" in printed and "CC-RFT - SFT accuracy" in printed
    report = json.loads(out.read_text())
    assert set(report["table"]) == {"sft", "ccrft"}
    for stage in ("sft", "ccrft"):
        result = report["results"]["0"][stage]
        acc, per_kind = result["accuracy"], result["per_kind"]
        # 14 held-out tasks, 2 of each of the 7 kinds: the accuracy counts whole tasks and is the mean of the
        # per-kind accuracies (each a multiple of 1/2)
        assert abs(acc * 14 - round(acc * 14)) < 1e-9
        assert all(v in (0.0, 0.5, 1.0) for v in per_kind.values())
        assert acc == pytest.approx(sum(per_kind.values()) / len(per_kind))
    assert set(report["results"]["0"]["sft"]["per_kind"]) == {"colour", "count", "direction", "read", "read_small",
                                                              "shape", "when"}
    assert {"ccrft_accuracy_gain_exceeds_paired_spread", "ccrft_accuracy_gain_exceeds_stage_spread"} <= \
        set(report["verdict"])
