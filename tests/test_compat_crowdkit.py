"""privtd.compat.crowdkit against crowd-kit 1.4.2's published expectations.

The data sets and the expected figures are those of crowd-kit's own test suite (Toloka/crowd-kit,
commit 35f0661, Apache-2.0): tests/conftest.py (toy, simple and bool-label answers, their ground
truths and gold), tests/aggregation/data_mv.py, data_wawa.py, data_zbs.py, data_gold_mv.py and
data_mmsr.py (labels, probas, skills, scores), test_ds_aggregation.py (Dawid-Skene after 0 and 1
steps, initial error matrices, gold, empty input, overlap), test_majority_vote.py,
test_kos_aggregation.py and test_binary_relevance_aggregation.py. They are stored as CSV in
tests/data/crowdkit_fixtures/ (SOURCE.md there); the tests themselves are privtd's. The last
block fits crowd-kit itself where it is installed and compares labels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal, assert_series_equal

from privtd import datasets
from privtd.compat import crowdkit as ck

DATA = Path(__file__).parent / "data" / "crowdkit_fixtures"
SIMPLE_PREFIX = "1231239876--5fac0d234ffb2f3b00893"
FRAUDSTER = "0c3eb7d5fcc414db137c4180a654c06e"  # answers "parrot" to everything in `simple`
GOLD_TASKS = {"toy": ["t1", "t2"], "simple": [SIMPLE_PREFIX + s for s in ("eec", "efb", "ee8")]}
# crowd-kit's expected toy labels where they are not the ground truth: t1 is a 2:2 tie for
# majority vote ("no" wins), and MMSR's published labels differ on t1 and t2.
TOY_VOTE = ["no", "yes", "no", "yes", "no"]
TOY_MMSR = ["yes", "no", "no", "yes", "no"]
ALL = [
    "MajorityVote",
    "Wawa",
    "ZeroBasedSkill",
    "DawidSkene",
    "OneCoinDawidSkene",
    "GLAD",
    "MACE",
    "MMSR",
    "GoldMajorityVote",
    "ZenCrowd",
    "MinimaxEntropy",
]
SHORT = {"MajorityVote": "mv", "Wawa": "wawa", "ZeroBasedSkill": "zbs", "GoldMajorityVote": "gold"}


def answers(dataset: str) -> pd.DataFrame:
    return pd.read_csv(DATA / f"{dataset}_answers.csv")


def ground_truth(dataset: str) -> pd.Series:
    return pd.read_csv(DATA / f"{dataset}_ground_truth.csv", index_col="task")["agg_label"]


def gold(dataset: str) -> pd.Series:
    return ground_truth(dataset).loc[GOLD_TASKS[dataset]].rename(None)


def expected_labels(name: str, dataset: str) -> pd.Series:
    truth = ground_truth(dataset)
    if dataset == "toy" and name in ("MajorityVote", "Wawa", "ZeroBasedSkill", "MMSR"):
        return pd.Series(TOY_VOTE if name != "MMSR" else TOY_MMSR, truth.index, name="agg_label")
    return truth


def expected_table(method: str, dataset: str) -> pd.DataFrame:
    rows = pd.read_csv(DATA / "expected_probas.csv").query(
        "method == @method & dataset == @dataset"
    )
    table = rows.pivot(index="task", columns="label", values="value")
    table.columns.name = "label"
    return table


def expected_skills(method: str, dataset: str) -> pd.Series:
    rows = pd.read_csv(DATA / "expected_skills.csv").query(
        "method == @method & dataset == @dataset"
    )
    return rows.set_index("worker")["skill"].rename("skill")


def fitted(name: str, dataset: str, **params):
    """An estimator fitted the way crowd-kit's tests fit it, and the labels it returned."""
    est = getattr(ck, name)(**params)
    data = answers(dataset)
    if name == "GoldMajorityVote":
        assert est.fit(data, gold(dataset)) is est
        return est, est.predict(data)
    return est, est.fit_predict(data)


def toy_init_error(value: float | np.ndarray = 0.0) -> pd.DataFrame:
    index = pd.MultiIndex.from_product(
        [["w1", "w2", "w3", "w4", "w5"], ["yes", "no"]], names=["worker", "label"]
    )
    return pd.DataFrame(value, index=index, columns=["no", "yes"])


