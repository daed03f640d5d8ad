"""LightningModules of the three training phases: SFT and GRPO (CC-RFT and TTRL subclass GRPO)."""
from ttrl_lightning.modules.base import PolicyModule
from ttrl_lightning.modules.grpo import GRPOModule
from ttrl_lightning.modules.sft import SFTModule

__all__ = ["PolicyModule", "GRPOModule", "SFTModule"]
