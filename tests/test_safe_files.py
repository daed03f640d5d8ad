"""safe_files: atomic writes keep the replaced file's permission bits, or give a new file the umask's."""
import os
import stat

import pytest

from ttrl_lightning.safe_files import atomic_write, atomic_write_path


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("writer", ["handle", "path"])
def test_atomic_writes_keep_the_target_mode_or_the_umask_default(tmp_path, writer):
    def write(path, text):
        if writer == "handle":
            with atomic_write(path) as fh:
                fh.write(text)
        else:
            with atomic_write_path(path) as tmp:
                with open(tmp, "w") as fh:
                    fh.write(text)

    old = os.umask(0o027)
    try:
        new = str(tmp_path / "new.json")
        write(new, "a")
        assert _mode(new) == 0o640  # 0666 under umask 027, not mkstemp's 0600
        kept = str(tmp_path / "kept.json")
        with open(kept, "w") as fh:
            fh.write("old")
        os.chmod(kept, 0o644)
        write(kept, "b")
        assert _mode(kept) == 0o644 and open(kept).read() == "b"
        os.chmod(kept, 0o600)
        write(kept, "c")
        assert _mode(kept) == 0o600
    finally:
        os.umask(old)


def test_a_killed_write_leaves_nothing_that_the_next_write_does_not_remove(tmp_path):
    """A write killed with SIGKILL (a merge, a report) left its hidden temporary file beside the target for
    good. The next write of that target removes the temporaries of dead processes of this host, and leaves a
    running writer's and another host's alone."""
    import signal
    import subprocess
    import sys

    from ttrl_lightning.safe_files import _OWNER, atomic_write

    target = tmp_path / "pool.jsonl"
    script = ("import sys, time\nfrom ttrl_lightning.safe_files import atomic_write\n"
              f"with atomic_write({str(target)!r}) as fh:\n    fh.write('x'); fh.flush(); print('writing', flush=True)\n"
              "    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    running = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert running.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    other_host = tmp_path / f".pool.elsewhere-{proc.pid}.abc.tmp.jsonl"
    other_host.write_text("theirs")
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".pool."))
    assert len(leftovers) == 3  # the killed one's, the running one's, the other host's
    with atomic_write(target) as fh:
        fh.write("new")
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".pool."))
    assert other_host.name in left and len(left) == 2
    assert any(f"-{running.pid}." in name for name in left)  # a running writer's file is kept
    assert target.read_text() == "new" and _OWNER.endswith(f"-{os.getpid()}")
    running.kill()
    running.wait()
