"""Measuring: the papers' experiments, reproduced (``privtd reproduce``)."""

from . import bigdata18, dmkd14, icdcs20, kdd18, ladp

__all__ = ["bigdata18", "dmkd14", "icdcs20", "kdd18", "ladp"]
