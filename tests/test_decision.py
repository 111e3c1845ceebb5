"""Decision rules on the posteriors, and the warning when a fit drops a class the answers give."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cli_runner import run_cli as run
from crowds import skewed_crowd
from privtd import datasets, evaluate
from privtd.errors import ValidationError
from privtd.inference import AwareDawidSkene, AwareOneCoin, MajorityVote, decide
from privtd.inference.decision import (
    cost_matrix,
    lost_labels,
    one_class_warning,
    parse_decision,
)
from privtd.mechanisms import OneLayerRR

MU = pd.DataFrame(
    {"a": [0.70, 0.50, 0.20, 0.10], "b": [0.25, 0.30, 0.30, 0.10], "c": [0.05, 0.20, 0.50, 0.80]},
    index=["t1", "t2", "t3", "t4"],
)


# ---------------------------------------------------------------------- the rules, by hand
def test_map_is_the_most_probable_label():
    assert decide(MU).tolist() == ["a", "a", "c", "c"]


def test_balanced_divides_by_the_prior():
    prior = pd.Series({"a": 0.6, "b": 0.2, "c": 0.2})
    # t1: 0.70/0.6=1.17, 0.25/0.2=1.25, 0.05/0.2=0.25 -> b; t2: 0.83, 1.50, 1.00 -> b;
    # t3: 0.33, 1.50, 2.50 -> c; t4: 0.17, 0.50, 4.00 -> c.
    assert decide(MU, "balanced", prior=prior).tolist() == ["b", "b", "c", "c"]
    # The prior's order is the labels', not the Series' own.
    assert decide(MU, "balanced", prior=prior[["c", "a", "b"]]).tolist() == ["b", "b", "c", "c"]
    # No prior fitted: the posteriors already treat the labels alike.
    assert decide(MU, "balanced").equals(decide(MU))


def test_cost_per_class_and_per_pair():
    # Missing a 'b' costs 3: decide b where 3 mu_b beats mu_a and mu_c (t4: 0.3 < 0.8).
    assert decide(MU, "cost", costs={"b": 3}).tolist() == ["b", "b", "b", "c"]
    # Deciding 'a' when the truth is 'c' costs 4: expected costs of deciding a, b, c are
    # t1 0.45, 0.75, 0.95 -> a; t2 1.10, 0.70, 0.80 -> b; t3 2.30, 0.70, 0.50 -> c.
    matrix = cost_matrix({("c", "a"): 4}, MU.columns)
    assert matrix[2, 0] == 4 and matrix[0, 2] == 1 and np.all(np.diag(matrix) == 0)
    assert decide(MU, "cost", costs={("c", "a"): 4}).tolist() == ["a", "b", "c", "c"]
    frame = pd.DataFrame(matrix, index=MU.columns, columns=MU.columns)
    assert decide(MU, "cost", costs=frame).equals(decide(MU, "cost", costs={("c", "a"): 4}))
    # Equal costs per class are MAP.
    assert decide(MU, "cost", costs={"a": 2, "b": 2, "c": 2}).equals(decide(MU))


@pytest.mark.parametrize(
    "costs, message",
    [
        ({"z": 2}, "not one of"),
        ({"a": 0}, "finite number > 0"),
        ({"a": float("inf")}, "finite number > 0"),
        ({"a": 2, ("b", "c"): 3}, "mixes per-class and per-pair"),
        ({("a", "a"): 3}, "name pairs of two labels"),
        ({}, "costs must be"),
    ],
)
def test_bad_costs_say_what_to_give(costs, message):
    with pytest.raises(ValidationError, match=message):
        decide(MU, "cost", costs=costs)


def test_parse_decision_reads_the_cli_syntax():
    labels = pd.Index([0, 1])
    assert parse_decision("map", labels) == ("map", None)
    assert parse_decision(" balanced ", labels) == ("balanced", None)
    assert parse_decision("cost=1:5", labels) == ("cost", {1: 5.0})
    assert parse_decision("cost=1>0:5,0>1:2", labels) == ("cost", {(1, 0): 5.0, (0, 1): 2.0})
    for text, message in [
        ("mpa", "Unknown decision 'mpa'. Write map, balanced"),
        ("cost=2:5", "names no label"),
        ("cost=1:x", "as LABEL:COST"),
        ("cost=1:-1", "as LABEL:COST"),
        ("cost=1:2,1:3", "twice"),
        ("cost=1>0>1:2", "names no label"),
    ]:
        with pytest.raises(ValidationError, match=message):
            parse_decision(text, labels)


def test_estimators_take_and_check_the_decision():
    with pytest.raises(ValidationError, match="'decision' parameter of AwareDawidSkene"):
        AwareDawidSkene(decision="cost").fit(
            pd.DataFrame({"task": [1], "worker": [1], "answer": [0]})
        )


# ---------------------------------------------------------------------- the skewed crowd
@pytest.fixture(scope="module")
def skewed():
    answers, truth = skewed_crowd(0)
    mech = OneLayerRR.from_epsilon(1.0, n_labels=2)
    return answers, truth, mech, mech.perturb(answers, rng=0)


def test_map_collapses_on_the_skewed_crowd(skewed):
    """The collapse this guards against: the learned class prior runs to where it alone
    explains the reports, and the most probable label is class 0 for every task."""
    _, truth, mech, perturbed = skewed
    fit = AwareDawidSkene(mech, decision="map").fit(perturbed)
    assert fit.decision_ == "map" and fit.priors_[0] > 0.99
    assert (fit.truths_ == 0).all()
    assert evaluate(fit.truths_, truth)["balanced_accuracy"] == 0.5
    message = one_class_warning(
        fit.truths_, perturbed, mechanism=mech, method="aware-ds", prior=fit.priors_
    )
    assert message is not None
    assert message.startswith("aware-ds labels 8,315 of 8,315 answered tasks '0', '1' on 0.0%")
    assert "cannot overturn the learned class prior" in message
    assert "decide by the 'balanced' rule" in message and "--" not in message


def test_default_under_a_mechanism_does_not_collapse(skewed):
    # Fails where the default decision is MAP: every task 0, balanced accuracy 0.5.
    answers, truth, mech, perturbed = skewed
    fit = AwareDawidSkene(mech).fit(perturbed)
    assert fit.decision_ == "balanced"
    scores = evaluate(fit.truths_, truth)
    mv = evaluate(MajorityVote().fit(perturbed).truths_, truth)
    # About 1,000 tasks of class 1: its recall has a standard error near 0.016, the balanced
    # accuracy about half that; 0.55 is 6 of those above chance (measured: 0.639).
    assert scores["balanced_accuracy"] > 0.55
    # Not below majority vote on the same reports by more than 3 standard errors of the
    # difference (measured: +0.02 on this seed, +0.008 mean over 10 crowds).
    assert scores["balanced_accuracy"] > mv["balanced_accuracy"] - 0.025
    assert one_class_warning(fit.truths_, perturbed, mechanism=mech, prior=fit.priors_) is None
    # Without a mechanism the decision stays MAP (the plain models' and crowd-kit's).
    assert AwareDawidSkene().fit(answers.with_values(answers.value)).decision_ == "map"
    assert AwareOneCoin(mech).fit(perturbed).decision_ == "balanced"


def test_lost_labels_takes_the_channel_out():
    # Reports of workers who all answer 0, through one-layer RR at f = 0.3: 30% of the reports
    # are 1, none of the workers' own answers.
    n = 1000
    gen = np.random.default_rng(3)
    value = (gen.random(3 * n) < 0.3).astype(np.int8)
    frame = pd.DataFrame({"task": np.repeat(np.arange(n), 3), "worker": np.tile([0, 1, 2], n)})
    frame["answer"] = value
    from privtd import Answers

    answers = Answers.from_frame(frame)
    zeros = np.zeros(n, dtype=np.int64)
    assert lost_labels(zeros, answers, OneLayerRR(0.3, 2)) == []
    lost = lost_labels(zeros, answers, None)  # read as given, 30% of answers say 1
    assert [c for c, _, _ in lost] == [1] and lost[0][2] == pytest.approx(value.mean())


# ---------------------------------------------------------------------- the CLI
@pytest.fixture(scope="module")
def skewed_files(skewed, tmp_path_factory):
    _, truth, _, perturbed = skewed
    folder = tmp_path_factory.mktemp("skewed")
    perturbed.to_csv(folder / "answers.csv")
    truth.rename_axis("task").rename("truth").reset_index().to_csv(
        folder / "truth.csv", index=False
    )
    return folder


def test_infer_warns_in_one_line_when_map_collapses(skewed_files, capsys):
    out = skewed_files / "map.csv"
    args = ["infer", skewed_files / "answers.csv", "-M", "one-layer", "-e", "1", "-o", out]
    code, _, err = run([*args, "--decision", "map"], capsys)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("privtd: warning:")]
    assert len(warnings) == 1, err
    assert "labels 8,315 of 8,315 answered tasks '0'" in warnings[0]
    assert "against" in warnings[0] and "% of the answers" in warnings[0]
    assert "the 'balanced' rule" in warnings[0] and "epsilon and redundancy" in warnings[0]
    assert warnings[0].endswith("raise epsilon (CLI: --decision).")
    assert set(pd.read_csv(out)["truth"]) == {0}
    # The default: balanced, no warning, both classes.
    code, _, err = run(args, capsys)
    assert code == 0 and "warning" not in err, err
    assert set(pd.read_csv(out)["truth"]) == {0, 1}
    code, text, _ = run(["evaluate", out, "--truth", skewed_files / "truth.csv"], capsys)
    assert code == 0 and "balanced_accuracy" in text and "confusion" in text


def test_infer_decision_cost_and_errors(skewed_files, capsys):
    out = skewed_files / "cost.csv"
    base = ["infer", skewed_files / "answers.csv", "-M", "one-layer", "-e", "1", "-o", out]
    ones = {}
    for rule in ("cost=1:10", "balanced", "cost=1:1e6"):
        code, _, err = run([*base, "--decision", rule], capsys)
        assert code == 0, err
        ones[rule] = pd.read_csv(out)["truth"].mean()
    # Balanced weighs a miss of class 1 by 1 / prior, about 5,000 here (the prior ran to
    # 0.9998): a cost of 10 decides fewer tasks 1, one of a million more.
    assert ones["cost=1:10"] < ones["balanced"] < ones["cost=1:1e6"]
    code, _, err = run([*base, "--decision", "cost=7:2"], capsys)
    assert code == 2 and "names no label" in err and "Traceback" not in err
    numbers = skewed_files / "numbers.csv"
    numbers.write_text("task,worker,answer\nt1,a,1.5\nt1,b,2.5\n")
    code, _, err = run(["infer", numbers, "-m", "mean", "-o", out, "--decision", "map"], capsys)
    assert code == 2 and "these answers are numbers" in err


def test_fitted_prior_reads_each_models_prior():
    from privtd.inference import DawidSkene, LatentClass
    from privtd.inference.decision import fitted_prior

    answers = datasets.load("duchenne").answers
    ds = DawidSkene().fit(answers)
    assert fitted_prior(ds) is ds.priors_
    lc = LatentClass().fit(answers)
    prior = fitted_prior(lc)
    assert list(prior.index) == list(lc.probas_.columns) and prior.iloc[1] == lc.prior_
    assert fitted_prior(MajorityVote().fit(answers)) is None


def test_a_task_without_evidence_gets_the_most_probable_label():
    # Its posterior is the prior, up to the rounding in which the two kernel backends differ:
    # the balanced scores tie, and the tie goes to the most probable label, on either side of it.
    prior = np.array([0.8, 0.2])
    for wobble in (1e-12, -1e-12):
        mu = pd.DataFrame([prior + [wobble, -wobble], [0.5, 0.5]], columns=["no", "yes"])
        assert decide(mu, "balanced", prior=prior).tolist() == ["no", "yes"]
        assert decide(mu, "cost", costs={"yes": 4}).tolist()[0] == "no"
