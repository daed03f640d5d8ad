"""``python -m ttrl_lightning.cli <command> ...``: the ``ttrl`` command without the console script.

This is the module that ``torchrun ... -m ttrl_lightning.cli fit ...`` and ``srun python -m ...`` launch;
Lightning's DDP launcher re-runs it (as ``-m ttrl_lightning.cli.__main__``) for the other local ranks.
"""
import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
