"""benchmarks/engines/vlm_prompt_sharing.py at toy size: both engines sample the image question, the vision tower is
counted (one image per question prompt-shared), and the JSON holds one paired growth ratio per round and both
verdict lines. No timing is asserted."""
import json

from benchmarks.engines.vlm_prompt_sharing import main


def test_the_benchmark_counts_image_encodings_and_reports_paired_rounds(tmp_path, capsys):
    out = tmp_path / "vps.json"
    assert main(["--hidden", "32", "--layers", "1", "--vocab", "512", "--pixels", str(112 * 112), "--n", "4",
                 "--rounds", "2", "--workdir", str(tmp_path / "w"), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["vision_forwards"]["shared_n4"] == {"calls": 1, "images": 1}
    assert report["vision_forwards"]["generate_n4"]["images"] >= 1
    assert all(len(report["growth"][name]) == 2 for name in ("generate", "shared"))
    assert report["verdicts"]["one_image_encoding_per_question"] == "PASS"
    assert "O(prompt)" in capsys.readouterr().out