# --- labels, names and published tables -------------------------------------------------------


# ZenCrowd and MinimaxEntropy have no crowd-kit counterpart, so no published labels: they are held
# to the fixtures' ground truth, except MinimaxEntropy on the toy answers, where its posterior on
# t2 is within 0.01 of 1/2 (5 answers a task leave its per-task terms barely constrained).
LABEL_CASES = [
    (n, d) for n in ALL for d in ("toy", "simple") if (n, d) != ("MinimaxEntropy", "toy")
]


@pytest.mark.parametrize("name, dataset", LABEL_CASES)
def test_labels_on_published_fixtures(name, dataset):
    est, labels = fitted(name, dataset)
    want = expected_labels(name, dataset)
    assert_series_equal(labels.sort_index(), want.sort_index())
    assert_series_equal(est.labels_.sort_index(), want.sort_index())


@pytest.mark.parametrize("name", ALL)
def test_output_names(name):
    est, _ = fitted(name, "simple")
    assert (est.labels_.name, est.labels_.index.name) == ("agg_label", "task")
    if name in ("MMSR",):
        assert est.scores_.index.name == "task" and est.scores_.columns.name == "label"
    elif name in ("MajorityVote", "Wawa", "ZeroBasedSkill", "DawidSkene", "OneCoinDawidSkene"):
        assert est.probas_.index.name == "task" and est.probas_.columns.name == "label"
        assert sorted(est.probas_.columns) == ["chicken", "goose", "parrot"]
    if name in ("MajorityVote", "Wawa", "ZeroBasedSkill", "OneCoinDawidSkene", "MMSR"):
        assert (est.skills_.name, est.skills_.index.name, est.skills_.dtype) == (
            "skill",
            "worker",
            np.float64,
        )
    if name in ("DawidSkene", "OneCoinDawidSkene"):
        assert est.errors_.index.names == ["worker", "label"]
        assert (est.priors_.name, est.priors_.index.name) == ("prior", "label")
        np.testing.assert_allclose(est.priors_.sum(), 1.0)


@pytest.mark.parametrize("dataset", ["toy", "simple"])
@pytest.mark.parametrize("name", ["MajorityVote", "Wawa", "ZeroBasedSkill", "GoldMajorityVote"])
@pytest.mark.parametrize("proba", [False, True])
def test_published_probas_and_skills(name, dataset, proba):
    est = getattr(ck, name)()
    data = answers(dataset)
    if name == "GoldMajorityVote":
        est.fit(data, gold(dataset))
        assert_series_equal(est.skills_.sort_index(), expected_skills("gold", dataset), rtol=1e-5)
        got = est.predict_proba(data) if proba else est.predict(data)
    else:
        got = est.fit_predict_proba(data) if proba else est.fit_predict(data)
    assert_series_equal(est.skills_.sort_index(), expected_skills(SHORT[name], dataset), rtol=1e-5)
    want = expected_table(SHORT[name], dataset)
    assert_frame_equal(est.probas_, want, check_like=True, rtol=1e-5)
    if proba:
        assert_frame_equal(got, want, check_like=True, rtol=1e-5)
    # crowd-kit's convention: a fitted Series attribute is named as the attribute, singular.
    for attr in dir(est):
        value = getattr(est, attr)
        if attr.endswith("_") and not attr.startswith("_") and isinstance(value, pd.Series):
            assert value.name == ("agg_label" if attr == "labels_" else attr[:-2])


def test_mmsr_scores_on_simple():
    est = ck.MMSR()
    scores = est.fit_predict_score(answers("simple"))
    want = expected_table("mmsr", "simple")
    assert_frame_equal(scores, est.scores_)
    assert_frame_equal(est.scores_, want, check_like=True, rtol=1e-5)
    assert_series_equal(est.skills_.sort_index(), expected_skills("mmsr", "simple"), rtol=1e-5)
    labels = est.predict(answers("simple"))
    assert_series_equal(labels.sort_index(), ground_truth("simple").sort_index())


def test_mmsr_toy_labels_by_score():
    est = ck.MMSR()
    scores = est.fit_predict_score(answers("toy"))
    assert list(scores.idxmax(axis=1).sort_index()) == TOY_MMSR


