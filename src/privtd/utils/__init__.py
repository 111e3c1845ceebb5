"""Tools for people who write estimators: :mod:`privtd.utils.estimator_checks` checks one
against privtd's estimator contract."""

__all__: list[str] = []
