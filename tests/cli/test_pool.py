"""`ttrl pool simulate|validate|convert` (ttrl_lightning/cli/pool.py)."""
import argparse
import json
import os
import re

import pytest

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


# --- nothing lost, strict options ---------------------------------------------------------------------------

def _one_line_error(capsys) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _simulated(tmp_path, name="pool.jsonl", questions=6) -> str:
    path = str(tmp_path / name)
    assert main(["pool", "simulate", "--out", path, "--questions", str(questions), "--rollouts", "3",
                 "--tokens", "3"]) == 0
    return path


@pytest.mark.parametrize("spelling", ["same", "dot", "symlink", "hardlink", "absolute"])
def test_convert_onto_itself_is_refused_before_writing(tmp_path, capsys, monkeypatch, spelling):
    """`ttrl pool convert x.jsonl x.jsonl` emptied x.jsonl: refused (exit 1, one line naming both paths)
    for every spelling of the same file, and the file keeps every byte."""
    monkeypatch.chdir(tmp_path)
    _simulated(tmp_path, "x.jsonl")
    before = (tmp_path / "x.jsonl").read_bytes()
    if spelling == "symlink":
        os.symlink("x.jsonl", "link.jsonl")
        dst = "link.jsonl"
    elif spelling == "hardlink":
        os.link("x.jsonl", "hard.jsonl")
        dst = "hard.jsonl"
    else:
        dst = {"same": "x.jsonl", "dot": "./x.jsonl", "absolute": str(tmp_path / "x.jsonl")}[spelling]
    capsys.readouterr()
    assert main(["pool", "convert", "x.jsonl", dst]) == 1
    line = _one_line_error(capsys)
    assert line.startswith("ttrl pool: ") and "'x.jsonl'" in line and repr(dst) in line
    assert "same file" in line
    assert (tmp_path / "x.jsonl").read_bytes() == before


@pytest.mark.parametrize("dst_name", ["out.jsonl", "out.parquet"])
def test_convert_that_fails_partway_keeps_the_old_output(tmp_path, capsys, dst_name):
    """The 4th record of the source is bad: the command names it, and an existing output keeps every byte
    (before, the records read so far replaced it), with no temporary file left behind."""
    good = _simulated(tmp_path, "good.jsonl")
    dst = tmp_path / dst_name
    assert main(["pool", "convert", good, str(dst)]) == 0
    before = dst.read_bytes()
    lines = open(good).read().splitlines()
    record = json.loads(lines[3])
    record["rollouts"][0]["entropy"][0] = "0.5"
    lines[3] = json.dumps(record)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["pool", "convert", str(bad), str(dst)]) == 1
    line = _one_line_error(capsys)
    assert f"{bad}, line 4" in line and "entropy" in line
    assert dst.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["good.jsonl", "bad.jsonl", dst_name])


@pytest.mark.parametrize("options, flag, says", [
    (["--reframed", "flase"], "--reframed", "true/false, yes/no or 1/0, got 'flase'"),
    (["--reframed", "2"], "--reframed", "got '2'"),
    (["--questions", "0"], "--questions", "integer >= 1, got '0'"),
    (["--questions", "2.5"], "--questions", "got '2.5'"),
    (["--rollouts", "true"], "--rollouts", "got 'true'"),
    (["--num-distractors", "0"], "--num-distractors", "got '0'"),
    (["--tokens", "1"], "--tokens", "must lie in [2, 32767]"),
    (["--tokens", "40000"], "--tokens", "must lie in [2, 32767]"),
    (["--correct-rate", "nan"], "--correct-rate", "finite number, got 'nan'"),
    (["--correct-rate", "1.5"], "--correct-rate", "must lie in [0, 1]"),
    (["--no-answer-rate", "-0.1"], "--no-answer-rate", "must lie in [0, 1]"),
    (["--token-noise", "-1"], "--token-noise", "must be >= 0"),
    (["--signal-strength", "inf"], "--signal-strength", "got 'inf'"),
    (["--concentration", "0"], "--concentration", "> 0"),
    (["--seed", "-1"], "--seed", "got '-1'"),
    (["--out", "pool.txt"], "--out", "ends in .jsonl or .parquet, got"),
    (["--question", "3"], "--question", "unrecognized arguments"),
])
def test_simulate_options_are_strict(tmp_path, capsys, monkeypatch, options, flag, says):
    monkeypatch.chdir(tmp_path)
    assert main(["pool", "simulate", "--out", "pool.jsonl", *options]) == 1
    line = _one_line_error(capsys)
    assert line.startswith("ttrl pool: ") and flag in line and says in line, line
    assert not os.listdir(tmp_path)


def test_simulate_booleans(tmp_path, capsys):
    for word, views in (("false", 3), ("NO", 3), ("0", 3), ("yes", 6), ("True", 6)):
        path = str(tmp_path / f"{word}.jsonl")
        assert main(["pool", "simulate", "--out", path, "--questions", "2", "--rollouts", "3",
                     "--reframed", word]) == 0
        assert {len(r["rollouts"]) for r in read_records(path)} == {views}, word


