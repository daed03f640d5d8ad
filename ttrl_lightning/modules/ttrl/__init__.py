"""Test-time RL: ``TTRLModule`` (``module``), what it supplies around each pseudo-labeler (``labelers``), the
labelling stage as free functions (``labelling``), its logged metrics (``monitor``) and Pixelis' retrieved
neighbourhoods for the per-query baseline (``retrieval``)."""
from ttrl_lightning.modules.ttrl.labelers import TTRL_LABELERS, LabelerSpec, LabellingContext, labeler_spec
from ttrl_lightning.modules.ttrl.labelling import label_votes
from ttrl_lightning.modules.ttrl.module import TTRLModule

__all__ = ["TTRLModule", "TTRL_LABELERS", "LabelerSpec", "LabellingContext", "labeler_spec", "label_votes"]