# --- Dawid-Skene ------------------------------------------------------------------------------

DS_STEPS = {  # priors and labels after n_iter steps; probas and errors are in the CSV files
    0: ([0.46, 0.54], ["no", "yes", "no", "yes", "no"]),
    1: ([0.49, 0.51], ["yes", "yes", "no", "yes", "no"]),
}


@pytest.mark.parametrize("n_iter", [0, 1])
def test_dawid_skene_step_by_step(n_iter):
    # crowd-kit's step fixture is the toy answers listed task by task.
    data = answers("toy").sort_values(["task", "worker"], ignore_index=True)
    est = ck.DawidSkene(n_iter).fit(data)
    priors, labels = DS_STEPS[n_iter]
    errors = pd.read_csv(DATA / "ds_step_errors.csv").query("n_iter == @n_iter")
    errors = errors.drop(columns="n_iter").set_index(["worker", "label"])
    label_index = pd.Index(["no", "yes"], name="label")
    assert_frame_equal(
        est.probas_, expected_table(f"ds{n_iter}", "toy"), check_like=True, atol=0.005
    )
    assert_frame_equal(est.errors_, errors, check_like=True, atol=0.005, check_names=False)
    assert_series_equal(est.priors_, pd.Series(priors, label_index, name="prior"), atol=0.005)
    want = pd.Series(
        labels, pd.Index(["t1", "t2", "t3", "t4", "t5"], name="task"), name="agg_label"
    )
    assert_series_equal(est.labels_, want)


@pytest.mark.parametrize("n_iter", [0, 1, 2, 10])
def test_dawid_skene_gold_is_one_hot(n_iter):
    true_labels = gold("toy")
    est = ck.DawidSkene(n_iter).fit(answers("toy"), true_labels)  # positional, as crowd-kit's
    rows = est.probas_.loc[true_labels.index]
    for task, label in true_labels.items():
        assert rows.loc[task, label] == pytest.approx(1.0, abs=1e-8)
    np.testing.assert_allclose(est.probas_.sum(axis=1), 1.0, atol=1e-8)
    assert_series_equal(est.labels_[true_labels.index], true_labels, check_names=False)
    if n_iter == 10:
        assert_series_equal(est.labels_.sort_index(), ground_truth("toy"))


@pytest.mark.parametrize("strategy", ["addition", "assign", None])
def test_dawid_skene_without_initial_error(strategy):
    est = ck.DawidSkene(n_iter=10, tol=0, initial_error_strategy=strategy)
    est.fit(answers("toy"), initial_error=None)
    assert_series_equal(est.labels_.sort_index(), ground_truth("toy"))


@pytest.mark.parametrize("rows", [10, 3])  # every worker, or only w1 and half of w2
def test_dawid_skene_zero_initial_error_addition(rows):
    est = ck.DawidSkene(n_iter=10, tol=0, initial_error_strategy="addition")
    est.fit(answers("toy"), initial_error=toy_init_error()[:rows])
    assert_series_equal(est.labels_.sort_index(), ground_truth("toy"))


@pytest.mark.parametrize(
    "strategy, rows, message",
    [
        ("assign", 10, "The sum of each worker's error matrix in initial_error should be 1.0"),
        ("assign", 3, "All the workers in data should be in initial_error"),
        ("bogus", 10, "Invalid initial_error_strategy"),
    ],
)
def test_dawid_skene_bad_initial_error(strategy, rows, message):
    est = ck.DawidSkene(n_iter=10, initial_error_strategy=strategy)
    with pytest.raises(ValueError, match=message):
        est.fit(answers("toy"), initial_error=toy_init_error()[:rows])