def test_convert_and_validate_errors_are_one_line(tmp_path, capsys):
    good = _simulated(tmp_path)
    assert main(["pool", "convert", good, str(tmp_path / "out.csv")]) == 1
    assert "DST" in (line := _one_line_error(capsys)) and "out.csv" in line
    assert main(["pool", "validate", str(tmp_path / "missing.jsonl")]) == 1
    assert "missing.jsonl" in _one_line_error(capsys)
    assert main(["pool", "frobnicate"]) == 1
    assert "invalid choice: 'frobnicate'" in _one_line_error(capsys)


@pytest.mark.parametrize("argv", [["pool"], ["pool", "simulate"], ["pool", "validate"], ["pool", "convert"]])
def test_help_documents_every_option_and_exit_codes(capsys, argv):
    from ttrl_lightning.cli.pool import build_parser

    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    flat = " ".join(text.split())
    parser, subs = build_parser()
    for action in (subs[argv[1]] if len(argv) > 1 else parser)._actions:
        assert action.help, action.dest
        for option in action.option_strings:
            assert option in text, option
        if len(argv) > 1 and action.option_strings and action.default not in (None, argparse.SUPPRESS):
            if action.dest != "help":
                assert f"(default: {action.default})" in flat, action.dest
    for code, meaning in (("0", "success"), ("1", "user error"), ("130", "interrupted")):
        assert f"{code} {meaning}" in flat, code
    if len(argv) == 1:
        assert all(name in text for name in ("simulate", "validate", "convert"))


# --- settings inside the pool file -----------------------------------------------------------------------------

def test_settings_travel_inside_the_file_through_convert_and_validate(tmp_path, capsys):
    """``POOL.settings.json`` was a side file that ``pool convert`` dropped (so an hf and a vllm rank pool
    merged unchecked after a conversion) and that a conversion onto a generated pool left stale. Now the
    settings are a JSONL header line or Parquet metadata, and convert carries exactly the source's."""
    from ttrl_lightning.data.pool import read_settings, write_records

    src = str(tmp_path / "pool.jsonl")
    assert main(["pool", "simulate", "--out", src, "--questions", "3", "--rollouts", "2", "--tokens", "2"]) == 0
    settings = read_settings(src)
    assert settings["simulated"]["num_questions"] == 3 and settings["simulated"]["rollouts"] == 2
    with open(src) as f:
        assert json.loads(f.readline()) == {"pool_settings": settings}
    capsys.readouterr()
    pq, back = str(tmp_path / "pool.parquet"), str(tmp_path / "back.jsonl")
    assert main(["pool", "convert", src, pq]) == 0 and "with its settings" in capsys.readouterr().out
    assert main(["pool", "convert", pq, back]) == 0
    assert read_settings(pq) == read_settings(back) == settings
    assert list(read_records(back)) == list(read_records(src))
    assert main(["pool", "validate", back]) == 0
    assert "settings: a simulated pool (" in capsys.readouterr().out
    bare = str(tmp_path / "bare.jsonl")
    write_records(read_records(src), bare)  # another tool's pool, converted onto one with settings
    assert main(["pool", "convert", bare, pq]) == 0
    assert read_settings(pq) is None and "no settings" in capsys.readouterr().out
    assert main(["pool", "validate", pq]) == 0
    assert "settings: none" in capsys.readouterr().out


def test_a_settings_header_is_one_object_on_the_first_line_only(tmp_path, capsys):
    from ttrl_lightning.data.pool import read_settings

    src = str(tmp_path / "pool.jsonl")
    assert main(["pool", "simulate", "--out", src, "--questions", "2", "--rollouts", "2", "--tokens", "2"]) == 0
    header, *rows = open(src).read().splitlines()
    cases = {"later": [rows[0], header, *rows[1:]],
             "extra key": [json.dumps({"pool_settings": {}, "id": "x"}), *rows],
             "not an object": [json.dumps({"pool_settings": [1]}), *rows]}
    for name, lines in cases.items():
        path = str(tmp_path / f"{name.replace(' ', '_')}.jsonl")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        capsys.readouterr()
        assert main(["pool", "validate", path]) == 1, name
        err = _one_line_error(capsys)
        assert "line" in err and "pool_settings" in err, (name, err)
    with pytest.raises(Exception, match="pool_settings"):
        read_settings(str(tmp_path / "not_an_object.jsonl"))


def test_validate_refuses_records_that_contradict_their_settings(tmp_path, capsys):
    from ttrl_lightning.data.pool import read_settings, write_records

    src = str(tmp_path / "pool.jsonl")
    assert main(["pool", "simulate", "--out", src, "--questions", "2", "--rollouts", "2", "--tokens", "2",
                 "--reframed", "false"]) == 0
    records = list(read_records(src))
    write_records(records, src, {"model": "m", "engine": "hf", "n": 3, "views": ["original"]})
    capsys.readouterr()
    assert main(["pool", "validate", src]) == 1
    assert "its settings say n=3 in views ['original'], but its questions have 2 original-view rollouts" in \
        _one_line_error(capsys)
    write_records(records, src, {"model": "m", "engine": "hf", "n": 2, "views": ["original"]})
    assert main(["pool", "validate", src]) == 0
    assert "settings: model=m, engine=hf, n=2, views=['original']" in capsys.readouterr().out
    assert read_settings(src)["n"] == 2
