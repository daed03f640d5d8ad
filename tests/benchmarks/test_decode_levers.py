"""benchmarks/training/decode_levers.py runs end to end on a tiny model folder: every variant decodes the same
number of tokens, and the decode time is the whole call's minus the one-token call's, per repeat."""
import json

import pytest

from benchmarks.training.decode_levers import main


def test_the_levers_are_timed_side_by_side(tiny_model_folder, tmp_path, capsys):
    out = tmp_path / "levers.json"
    assert main(["--model", tiny_model_folder, "--questions", "2", "--votes", "3", "--new-tokens", "4", "--repeats", "2",
                 "--variants", "dynamic", "static", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["rows"] == 6
    printed = capsys.readouterr().out
    for name in ("dynamic", "static"):
        r = report["results"][name]
        assert r["decode_s"] == pytest.approx([a - b for a, b in zip(r["whole_s"]["times_s"],
                                                                     r["one_token_s"]["times_s"])])
        assert len(r["decode_s"]) == 2 and name in printed
    assert report["results"]["dynamic"]["decode_ratio_to_dynamic"] == 1.0
    assert set(report["cpu"]) >= {"avx2", "avx512_bf16", "amx_bf16"}
