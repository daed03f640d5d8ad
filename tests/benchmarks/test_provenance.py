"""benchmarks/common.py: the commit a benchmark records, ``+dirty`` only for changes that are not its own output."""
import shutil
import subprocess

import pytest

from benchmarks.common import git_commit

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_a_benchmarks_own_record_does_not_make_the_checkout_dirty(tmp_path):
    repo = tmp_path / "repo"
    (repo / "results" / "study").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1\n")
    (repo / "results" / "study" / "record.json").write_text("{}\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "start")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert git_commit(where=str(repo)) == head
    (repo / "results" / "study" / "record.json").write_text('{"runs": 1}\n')  # the benchmark writes its record
    assert git_commit(where=str(repo)) == head + "+dirty"
    assert git_commit(str(repo / "results" / "study"), where=str(repo)) == head
    assert git_commit(str(repo / "results"), where=str(repo)) == head
    (repo / "new.py").write_text("untracked\n")  # untracked files never count
    assert git_commit(str(repo / "results" / "study"), where=str(repo)) == head
    (repo / "code.py").write_text("x = 2\n")  # a change to the code still does
    assert git_commit(str(repo / "results" / "study"), where=str(repo)) == head + "+dirty"
    assert git_commit(str(tmp_path / "elsewhere"), where=str(repo)) == head + "+dirty"  # outside: ignores nothing


def test_outside_a_checkout_there_is_no_commit(tmp_path):
    assert git_commit(where=str(tmp_path)) is None
