"""``StreamingCheckpointIO`` (ttrl_lightning/cli/checkpoint_io.py): the same file as Lightning's writer, written
without first serialising the whole checkpoint into memory, and atomically."""
import os
import tracemalloc

import pytest
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from ttrl_lightning.cli.checkpoint_io import StreamingCheckpointIO, with_streaming_checkpoints


def _checkpoint(n: int = 8, numel: int = 1 << 20) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"state_dict": {f"w{i}": torch.randn(numel, generator=g) for i in range(n)},
            "optimizer_states": [{"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 1e-6}]}],
            "epoch": 1, "global_step": 7, "hyper_parameters": {"policy": {"lr": 1e-6}}}


def _python_peak(write) -> int:
    """Peak bytes allocated through Python's allocators while ``write()`` runs (a BytesIO buffer counts; tensor
    storages are torch's and do not)."""
    tracemalloc.start()
    try:
        write()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_file_is_lightnings_byte_for_byte(tmp_path):
    ckpt = _checkpoint(n=3, numel=1000)
    TorchCheckpointIO().save_checkpoint(ckpt, tmp_path / "lightning.ckpt")
    StreamingCheckpointIO().save_checkpoint(ckpt, tmp_path / "sub" / "streamed.ckpt")  # makes the folder
    assert (tmp_path / "sub" / "streamed.ckpt").read_bytes() == (tmp_path / "lightning.ckpt").read_bytes()
    loaded = StreamingCheckpointIO().load_checkpoint(tmp_path / "sub" / "streamed.ckpt", weights_only=True)
    assert loaded["global_step"] == 7 and torch.equal(loaded["state_dict"]["w2"], ckpt["state_dict"]["w2"])


def test_the_checkpoint_is_not_held_in_memory_while_written(tmp_path):
    ckpt = _checkpoint()  # 8 tensors of 4 MiB: 32 MiB
    size = sum(t.numel() * t.element_size() for t in ckpt["state_dict"].values())
    lightning = _python_peak(lambda: TorchCheckpointIO().save_checkpoint(ckpt, tmp_path / "a.ckpt"))
    streamed = _python_peak(lambda: StreamingCheckpointIO().save_checkpoint(ckpt, tmp_path / "b.ckpt"))
    assert lightning >= size  # the whole file in a BytesIO: the test can tell
    assert streamed < size / 4  # at most a tensor or two at a time


def test_a_failed_save_leaves_the_previous_checkpoint(tmp_path):
    path = tmp_path / "last.ckpt"
    StreamingCheckpointIO().save_checkpoint(_checkpoint(n=1, numel=10), path)
    before = path.read_bytes()
    with pytest.raises(Exception):
        StreamingCheckpointIO().save_checkpoint({"state_dict": {}, "bad": lambda: None}, path)  # not picklable
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["last.ckpt"]  # no temporary left behind


def test_remote_paths_and_storage_options_keep_lightnings_writer(tmp_path, monkeypatch):
    called = []
    monkeypatch.setattr(TorchCheckpointIO, "save_checkpoint", lambda self, c, p, s=None: called.append((p, s)))
    StreamingCheckpointIO().save_checkpoint({}, "memory://x/last.ckpt")
    StreamingCheckpointIO().save_checkpoint({}, f"file://{tmp_path}/z.ckpt")
    StreamingCheckpointIO().save_checkpoint({}, tmp_path / "y.ckpt", storage_options={"a": 1})
    assert called == [("memory://x/last.ckpt", None), (f"file://{tmp_path}/z.ckpt", None),
                      (tmp_path / "y.ckpt", {"a": 1})]
    assert list(tmp_path.iterdir()) == []


def test_ttrl_fit_uses_it_unless_a_writer_is_given():
    added = with_streaming_checkpoints({"plugins": None, "strategy": "auto"})
    assert [type(p) for p in added["plugins"]] == [StreamingCheckpointIO]
    own = TorchCheckpointIO()
    assert with_streaming_checkpoints({"plugins": [own]})["plugins"] == [own]
    assert with_streaming_checkpoints({"plugins": own})["plugins"] is own  # left as given


def test_a_full_disk_is_one_line_naming_the_checkpoint(tmp_path, monkeypatch, capsys):
    """``ttrl fit`` saving its second checkpoint on a full disk (ENOSPC, raised by the write after some bytes):
    one line naming the file (was a traceback), exit 1, the first checkpoint intact, no temporary left."""
    import errno

    from ttrl_lightning.checkpoints import load_checkpoint
    from ttrl_lightning.cli import main
    from ttrl_lightning.cli.configs import config_path

    saves, real_save = [], torch.save

    def save(obj, f, *args, **kwargs):
        saves.append(f)
        if len(saves) == 1:
            return real_save(obj, f, *args, **kwargs)
        f.write(b"PK" * 100)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.delenv("TTRL_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "run"
    rc = main(["fit", "--config", config_path("rft/tiny_grpo_fast.yaml"), "--trainer.logger=false",
               "--trainer.max_steps=2", f"--trainer.default_root_dir={root}", "--trainer.enable_checkpointing=true",
               "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
               "--trainer.callbacks.dirpath=" + str(root / "checkpoints"), "--trainer.callbacks.save_top_k=-1",
               "--trainer.callbacks.every_n_train_steps=1", "--trainer.enable_progress_bar=false"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err, err[-2000:]
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"ttrl fit: {root / 'checkpoints'}") and "step=2.ckpt: the checkpoint could not be " \
        "written (No space left on device; " in line and "the previous file is kept" in line
    assert os.listdir(root / "checkpoints") == ["epoch=0-step=1.ckpt"]
    assert load_checkpoint(str(root / "checkpoints" / "epoch=0-step=1.ckpt"))["global_step"] == 1


def test_torchs_own_error_for_a_failed_write_is_one_line_too(tmp_path):
    """A write that finds no room inside torch's zip writer comes back as its own RuntimeError, with no errno
    ("unexpected pos ...", "file write failed"): the same one line. A real failed write: a file size limit."""
    import subprocess
    import sys

    script = (
        "import resource, signal, torch\n"
        "from ttrl_lightning.cli.checkpoint_io import StreamingCheckpointIO\n"
        "from ttrl_lightning.safe_files import DiskFullError\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.RLIM_INFINITY))\n"
        "try:\n"
        "    StreamingCheckpointIO().save_checkpoint({'state_dict': {'w': torch.zeros(1 << 16)}}, 'x.ckpt')\n"
        "except DiskFullError as e:\n"
        "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("x.ckpt: the checkpoint could not be written (a write failed: "), out.stderr[-2000:]
    assert "free on its disk); free space or write elsewhere" in out.stdout
    assert os.listdir(tmp_path) == []
