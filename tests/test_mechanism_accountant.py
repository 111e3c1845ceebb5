"""One privacy accountant: the worker's budget, its lifetime ceiling and the service's caps all
spend through it, at the mechanism's whole-release figures."""

from __future__ import annotations

import math

import pytest

from privtd import BudgetExceededError, ValidationError
from privtd.client import Ceiling, CeilingExceededError
from privtd.mechanisms import Accountant, Budget, OneLayerRR, TwoLayerNull, TwoLayerRR
from privtd.service import campaigns


def test_spend_check_remaining():
    account = Accountant(2.0)
    account.spend(1.5)
    assert account.spent_epsilon == 1.5 and account.remaining == 0.5
    assert account.allows(0.5) and not account.allows(0.5 + 1e-9)
    with pytest.raises(BudgetExceededError, match="past the limit of 2") as refused:
        account.spend(0.6)
    assert "\n" not in str(refused.value)
    assert account.spent_epsilon == 1.5  # a refused spend records nothing
    assert not account.allows(math.nan)  # a figure that is not a number is never within


def test_delta_is_a_limit_too():
    account = Accountant(10.0, 1e-6)
    account.spend(1.0, 1e-6)
    with pytest.raises(BudgetExceededError):
        account.check(0.0, 1e-7)


def test_a_release_costs_its_whole_release_figure_not_the_per_answer_sum():
    # Two-layer's 20 answers of one draw cost release_epsilon(20), about 13.15, where 20 times
    # the marginal would say 20; two-layer-null's row costs more than k times its marginal.
    # Either way the accountant bills the mechanism's exact figure.
    rr = TwoLayerRR.from_epsilon(1.0, 2)
    assert Accountant.cost(rr, 20)[0] == rr.release_epsilon(20) < 20 * rr.epsilon
    null = TwoLayerNull(1.0, 1, 5)
    assert Accountant.cost(null, 30)[0] == null.release_epsilon(30) > 30 * null.epsilon
    # Separate draws add up.
    assert Accountant.draws_cost(rr, 45, 20) == pytest.approx(
        2 * rr.release_epsilon(20) + rr.release_epsilon(5), rel=1e-15
    )
    assert Accountant.draws_cost(rr, 45) == rr.release_epsilon(45)


def test_budget_is_an_accountant_and_charges_one_draw():
    mech = OneLayerRR.from_epsilon(1.0, 2)
    budget = Budget(2.5, spent_epsilon=1.0)
    assert isinstance(budget, Accountant)
    assert budget.charge(mech, 1) == pytest.approx(1.0)
    with pytest.raises(BudgetExceededError, match="Nothing was perturbed or sent"):
        budget.charge(mech, 1)
    assert budget.spent_epsilon == pytest.approx(2.0)


@pytest.mark.parametrize(
    "limit, spent", [(math.inf, 0.0), (-1.0, 0.0), (1.0, -0.5), (1.0, math.nan)]
)
def test_bad_limits_and_records_are_refused_in_one_line(limit, spent):
    with pytest.raises(ValidationError) as refused:
        Accountant(limit, spent_epsilon=spent)
    assert "\n" not in str(refused.value)


def test_the_lifetime_ceiling_spends_through_the_accountant(tmp_path):
    ceiling = Ceiling(tmp_path / "ledger.json")
    ceiling.set(lifetime=10.0)
    ceiling.record("a", 6.0)
    ceiling.record("b", 3.0)
    account = ceiling.account("b")  # what every campaign but b spent
    assert account.spent_epsilon == 6.0 and account.remaining == 4.0
    ceiling.check_spend("b", 4.0)
    with pytest.raises(CeilingExceededError, match="lifetime total over all campaigns to"):
        ceiling.check_spend("b", 4.5)
    (tmp_path / "ledger.json").write_text('{"max_lifetime_epsilon": -1}')
    with pytest.raises(ValidationError, match="Cannot read the worker's ceiling file"):
        Ceiling(tmp_path / "ledger.json")


def test_the_service_caps_spend_through_the_accountant():
    mech = TwoLayerRR.from_epsilon(1.0, 2)
    per_draw = mech.release_epsilon(campaigns.MAX_REPORTS)
    assert campaigns.worker_spend(mech, campaigns.MAX_REPORTS + 3) == pytest.approx(
        per_draw + mech.release_epsilon(3), rel=1e-15
    )
    # The most tasks within a limit: one more would pass it.
    fits = campaigns.answers_within(mech, 13.0, 100)
    assert Accountant(13.0).allows(campaigns.worker_spend(mech, fits))
    assert not Accountant(13.0).allows(campaigns.worker_spend(mech, fits + 1))
