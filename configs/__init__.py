"""The training configs as package data: setup.py installs this folder as ``ttrl_lightning.configs``.

Nothing to import here; find a config with ``ttrl_lightning.cli.configs.config_path("sft/tiny_arith.yaml")``.
(This file makes the folder a regular package, which both the wheel and the editable install can map.)
"""
