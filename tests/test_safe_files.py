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