def test_dawid_skene_initial_error_addition_after_no_step():
    # w2 answered yes on t1, t2, t4 and no on t3, t5; with the majority-vote posteriors its
    # unnormalised counts (given, truth) are yes: (no 0.9, yes 2.1), no: (no 1.4, yes 0.6).
    # Adding yes: (1.1, 0.9), no: (0.6, 0.4) gives yes: (2, 3), no: (2, 1); each truth column
    # normalised: P(yes | no) = 2/4, P(yes | yes) = 3/4, P(no | yes) = 1/4, P(no | no) = 2/4.
    init = toy_init_error()
    init.loc[("w2", "yes"), ["no", "yes"]] = [1.1, 0.9]
    init.loc[("w2", "no"), ["no", "yes"]] = [0.6, 0.4]
    est = ck.DawidSkene(n_iter=0, tol=0.0, initial_error_strategy="addition")
    w2 = est.fit(answers("toy"), initial_error=init).errors_.loc["w2"]
    want = pd.DataFrame([[0.5, 0.75], [0.5, 0.25]], index=["yes", "no"], columns=["no", "yes"])
    assert_frame_equal(w2.loc[["yes", "no"], ["no", "yes"]], want, check_names=False)


def test_dawid_skene_initial_error_can_overturn_a_label():
    # t2 is answered yes by w1-w3 and no by w4, w5: priors that every "yes" hides a "no" and
    # every "no" is right make t2 "no"; so do confident, right priors for w2 leave the truth.
    init = toy_init_error()
    for worker, given in [("w1", "yes"), ("w2", "yes"), ("w3", "yes"), ("w4", "no"), ("w5", "no")]:
        init.loc[(worker, given), "no"] = 99
    est = ck.DawidSkene(n_iter=10, tol=0, initial_error_strategy="addition")
    assert est.fit(answers("toy"), initial_error=init).labels_["t2"] == "no"
    right = toy_init_error()
    right.loc[("w2", "yes"), ["no", "yes"]] = [1, 99]
    right.loc[("w2", "no"), ["no", "yes"]] = [99, 1]
    est.fit(answers("toy"), initial_error=right)
    assert_series_equal(est.labels_.sort_index(), ground_truth("toy"))


def test_dawid_skene_assign_keeps_the_given_matrix_before_any_step():
    # Each worker's matrix normalised over the labels given, per true label: a valid start.
    counts = np.random.default_rng(0).integers(1, 100, size=(10, 2)).astype(float)
    init = toy_init_error(counts)
    init = init / init.groupby("worker").transform("sum")
    est = ck.DawidSkene(n_iter=0, tol=0.0, initial_error_strategy="assign")
    assert_frame_equal(est.fit(answers("toy"), initial_error=init).errors_, init, check_like=True)


def test_dawid_skene_assign_from_its_own_fit():
    est = ck.DawidSkene(n_iter=10, tol=0).fit(answers("toy"))
    again = ck.DawidSkene(n_iter=10, tol=0, initial_error_strategy="assign")
    again.fit(answers("toy"), initial_error=est.errors_)
    assert_series_equal(again.labels_.sort_index(), ground_truth("toy"))


def test_dawid_skene_assign_can_overturn_a_label():
    # Every "yes" of w1-w3 and every "no" of w4, w5 taken to come from a "no" task: t2, answered
    # yes by w1-w3 and no by w4, w5, becomes "no".
    init = toy_init_error(0.5)
    for worker, given, other in [("w1", "yes", "no"), ("w2", "yes", "no"), ("w3", "yes", "no")]:
        init.loc[(worker, given), "no"], init.loc[(worker, other), "no"] = 0.99, 0.01
    for worker in ["w4", "w5"]:
        init.loc[(worker, "no"), "no"], init.loc[(worker, "yes"), "no"] = 0.99, 0.01
    est = ck.DawidSkene(n_iter=10, tol=0, initial_error_strategy="assign")
    assert est.fit(answers("toy"), initial_error=init).labels_["t2"] == "no"


@pytest.mark.parametrize("overlap", [3, 300, 3000])
def test_dawid_skene_overlap(overlap):
    # Every task gets "no" from a third of the workers and "yes" from the rest.
    rows = [
        (task, worker, "yes" if (worker - task) % 3 else "no")
        for worker in range(overlap)
        for task in range(3)
    ]
    est = ck.DawidSkene(20).fit(pd.DataFrame(rows, columns=["task", "worker", "label"]))
    tasks, labels = pd.Index([0, 1, 2], name="task"), pd.Index(["no", "yes"], name="label")
    want = pd.DataFrame([[1 / 3, 2 / 3]] * 3, index=tasks, columns=labels)
    assert_frame_equal(est.probas_, want, check_like=True, atol=0.005)
    assert_series_equal(est.labels_, pd.Series(["yes"] * 3, tasks, name="agg_label"))
    assert_series_equal(est.priors_, pd.Series([1 / 3, 2 / 3], labels, name="prior"), atol=0.005)


