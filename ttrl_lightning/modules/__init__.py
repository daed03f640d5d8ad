"""LightningModules of the three training phases: SFT and GRPO (CC-RFT and TTRL subclass GRPO), all built
from one ``PolicySpec``."""
from ttrl_lightning.modules.base import PolicyModule, PolicySpec
from ttrl_lightning.modules.grpo import GRPOModule, RolloutRewards
from ttrl_lightning.modules.sft import SFTModule

__all__ = ["PolicyModule", "PolicySpec", "GRPOModule", "RolloutRewards", "SFTModule"]
