"""benchmarks/training/weights_digest.py: the digest is a function of the trained weights (two identical runs agree, a
run with another seed does not), and --compare says so and exits 1 on a difference."""
import json

from benchmarks.training.weights_digest import main


def test_identical_runs_agree_and_another_seed_differs(tmp_path, capsys):
    first, second, other = (str(tmp_path / f"{n}.json") for n in ("first", "second", "other"))
    common = ["--model", "tiny:qwen2", "--labelers", "majority", "random_reward", "--steps", "1"]
    assert main([*common, "--out", first]) == 0
    assert main([*common, "--out", second, "--compare", first]) == 0
    assert main([*common, "--seed", "1", "--out", other, "--compare", first]) == 1
    digests = json.loads(open(first).read())["digests"]
    assert len(set(digests.values())) == 2  # majority and random_reward train differently
    assert "DIFFERENT" in capsys.readouterr().out
