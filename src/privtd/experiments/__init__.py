"""Measuring: the papers' experiments, reproduced (``privtd reproduce``)."""

from __future__ import annotations

from . import icdcs20, kdd18, ladp

__all__ = ["icdcs20", "kdd18", "ladp"]