# --- empty input, bool labels ----------------------------------------------------------------

EMPTY = pd.DataFrame([], columns=["task", "worker", "label"])


@pytest.mark.parametrize("name", ["DawidSkene", "OneCoinDawidSkene"])
def test_dawid_skene_empty_input(name):
    est = getattr(ck, name)(10).fit(EMPTY)
    assert_frame_equal(est.probas_, pd.DataFrame())
    assert_frame_equal(est.errors_, pd.DataFrame())
    assert_series_equal(est.priors_, pd.Series(dtype=float, name="prior"))
    assert_series_equal(est.labels_, pd.Series(dtype=float, name="agg_label"))


@pytest.mark.parametrize("name", ["MajorityVote", "Wawa", "KOS"])
def test_voting_empty_input(name):
    est = getattr(ck, name)()
    assert_series_equal(est.fit_predict(EMPTY), pd.Series([], dtype=object, name="agg_label"))
    if name != "KOS":
        assert est.probas_.empty
        assert est.skills_.empty and est.skills_.name == "skill"


def test_binary_relevance_and_gold_empty_input():
    got = ck.BinaryRelevance(ck.MajorityVote()).fit_predict(EMPTY)
    assert_series_equal(got, pd.Series(dtype=float, name="agg_label"), check_index_type=False)
    assert ck.GoldMajorityVote().fit_predict_proba(EMPTY, pd.Series(dtype=float)).empty


BOOL_ANSWERS = pd.DataFrame(
    {
        "worker": ["w1", "w1", "w2", "w2", "w3", "w3"],
        "task": ["t1", "t2"] * 3,
        "label": [True] * 4 + [False] * 2,
    }
)


@pytest.mark.parametrize("name", [n for n in ALL if n != "GoldMajorityVote"] + ["KOS"])
def test_bool_labels(name):
    est = getattr(ck, name)()
    want = pd.Series([True, True], pd.Index(["t1", "t2"], name="task"), name="agg_label")
    assert_series_equal(est.fit_predict(BOOL_ANSWERS), want)


@pytest.mark.parametrize("method", ["vb", "em"])
def test_mace_one_short_restart_on_toy(method):
    # crowd-kit's published run: one restart of 5 iterations. (Its EM run on `simple` is
    # published at 9 of 10 tasks, a property of its random start, so it is not checked here.)
    labels = ck.MACE(n_restarts=1, n_iter=5, method=method).fit_predict(answers("toy"))
    assert_series_equal(labels.sort_index(), ground_truth("toy"))


def test_kos_rejects_more_than_two_labels():
    with pytest.raises(ValueError):
        ck.KOS(n_iter=10).fit(answers("simple"))


# --- majority vote with given skills, gold majority vote, predict on new data --------------------


def test_majority_vote_with_given_skills():
    skills = expected_skills("mv", "simple")
    est = ck.MajorityVote()
    est.fit_predict(answers("simple"), skills=skills)
    assert_series_equal(est.skills_.sort_index(), skills)


def test_majority_vote_missing_skill_policies():
    data, skills = answers("simple"), expected_skills("mv", "simple").drop(FRAUDSTER)
    est = ck.MajorityVote(on_missing_skill="value", default_skill=1_000_000)
    labels = est.fit_predict(data, skills=skills)
    assert (labels[data.loc[data["worker"] == FRAUDSTER, "task"]] == "parrot").all()
    est = ck.MajorityVote(on_missing_skill="ignore")
    est.fit_predict(data, skills=skills)
    assert FRAUDSTER not in est.skills_.index


@pytest.mark.parametrize(
    "params, skills",
    [
        ({}, "drop"),  # on_missing_skill="error" is the default
        ({"on_missing_skill": "error"}, "drop"),
        ({"on_missing_skill": "ignore"}, "none"),  # no task keeps a worker with a skill
        ({"on_missing_skill": "value"}, "drop"),  # without a default_skill
        ({"on_missing_skill": "bogus"}, "drop"),
    ],
)
def test_majority_vote_missing_skill_errors(params, skills):
    given = expected_skills("mv", "simple")
    given = given.drop(FRAUDSTER) if skills == "drop" else pd.Series([], dtype=float)
    with pytest.raises(ValueError):
        ck.MajorityVote(**params).fit_predict(answers("simple"), skills=given)


