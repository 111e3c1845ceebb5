"""The empirical audit confirms every randomized-response claim, tightly, and catches a lie."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from privtd import ValidationError
from privtd.audit import audit, audit_worker, clopper_pearson
from privtd.mechanisms import (
    BinaryRR,
    ExpGaussian,
    KRRNull,
    LaplaceNull,
    MFPerturbation,
    OneLayerRR,
    TwoLayerNull,
    TwoLayerRR,
    task_profiles,
)


@pytest.mark.parametrize(
    "mech",
    [
        OneLayerRR.from_epsilon(1.0),
        TwoLayerRR.from_epsilon(1.0),
        BinaryRR.from_epsilon(2.0),
        OneLayerRR.from_epsilon(0.5, n_labels=5),
        TwoLayerRR.from_epsilon(0.3, n_labels=3, a=0.3),
        ExpGaussian.from_epsilon(1.0, low=0, high=10),
        KRRNull.from_epsilon(1.0, 0, 4),
        TwoLayerNull.from_epsilon(1.0, 0, 4),
    ],
    ids=[
        "one-layer",
        "two-layer",
        "binary-rr",
        "one-layer-5",
        "two-layer-3",
        "exp-gaussian",
        "krr-null",
        "two-layer-null",
    ],
)
def test_claims_hold_and_are_tight(mech):
    # 2e5 samples per input: the Clopper-Pearson half-width is about 0.003 on these
    # probabilities, so a tight claim's lower bound lands well within 10% of it.
    result = audit(mech, samples=200_000, seed=3)
    assert result.holds, result
    assert result.lower_bound >= 0.9 * result.claimed_epsilon, result


@dataclass(frozen=True)
class Understated(OneLayerRR):
    """Perturbs exactly like OneLayerRR but claims 80% of its epsilon."""

    @property
    def epsilon(self) -> float:
        return 0.8 * super().epsilon


def test_a_false_claim_is_caught():
    lying = Understated(OneLayerRR.from_epsilon(1.0).f)
    result = audit(lying, samples=200_000, seed=4)
    assert not result.holds and result.verdict.startswith("VIOLATED")


def test_clopper_pearson_edges():
    lo, hi = clopper_pearson(np.array([0, 10, 10]), 10, 0.05)
    assert lo[0] == 0.0 and hi[1] == 1.0
    # Known value: 0 successes in 10 at 95% gives an upper bound of 1 - 0.025^(1/10) = 0.3085.
    assert hi[0] == pytest.approx(1 - 0.025**0.1, abs=1e-6)


def test_bad_audit_arguments():
    with pytest.raises(ValidationError, match="samples must be an int >= 100"):
        audit(OneLayerRR.from_epsilon(1.0), samples=10)


def test_laplace_null_claim_is_exact_on_the_grid():
    # A cell moves by at most high - low grid steps, so discrete Laplace noise of scale
    # (high - low) / epsilon is exactly epsilon and tight; P3's |Gamma| / scale (1.0 for the
    # scale 5 below) would be conservative, privtd states the exact 0.8.
    for mech in (LaplaceNull.from_epsilon(1.0, low=0, high=4), LaplaceNull(5.0, low=0, high=4)):
        result = audit(mech, samples=200_000, seed=5)
        assert result.holds and result.tight, (mech, result)
    assert LaplaceNull(5.0, low=0, high=4).epsilon == pytest.approx(0.8)


def test_matrix_factorisation_claim_holds():
    # The first released cell is one projection of MF's output: a valid, not tight, audit.
    mech = MFPerturbation.from_epsilon(1.0, task_profiles(3, 2, rng=0), low=0, high=4)
    result = audit(mech, samples=200_000, seed=6)
    assert result.holds and result.lower_bound > 0.5


# ---------------------------------------------------------------- one worker's whole release


def test_worker_audit_catches_two_layer():
    # A worker's 20 answers under one f_u, at stated 0.1: one answer given the other 19 loses
    # far more than the 0.1 per answer the marginal states, and the release far more than the
    # 20 x 0.1 = 2 composition bills. Both bounds hold at 95% simultaneously over the events;
    # the exact figures they are measured against (3.00, 12.13) hold them.
    mech = TwoLayerRR.from_epsilon(0.1, 2)
    one = audit_worker(mech, 20, 1, samples=20_000, seed=1)
    assert one.lower_bound > 20 * mech.epsilon and one.holds
    assert one.claimed_epsilon == pytest.approx(mech.answer_epsilon(20))
    half = audit_worker(mech, 20, 10, samples=20_000, seed=1)
    assert half.lower_bound > 20 * mech.epsilon + 2.0 and half.holds
    assert half.claimed_epsilon == pytest.approx(mech.release_epsilon(20))


@pytest.mark.parametrize(
    ("mech", "k"),
    [
        (OneLayerRR.from_epsilon(1.0), 5),
        (OneLayerRR.from_epsilon(0.5, n_labels=3), 5),
        (BinaryRR.from_epsilon(0.8), 5),
        (KRRNull.from_epsilon(1.0, 1, 3), 5),
        (LaplaceNull.from_epsilon(1.0, 1, 3), 5),
    ],
    ids=["one-layer", "one-layer-3", "binary-rr", "krr-null", "laplace"],
)
def test_independent_answers_compose_at_worker_level(mech, k):
    # One answer given the others keeps epsilon, and the release is at most k epsilon: the
    # bounds hold, and for randomized response all k flipped against all k kept nears k epsilon.
    for differ in (1, k):
        result = audit_worker(mech, k, differ, samples=40_000, seed=2)
        expected = mech.epsilon if differ == 1 else k * mech.epsilon
        assert result.claimed_epsilon == pytest.approx(expected)
        assert result.holds, (differ, result)
    if isinstance(mech, BinaryRR) or mech.name == "one-layer":
        assert result.lower_bound >= 0.7 * k * mech.epsilon


@pytest.mark.parametrize(
    "mech",
    [TwoLayerNull(2.0, 1, 2), ExpGaussian.from_epsilon(1.0, 0.0, 1.0, granularity=1.0)],
    ids=["two-layer-null", "exp-gaussian"],
)
def test_worker_audit_catches_the_other_shared_draws(mech):
    # Their per-unit epsilon is the marginal of one unit alone; given the worker's other 19
    # units one unit loses more than it (and than its composition over one unit), within the
    # exact figure.
    result = audit_worker(mech, 20, 1, samples=20_000, seed=3)
    assert result.lower_bound > mech.epsilon + 1.0
    assert result.holds and result.claimed_epsilon == pytest.approx(mech.answer_epsilon(20))


def test_worker_audit_arguments():
    with pytest.raises(ValidationError, match="differ must be at most answers"):
        audit_worker(OneLayerRR.from_epsilon(1.0), 3, 4)
    with pytest.raises(ValidationError, match="answers must be an int >= 1"):
        audit_worker(OneLayerRR.from_epsilon(1.0), 0)
    mf = MFPerturbation.from_epsilon(1.0, task_profiles(4, 2, rng=0), 1, 3)
    with pytest.raises(ValidationError, match="mf solves one objective"):
        audit_worker(mf, 4)


def test_worker_audit_corrects_for_every_possible_event_not_those_seen():
    # Review attack: the Bonferroni count was the number of events the samples happened to show,
    # chosen by the data. One answer of two labels changed: the events possible before sampling
    # are (first, second) with first + second <= 1, three of them, though binary RR only ever
    # shows two; the bound must be Clopper-Pearson at alpha = 0.05 / (2 * 3).
    from privtd.audit import _worker_rows

    mech = OneLayerRR.from_epsilon(1.0)
    n, seed = 5_000, 4
    result = audit_worker(mech, 1, 1, samples=n, seed=seed)
    hits = []
    for which in (0, 1):
        grid, base, _ = _worker_rows(mech, 1, 1, which, n, seed + which)
        hits.append(int(np.count_nonzero(grid[:, 0] == base)))
    alpha = 0.05 / 6
    bounds = []
    for c0, c1 in ((hits[0], hits[1]), (n - hits[0], n - hits[1])):
        lo0, hi0 = (float(x[0]) for x in clopper_pearson(np.array([c0]), n, alpha))
        lo1, hi1 = (float(x[0]) for x in clopper_pearson(np.array([c1]), n, alpha))
        bounds += [math.log(lo0) - math.log(hi1), math.log(lo1) - math.log(hi0)]
    assert result.lower_bound == pytest.approx(max(bounds), rel=1e-12)
