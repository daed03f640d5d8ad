"""The shared label of an unextractable response (VisConf appendix A)."""
from __future__ import annotations

__all__ = ["NO_ANSWER"]

NO_ANSWER = "<NO_ANSWER>"
"""Shared label of an unextractable response (VisConf appendix A)."""