NEW = pd.DataFrame(
    {
        "task": ["n1", "n1", "n1", "n2", "n2", "n2"],
        "worker": ["w3", "w1", "w5", "w3", "w4", "w2"],
        "label": ["yes", "no", "no", "no", "yes", "yes"],
    }
)


@pytest.mark.parametrize("name", ["Wawa", "ZeroBasedSkill"])
def test_predict_on_new_answers(name):
    # Skills from the toy answers: w1 0.6, w2 0.8, w3 1.0, w4 0.4, w5 0.8. n1: no 0.6 + 0.8 =
    # 1.4 against yes 1.0; n2: yes 0.4 + 0.8 = 1.2 against no 1.0.
    est = getattr(ck, name)().fit(answers("toy"))
    tasks = pd.Index(["n1", "n2"], name="task")
    assert_series_equal(est.predict(NEW), pd.Series(["no", "yes"], tasks, name="agg_label"))
    want = pd.DataFrame([[1.4 / 2.4, 1 / 2.4], [1 / 2.2, 1.2 / 2.2]], tasks, ["no", "yes"])
    assert_frame_equal(est.predict_proba(NEW), want, check_like=True, check_names=False, rtol=1e-9)


def test_gold_majority_vote_keyword_and_fit_predict():
    est = ck.GoldMajorityVote()
    labels = est.fit_predict(answers("toy"), true_labels=gold("toy"))
    assert_series_equal(labels.sort_index(), ground_truth("toy"))
    assert_series_equal(est.skills_.sort_index(), expected_skills("gold", "toy"))


# --- BinaryRelevance ------------------------------------------------------------------------------


@pytest.mark.parametrize("base", [lambda: ck.MajorityVote(), lambda: ck.DawidSkene(n_iter=10)])
def test_binary_relevance_lists_per_task(base):
    data = pd.DataFrame(
        [
            ["t1", "w1", ["house", "tree"]],
            ["t1", "w2", ["house"]],
            ["t1", "w3", ["house", "tree", "grass"]],
            ["t2", "w1", ["car"]],
            ["t2", "w2", ["car", "human"]],
            ["t2", "w3", ["train"]],
        ],
        columns=["task", "worker", "label"],
    )
    got = ck.BinaryRelevance(base_aggregator=base()).fit_predict(data)
    want = pd.Series(
        [["house", "tree"], ["car"]], pd.Index(["t1", "t2"], name="task"), name="agg_label"
    )
    assert_series_equal(got.map(sorted), want)
    assert all(isinstance(value, list) for value in got)


# --- constructor parameters and attributes --------------------------------------------------------

DEFAULTS = {
    "MajorityVote": {"default_skill": None, "on_missing_skill": "error"},
    "ZeroBasedSkill": {
        "n_iter": 100,
        "lr_init": 1.0,
        "lr_steps_to_reduce": 20,
        "lr_reduce_factor": 0.5,
        "eps": 1e-5,
    },
    "DawidSkene": {"n_iter": 100, "tol": 1e-5, "initial_error_strategy": None},
    "OneCoinDawidSkene": {"n_iter": 100, "tol": 1e-5, "initial_error_strategy": None},
    "GLAD": {"n_iter": 100, "tol": 1e-5, "silent": True, "m_step_max_iter": 25, "m_step_tol": 1e-2},
    "MACE": {
        "n_restarts": 10,
        "n_iter": 50,
        "method": "vb",
        "smoothing": 0.1,
        "default_noise": 0.5,
        "random_state": 0,
    },
    "KOS": {"n_iter": 100, "random_state": 0},
    "MMSR": {"n_iter": 10000, "tol": 1e-10, "random_state": 0},
}
CHANGED = {  # n_iter / random_state set, and the fixture still gets its published labels
    "ZeroBasedSkill": {"n_iter": 50},
    "DawidSkene": {"n_iter": 5, "tol": 0.0},
    "OneCoinDawidSkene": {"n_iter": 5, "tol": 0.0},
    "GLAD": {"n_iter": 20, "tol": 1e-6},
    "MACE": {"n_restarts": 1, "n_iter": 5, "method": "vb", "random_state": 0},
    "KOS": {"n_iter": 10, "random_state": 0},
    "MMSR": {"n_iter": 5000, "random_state": 3},
    "ZenCrowd": {"n_iter": 20, "tol": 1e-6},
    "MinimaxEntropy": {"n_iter": 20, "tol": 1e-6},
}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_defaults_as_crowdkit(name):
    est = getattr(ck, name)()
    assert {key: getattr(est, key) for key in DEFAULTS[name]} == DEFAULTS[name]


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_n_iter_and_random_state_accepted(name):
    est = getattr(ck, name)(**CHANGED[name])
    assert {key: getattr(est, key) for key in CHANGED[name]} == CHANGED[name]
    data = BOOL_ANSWERS if name == "KOS" else answers("simple")
    want = ground_truth("simple") if name != "KOS" else pd.Series([True, True], name="agg_label")
    assert list(est.fit_predict(data).sort_index()) == list(want.sort_index())


