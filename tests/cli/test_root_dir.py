"""``trainer.default_root_dir`` is the folder a run writes, or one line saying why it cannot be:
``file:///abs/run`` wrote everything under a relative folder named ``file:``; ``s3://`` without ``s3fs``, a
local folder whose name holds ``://`` (read as a URL), and a remote file system (the config landed in a local
folder named ``memory:``, the checkpoints elsewhere) are refused before anything is built."""
import os

import pytest

from ttrl_lightning.cli import main
from ttrl_lightning.cli.configs import config_path
from ttrl_lightning.cli.fit import local_root_dir
from ttrl_lightning.errors import UserError

GRPO = ["--config", config_path("rft/tiny_grpo_fast.yaml"), "--trainer.logger=false"]


@pytest.fixture(autouse=True)
def _in_tmp(monkeypatch, tmp_path):
    monkeypatch.delenv("TTRL_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)


def test_a_file_url_is_the_local_folder(tmp_path, capsys):
    root = tmp_path / "abs" / "run"
    assert main(["fit", *GRPO, "--trainer.max_steps=1", "--trainer.default_root_dir", f"file://{root}"]) == 0
    out = capsys.readouterr().out
    assert f"config:     {root}{os.sep}config.yaml" in out
    assert (root / "config.yaml").is_file()
    assert not (tmp_path / "file:").exists() and os.listdir(tmp_path) == ["abs"]  # everything under the folder


@pytest.mark.parametrize("url, path", [
    ("file:///abs/run", "/abs/run"), ("file://localhost/abs/run", "/abs/run"), ("file:///a%20b/run", "/a b/run"),
    ("local:///abs/run", "/abs/run"), ("runs/plain", "runs/plain"), ("/abs/plain:colon", "/abs/plain:colon"),
])
def test_local_root_dir_reads_a_file_url(url, path):
    assert local_root_dir(url) == path


@pytest.mark.parametrize("root, message", [
    ("s3://bucket/run", r"the s3:// file system needs a package that is not installed \(Install s3fs"),
    ("gcs://bucket/run", r"the gcs:// file system needs a package that is not installed"),
    ("my://run", r"'my' is no file-system protocol fsspec knows, and a folder whose name holds '://' is read as "
                 r"a URL"),
    ("./runs/a://b", r"'./runs/a' is no file-system protocol"),
    ("memory://run", r"a run folder is written on this machine .* copy it to memory:// afterwards"),
    ("file://otherhost/run", r"a file:// URL names a folder of this machine"),
    ("file://", r"a file:// URL names a folder of this machine"),
])
def test_a_root_that_is_not_a_local_folder_is_one_line(root, message, capsys, tmp_path):
    if root.startswith(("s3:", "gcs:")):
        import fsspec

        try:
            fsspec.get_filesystem_class(root.split(":")[0])
            pytest.skip("its file system package is installed here")
        except ImportError:
            pass
    assert main(["fit", *GRPO, "--trainer.max_steps=1", "--trainer.default_root_dir", root]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ttrl fit: trainer.default_root_dir {root!r}: "), err
    import re

    assert re.search(message, err[0]), err[0]
    assert os.listdir(tmp_path) == []  # nothing written, under no folder named like the URL
    with pytest.raises(UserError):
        local_root_dir(root)
