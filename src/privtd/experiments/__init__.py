"""Measuring: the papers' experiments, reproduced (``privtd reproduce``)."""

from __future__ import annotations

from . import kdd18, ladp

__all__ = ["kdd18", "ladp"]