@pytest.mark.parametrize("name", [*ALL, "KOS", "BinaryRelevance"])
def test_every_listed_attribute_is_readable(name):
    est = getattr(ck, name)()
    data = BOOL_ANSWERS if name == "KOS" else answers("toy")
    if name == "BinaryRelevance":
        data = data.assign(label=data["label"].map(lambda label: [label]))
    if name == "GoldMajorityVote":
        est.fit(data, gold("toy"))
    else:
        est.fit(data)
    for attr in dir(est):
        if not attr.startswith("__"):
            getattr(est, attr)  # raises if a listed name cannot be read


# --- against crowd-kit itself, where it is installed ---------------------------------------

CATEGORICAL = ["duchenne", "web", "adult_content", "sentiment", "dog"]
# Lower bounds on the share of tasks with crowd-kit's label at each tool's defaults, from the
# agreement tables of docs/reference.md (smallest over the five datasets, rounded down): ties go
# to a different label in majority vote (0.86-1.00) and Wawa (0.9385 on web); the EM methods stop
# at different steps (DS 0.9533 on adult_content, one-coin 0.9287 on web); MMSR follows the
# authors' code (0.9255 on duchenne); ZBS and KOS agree everywhere.
AGREEMENT = {
    "MajorityVote": 0.85,
    "Wawa": 0.93,
    "ZeroBasedSkill": 0.999,
    "DawidSkene": 0.95,
    "OneCoinDawidSkene": 0.92,
    "KOS": 0.999,
    "MMSR": 0.92,
}


def agreement(name: str, data: pd.DataFrame) -> float:
    crowdkit = pytest.importorskip("crowdkit.aggregation")
    theirs = getattr(crowdkit, name)().fit_predict(data)
    ours = getattr(ck, name)().fit_predict(data)
    return float((ours.loc[theirs.index].astype(str) == theirs.astype(str)).mean())


@pytest.mark.parametrize("dataset", ["toy", "simple"])
@pytest.mark.parametrize(
    "name", ["Wawa", "ZeroBasedSkill", "DawidSkene", "OneCoinDawidSkene", "GLAD", "MACE", "MMSR"]
)
def test_same_labels_as_crowdkit_on_fixtures(name, dataset):
    pytest.importorskip("crowdkit")
    assert agreement(name, answers(dataset)) == 1.0


@pytest.mark.parametrize("dataset", CATEGORICAL)
@pytest.mark.parametrize("name", sorted(AGREEMENT))
def test_agreement_with_crowdkit_on_bundled_data(name, dataset):
    pytest.importorskip("crowdkit")
    data = datasets.load(dataset).answers.to_frame().rename(columns={"answer": "label"})
    if name == "KOS" and data["label"].nunique() != 2:
        pytest.skip("KOS is for two labels only")
    if (name, dataset) == ("MMSR", "adult_content"):
        pytest.skip("crowd-kit's MMSR takes about 100 s here")
    assert agreement(name, data) >= AGREEMENT[name]
