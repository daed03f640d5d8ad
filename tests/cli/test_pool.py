"""`ttrl pool simulate|validate|convert` (ttrl_lightning/cli/pool.py)."""
import re

from ttrl_lightning.answers import answers_equal
from ttrl_lightning.cli import main
from ttrl_lightning.data.pool import read_records


def test_simulate_validate_convert_round_trip(tmp_path, capsys):
    src = str(tmp_path / "pool.jsonl")
    assert main(["pool", "simulate", "--out", src, "--questions", "12", "--rollouts", "6", "--tokens", "4",
                 "--seed", "1"]) == 0
    assert "12 questions x 6 rollouts x 2 views" in capsys.readouterr().out
    records = list(read_records(src))
    assert len(records) == 12 and all(len(r["rollouts"]) == 12 for r in records)

    assert main(["pool", "validate", src]) == 0
    line = capsys.readouterr().out
    assert "OK - 12 questions, 6 original / 6 reframed rollouts each" in line
    original = [(r["gold"], ro["answer"]) for r in records for ro in r["rollouts"]
                if ro["view"] == "original"]
    share = 100 * sum(answers_equal(a, g) for g, a in original) / len(original)
    assert re.search(r"share of correct original-view rollouts: ([0-9.]+)%", line).group(1) == f"{share:.1f}"

    pq, back = str(tmp_path / "pool.parquet"), str(tmp_path / "back.jsonl")
    assert main(["pool", "convert", src, pq]) == 0
    assert main(["pool", "convert", pq, back]) == 0
    assert list(read_records(back)) == records
