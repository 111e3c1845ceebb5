"""Other libraries' interfaces over privtd's estimators: :mod:`privtd.compat.crowdkit` takes
crowd-kit's aggregation classes' place (docs/reference.md, "Moving from crowd-kit")."""

__all__ = ["crowdkit"]
