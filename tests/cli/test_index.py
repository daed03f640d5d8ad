"""`ttrl index audit|info` (ttrl_lightning/cli/index.py)."""
import numpy as np
import pytest

pytest.importorskip("faiss")

from ttrl_lightning.cli import main  # noqa: E402
from ttrl_lightning.cli.index import EXIT_AUDIT_FAILED  # noqa: E402
from ttrl_lightning.retrieval import ExemplarIndex  # noqa: E402


@pytest.fixture
def index_file(tmp_path):
    rng = np.random.default_rng(0)
    index = ExemplarIndex(8, "Flat", whitelist=["eval-1"])
    index.add([f"x{i}" for i in range(200)] + ["eval-1"], rng.standard_normal((201, 8)))
    index.block(["x7"])
    path = tmp_path / "exemplars.idx"
    index.save(path)
    return path


def test_audit_passes_on_a_clean_index(index_file, capsys):
    assert main(["index", "audit", str(index_file), "--probes", "300", "--k", "8"]) == 0
    out = capsys.readouterr().out
    assert "OK - 300 probes x top-8 over 199 items" in out
    assert main(["index", "info", str(index_file)]) == 0
    assert "199 searchable of 200 stored keys, dim 8" in capsys.readouterr().out


def test_audit_fails_and_lists_offenders(index_file, tmp_path, capsys):
    """Evaluation ids the index does not know about (here x3 and x11 are stored and searchable) are offenders:
    exit 3, one line per id."""
    ids = tmp_path / "eval_ids.txt"
    ids.write_text("# evaluation split\nx3\nx11\nnot-stored\n")
    assert main(["index", "audit", str(index_file), "--probes", "400", "--evaluation-ids", str(ids)]) \
        == EXIT_AUDIT_FAILED
    out = capsys.readouterr().out
    assert "FAILED - 2 offending id(s)" in out
    assert "\n  x3\tevaluation\t" in out and "\n  x11\tevaluation\t" in out


def _error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


def test_corrupt_index_file_is_one_line_naming_it(index_file, capsys):
    index_file.write_bytes(index_file.read_bytes()[:100])
    assert main(["index", "audit", str(index_file)]) == 1
    line = _error_line(capsys)
    assert line.startswith("ttrl index: ") and str(index_file) in line and "corrupt" in line


def test_bad_options_name_the_flag(index_file, tmp_path, capsys):
    assert main(["index", "audit", str(index_file), "--k", "0"]) == 1
    assert "--k" in _error_line(capsys)
    bad = tmp_path / "ids.json"
    bad.write_text('["x1", 3]')
    assert main(["index", "audit", str(index_file), "--evaluation-ids", str(bad)]) == 1
    assert "ids.json: entry 1 is not a non-empty string id" in _error_line(capsys)


def test_audit_memory_does_not_grow_with_the_probes():
    """``--probes 100000000`` took 19 GB: all queries were drawn up front. Drawn batch by batch, the audit's
    peak allocation (tracemalloc sees numpy's) is the same for 8k and 64k probes; probes still come half
    from near stored keys."""
    import tracemalloc

    from ttrl_lightning.retrieval.audit import audit_index

    rng = np.random.default_rng(0)
    index = ExemplarIndex(64, "Flat")
    index.add([f"x{i}" for i in range(100)], rng.standard_normal((100, 64)))
    peaks = []
    for probes in (8_192, 65_536):
        tracemalloc.start()
        report = audit_index(index, probes=probes, k=1, batch=1024)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert report.passed and report.probes == probes
    assert peaks[1] < 1.5 * peaks[0] and peaks[1] < 8 * 2**20, peaks  # 64k x 64 float32 alone is 16 MiB


def test_a_list_id_in_the_file_and_a_non_utf8_ids_file_are_one_line(index_file, tmp_path, capsys):
    """Two tracebacks a probe found: an index whose ids.json holds a list (checksum resealed, as a deliberate
    edit would), and an --evaluation-ids file that is not UTF-8."""
    import hashlib
    import json
    import zipfile

    from ttrl_lightning.retrieval.index import _meta_sha256

    with zipfile.ZipFile(index_file) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    ids = json.loads(members["ids.json"])
    ids[0] = ["x0"]
    members["ids.json"] = json.dumps(ids).encode()
    meta = json.loads(members["meta.json"])
    meta["sha256"]["ids.json"] = hashlib.sha256(members["ids.json"]).hexdigest()
    meta["meta_sha256"] = _meta_sha256(meta)
    members["meta.json"] = json.dumps(meta).encode()
    edited = tmp_path / "edited.idx"
    with zipfile.ZipFile(edited, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    for command in ("audit", "info"):
        assert main(["index", command, str(edited)]) == 1
        assert "ids.json must be a list of non-empty string ids" in _error_line(capsys)
    latin = tmp_path / "ids.txt"
    latin.write_bytes("x3\ncaf\xe9\n".encode("latin-1"))
    assert main(["index", "audit", str(index_file), "--evaluation-ids", str(latin)]) == 1
    assert f"{latin}: not UTF-8 text" in _error_line(capsys)


def test_evaluation_ids_with_a_bom_still_match_and_a_nul_byte_is_one_line(index_file, tmp_path, capsys):
    """An editor's UTF-8 BOM no longer glues itself to the first id (x3 was missed); a NUL byte, raw or escaped
    in a JSON list, is refused with one line naming its line instead of an id that matches nothing."""
    ids = tmp_path / "bom.txt"
    ids.write_bytes("\ufeffx3\nx11\n".encode("utf-8"))
    assert main(["index", "audit", str(index_file), "--probes", "400", "--evaluation-ids", str(ids)]) \
        == EXIT_AUDIT_FAILED
    out = capsys.readouterr().out
    assert "FAILED - 2 offending id(s)" in out and "\n  x3\tevaluation\t" in out
    for name, data in (("nul.txt", b"x1\nx3\x00\n"), ("nul.json", b'["x1", "x3\\u0000"]')):
        path = tmp_path / name
        path.write_bytes(data)
        assert main(["index", "audit", str(index_file), "--evaluation-ids", str(path)]) == 1
        line = _error_line(capsys)
        assert f"{name}: a NUL byte on line " in line
