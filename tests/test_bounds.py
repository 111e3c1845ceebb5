"""P3's worked examples of its utility bounds (SPEC B3.2-B3.4, C2)."""

from __future__ import annotations

import numpy as np
import pytest

from privtd.mechanisms.bounds import lp_error_bound, mf_error_bound, rr_error_bound

M, N = 40, 25
Q, SIGMA, S, MU = np.full(M, 1 / M), np.ones(M), np.full(M, 0.1), np.zeros(N)


def test_laplace_bound_14_13():
    # 0.9 (4.5 + 10) + 0.1 (sqrt(2/pi) + 10) = 14.1298 (SPEC B3.2).
    assert lp_error_bound(Q, SIGMA, S, MU, 1.0) == pytest.approx(14.1298, abs=1e-4)


def test_rr_bound_3_55():
    # The paper prints 3.551; with the normal pmf renormalised over Gamma we get 3.545 (SPEC B3.3).
    assert rr_error_bound(Q, SIGMA, S, MU, 1.0) == pytest.approx(3.551, abs=0.02)


def test_mf_bound_1_798():
    # n = 1000, d = 100, |Gamma| = 10, eps = 1, q = 1/m: sqrt(2/pi) + 1 = 1.798 (SPEC B3.4).
    assert mf_error_bound(1 / M, M, 100, 1.0, 1000) == pytest.approx(1.798, abs=1e-3)


def test_bounds_fall_with_epsilon():
    assert lp_error_bound(Q, SIGMA, S, MU, 2.0) < lp_error_bound(Q, SIGMA, S, MU, 1.0)
    assert rr_error_bound(Q, SIGMA, S, MU, 3.0) < rr_error_bound(Q, SIGMA, S, MU, 1.0)
    assert mf_error_bound(1 / M, M, 100, 2.0, 1000) < mf_error_bound(1 / M, M, 100, 1.0, 1000)
