"""LightningModules of the three training phases: SFT, GRPO (CC-RFT subclasses it) and TTRL (a GRPO subclass
rewarded by pseudo-labels), all built from one ``PolicySpec``."""
from ttrl_lightning.modules.base import PolicyModule, PolicySpec
from ttrl_lightning.modules.ccrft import CCRFTModule
from ttrl_lightning.modules.grpo import GRPOModule
from ttrl_lightning.modules.step_records import RolloutRewards
from ttrl_lightning.modules.sft import SFTModule
from ttrl_lightning.modules.ttrl.module import TTRLModule

__all__ = ["PolicyModule", "PolicySpec", "GRPOModule", "RolloutRewards", "SFTModule", "TTRLModule",
           "CCRFTModule"]
