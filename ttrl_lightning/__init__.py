"""ttrl_lightning: test-time RL and best-of-N answer selection for (vision-)language models.

Subpackages follow the data flow (see README "Architecture"):
``answers`` -> ``signals`` -> ``consensus`` -> ``eval`` (best-of-N) / ``modules`` (training).
"""
__version__ = "0.1.0"
