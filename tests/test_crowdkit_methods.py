"""Wawa, ZeroBasedSkill, KOS, MMSR, BinaryRelevance and crowd-kit's attribute names: hand-worked
3 x 3 cases, independent re-computations, and agreement with crowd-kit 1.4.2's stored labels
(tests/reference/crowdkit/ckit2_*, made by benchmarks/bench_crowdkit_methods.py)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privtd import Answers, datasets
from privtd.datasets import make_categorical
from privtd.errors import ConvergenceWarning, NotFittedError, SchemaError, ValidationError
from privtd.inference import (
    KOS,
    MMSR,
    BinaryRelevance,
    DawidSkene,
    MajorityVote,
    Wawa,
    ZeroBasedSkill,
)
from privtd.inference._skill_vote import skill_votes
from privtd.inference.mmsr import rank_one_distance, trimmed_means

REFERENCE = Path(__file__).parent / "reference" / "crowdkit"
CATEGORICAL = ["duchenne", "web", "adult_content", "sentiment", "dog"]

# The 3 x 3 instance of the hand-worked cases (labels a < b):
#        w1  w2  w3
#   t1   a   a   b
#   t2   b   b   a
#   t3   a   b   b
# Majority vote: t1 = a (2:1), t2 = b (2:1), t3 = b (2:1).
# Agreement with it: w1 2/3 (t1, t2), w2 3/3, w3 1/3 (t3).
HAND = pd.DataFrame(
    {
        "task": ["t1"] * 3 + ["t2"] * 3 + ["t3"] * 3,
        "worker": ["w1", "w2", "w3"] * 3,
        "answer": list("aab" + "bba" + "abb"),
    }
)


def test_wawa_by_hand():
    # Skill-weighted votes: t1 a = 2/3 + 1 = 5/3 vs b = 1/3 -> a, share 5/6;
    # t2 b = 5/3 vs a = 1/3 -> b; t3 a = 2/3 vs b = 1 + 1/3 = 4/3 -> b, share 2/3.
    est = Wawa().fit(HAND)
    assert est.truths_.tolist() == ["a", "b", "b"]
    np.testing.assert_allclose(est.skills_, [2 / 3, 1, 1 / 3])
    np.testing.assert_allclose(est.probas_["a"], [5 / 6, 1 / 6, 1 / 3])


def test_zero_based_skill_by_hand():
    # Start 1/2 + 1e-5 for all: the first vote is the majority vote. With lr_init = 1/2 one
    # step moves each skill half-way to its agreement: (0.50001 + [2/3, 1, 1/3]) / 2.
    with pytest.warns(ConvergenceWarning):
        one = ZeroBasedSkill(lr_init=0.5, max_iter=1, tol=0.0).fit(HAND)
    np.testing.assert_allclose(one.skills_, (0.50001 + np.array([2 / 3, 1, 1 / 3])) / 2)
    assert one.truths_.tolist() == ["a", "b", "b"]
    # With lr 1 the second vote is Wawa's, which agrees with the first: the skills stop at
    # the agreements after step 2, which moves nothing.
    est = ZeroBasedSkill().fit(HAND)
    assert est.n_iter_ == 2 and est.converged_
    np.testing.assert_allclose(est.skills_, [2 / 3, 1, 1 / 3])
    assert est.loss_history_[-1] == 0.0


def test_kos_by_hand():
    # w1 and w2 agree everywhere, w3 says the opposite (c_t = A_t,w1 = A_t,w2 = -A_t,w3).
    # With worker messages p (w1, w2) and q (w3): x_t->w1 = c (p - q), x_t->w3 = 2 c p, and
    # y_w1 = sum over 2 other tasks c^2 (p - q) = 2 (p - q), y_w3 = -4 p. The map
    # [[2, -2], [-4, 0]] has eigenvalues 4 and -2; the dominant eigenvector has q = -p, so
    # w1, w2 end positive, w3 negative, with equal magnitude (reliability sum_t A x: 6p, -6p),
    # and every task follows w1 and w2 (score 3 c p).
    frame = pd.DataFrame(
        {
            "task": ["t1"] * 3 + ["t2"] * 3 + ["t3"] * 3,
            "worker": ["w1", "w2", "w3"] * 3,
            "answer": list("aab" + "bba" + "aab"),
        }
    )
    est = KOS(rng=0).fit(frame)
    assert est.truths_.tolist() == ["a", "b", "a"]
    np.testing.assert_allclose(est.weights_["weight"], [1.0, 1.0, -1.0], atol=1e-6)
    assert est.converged_


def test_kos_scaling_keeps_the_papers_signs():
    # The paper's unscaled recursion, written edge by edge, gives the same labels after each
    # number of iterations as the scaled vectorised one from the same start.
    answers, _, _ = make_categorical(30, 8, 2, answers_per_task=4, rng=5)
    t, w = answers.task, answers.worker
    a = 2.0 * answers.value - 1.0
    start = np.random.default_rng(9).normal(1.0, 1.0, size=answers.n_answers)
    y = start.copy()
    for n_iter in range(1, 6):
        x = np.array(
            [sum(a[f] * y[f] for f in np.flatnonzero(t == t[e]) if f != e) for e in range(len(a))]
        )
        y = np.array(
            [sum(a[f] * x[f] for f in np.flatnonzero(w == w[e]) if f != e) for e in range(len(a))]
        )
        paper = np.sign(np.bincount(t, weights=a * y, minlength=answers.n_tasks))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            ours = KOS(max_iter=n_iter, tol=0.0, rng=np.random.default_rng(9)).fit(answers)
        decided = paper != 0
        assert np.array_equal(2 * ours._truth_codes[decided] - 1, paper[decided])


def test_mmsr_by_hand():
    # K = 2: C_uv = 2 agree_uv - 1. w1, w2 agree on 3/3 (C = 1); w1, w3 and w2, w3 on 0/3
    # (C = -1). Every worker has 2 co-workers: F = floor(2/2) - 1 = 0, no trimming, and M-MSR
    # settles at u_i v_j = |C_ij| = 1, so |s| = 1. Sign graph: edges w1-w3, w2-w3 (negative),
    # w1-m-w2 (the positive pair through a new node m): two-coloured {w1, w2} vs {w3, m};
    # most workers positive, so s = (1, 1, -1). Clipped to 1 -+ 1/sqrt(3) = +-0.4226:
    # p = s/2 + 1/2 = 0.7113, 0.7113, 0.2887, weights log(p / (1 - p)) = +-0.9017.
    frame = pd.DataFrame(
        {
            "task": ["t1"] * 3 + ["t2"] * 3 + ["t3"] * 3,
            "worker": ["w1", "w2", "w3"] * 3,
            "answer": list("aab" + "bba" + "aab"),
        }
    )
    est = MMSR().fit(frame)
    bound = 1.0 - 1.0 / np.sqrt(3.0)
    p = 0.5 + bound / 2.0
    weight = np.log(p / (1.0 - p))
    np.testing.assert_allclose(est.skills_, [weight, weight, -weight], rtol=1e-9)
    np.testing.assert_allclose(est.weights_["accuracy"], [p, p, 1.0 - p], rtol=1e-9)
    assert est.truths_.tolist() == ["a", "b", "a"]
    # Votes for t1: a gets 2 weight, b gets -weight: softmax gives 1 / (1 + exp(-3 weight)).
    assert est.probas_.loc["t1", "a"] == pytest.approx(1.0 / (1.0 + np.exp(-3.0 * weight)))


def test_mmsr_covariance_against_pairs():
    answers, _, _ = make_categorical(40, 7, 3, answers_per_task=3, rng=2)
    cov, common = MMSR.covariance(answers)
    frame = answers.to_frame()
    wide = frame.pivot(index="task", columns="worker", values="answer")
    for i, u in enumerate(answers.workers):
        for j, v in enumerate(answers.workers):
            both = wide[[u, v]].dropna()
            if i == j or both.empty:
                assert cov[i, j] == 0.0
                continue
            agree = (both[u] == both[v]).mean()
            assert common[i, j] == len(both)
            assert cov[i, j] == pytest.approx(1.5 * agree - 0.5)


def _trim_one(values: np.ndarray, f: int, a: float, n_tasks: int) -> np.ndarray:
    """The trim of M-MSR for one group, step by step as the authors' remove.m describes it."""
    y = np.sort(values)
    y = y[y >= a] if (y < a).sum() < f else y[f:]
    y = y[y <= a] if (y > a).sum() < f else y[: len(y) - f]
    if len(y) == 1 and y[0] == 0:
        y = np.array([1.0 / np.sqrt(n_tasks)])
    return y


@pytest.mark.parametrize("f", [0, 1, 2, 3])
def test_trimmed_means_match_one_group_at_a_time(f):
    gen = np.random.default_rng(f)
    group = gen.integers(0, 12, size=200)
    values = gen.exponential(size=200)
    values[:5] = 0.0
    current = gen.exponential(size=12)
    ours = trimmed_means(group, values, current, f, 12, 50)
    for g in range(12):
        kept = _trim_one(values[group == g], f, current[g], 50)
        assert ours[g] == pytest.approx(kept.mean() if len(kept) else current[g])


def test_mmsr_trims_by_the_fewest_coworkers():
    """Every worker answers every task, so each has 7 co-workers and F = floor(7/2) - 1 = 2:
    M-MSR written worker by worker with the authors' trim (``_trim_one``), from the same start
    and for the same steps, gives the estimator's accuracies. Until this test, F was always 0
    (``min(initial=0)`` capped the fewest co-workers at 0) and nothing was trimmed."""
    answers, _, _ = make_categorical(30, 8, 3, answers_per_task=8, rng=4)
    cov, common = MMSR.covariance(answers)
    n_w, k, n_t = answers.n_workers, answers.n_labels, answers.n_tasks
    gen = np.random.default_rng(3)
    u, v = gen.uniform(size=n_w), gen.uniform(size=n_w)
    x = np.abs(cov)
    for _ in range(6):
        for j in range(n_w):
            kept = _trim_one(np.delete(x[:, j] / u, j), 2, v[j], n_t)
            v[j] = kept.mean() if len(kept) else v[j]
        for i in range(n_w):
            kept = _trim_one(np.delete(x[i, :] / v, i), 2, u[i], n_t)
            u[i] = kept.mean() if len(kept) else u[i]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = MMSR(max_iter=6, tol=0.0, rng=3).fit(answers)
    s = u * np.sqrt(np.linalg.norm(v) / np.linalg.norm(u))
    s *= est.signs(cov, common, np.random.default_rng(0))
    s = np.clip(s, -1.0 / (k - 1) + 1.0 / np.sqrt(n_t), 1.0 - 1.0 / np.sqrt(n_t))
    assert common[~np.eye(n_w, dtype=bool)].min() > 0  # 7 co-workers each
    np.testing.assert_allclose(est.weights_["accuracy"], s * (k - 1) / k + 1.0 / k, rtol=1e-12)


def test_rank_one_distance():
    gen = np.random.default_rng(0)
    u, v, a, b = gen.normal(size=(4, 9))
    assert rank_one_distance(u, v, a, b) == pytest.approx(
        np.linalg.norm(np.outer(u, v) - np.outer(a, b))
    )
    assert rank_one_distance(u, v, u, v) == 0.0


def _reference(name: str, tasks: pd.Index) -> pd.DataFrame:
    ref = pd.read_csv(REFERENCE / f"ckit2_{name}.csv.gz", dtype={"task": str}).set_index("task")
    return ref.loc[tasks.astype(str)]


def _tie_ordered(name: str, answers: Answers) -> tuple[Answers, np.ndarray]:
    """``answers`` recoded so that our first label is crowd-kit's first column (its
    ``idxmax`` breaks ties in value_counts order, not sorted order)."""
    order = json.loads((REFERENCE / "ckit2_tie_order.json").read_text())[name]
    rank = {label: i for i, label in enumerate(order)}
    codes = np.array([rank[label] for label in answers.labels])
    recoded = Answers(
        task=answers.task,
        worker=answers.worker,
        value=codes[answers.value],
        tasks=answers.tasks,
        workers=answers.workers,
        labels=pd.Index(range(len(order))),
    )
    return recoded, np.array(order)


def _agree(ours: np.ndarray, ref: pd.Series) -> float:
    return float((ours.astype(str) == ref.astype(str).to_numpy()).mean())


@pytest.mark.parametrize("name", CATEGORICAL)
def test_wawa_matches_crowdkit(name):
    """With crowd-kit's tie order for the first (plain) vote, Wawa gives crowd-kit's labels on
    >= 99.5% of tasks (crowd-kit's weighted votes go through a groupby, so their ties, which
    float sums make rare, go to the smallest label as ours do)."""
    answers, order = _tie_ordered(name, datasets.load(name).answers)
    ref = _reference(name, answers.tasks)
    assert _agree(order[Wawa().fit(answers)._truth_codes], ref["wawa"]) >= 0.995


@pytest.mark.parametrize("name", CATEGORICAL)
def test_zero_based_skill_matches_crowdkit(name):
    """At its default stop, ZeroBasedSkill gives crowd-kit's labels (after its 100 steps) on
    >= 99.5% of tasks: every crowd-kit vote here is weighted, so ties go to the smallest label
    on both sides."""
    answers = datasets.load(name).answers
    ref = _reference(name, answers.tasks)
    assert _agree(ZeroBasedSkill().fit(answers).truths_.to_numpy(), ref["zbs"]) >= 0.995


@pytest.mark.parametrize("name", ["duchenne", "sentiment"])
def test_kos_matches_crowdkit(name):
    answers = datasets.load(name).answers
    ref = _reference(name, answers.tasks)
    assert _agree(KOS().fit(answers).truths_.to_numpy(), ref["kos"]) >= 0.995


@pytest.mark.parametrize("name", CATEGORICAL)
def test_mmsr_near_crowdkit(name):
    """crowd-kit departs from the authors' code in two places (docs/inference.md, MMSR); with
    those, 92.5% of labels agree on duchenne and 96-99% elsewhere."""
    answers = datasets.load(name).answers
    ref = _reference(name, answers.tasks)
    assert _agree(MMSR().fit(answers).truths_.to_numpy(), ref["mmsr"]) >= 0.92


class _CrowdKitConventionsMMSR(MMSR):
    """crowd-kit's two departures put back (as benchmarks/bench_crowdkit_methods.py's class of
    that name): pairs with no common task and the diagonal read as covariance -1/(K-1) in the
    sign graph; the label is the arg-max of the weighted votes divided by their sum."""

    def _fit(self, answers, gold):
        self._k = answers.n_labels
        super()._fit(answers, gold)
        scores = skill_votes(answers, self.weights_["weight"].to_numpy())
        with np.errstate(divide="ignore", invalid="ignore"):
            share = scores / scores.sum(axis=1, keepdims=True)
        self.truths_ = pd.Series(answers.labels.take(share.argmax(axis=1)), index=answers.tasks)

    def signs(self, cov, common, rng):
        return super().signs(np.where(common > 0, cov, -1.0 / (self._k - 1)), common, rng)


@pytest.mark.parametrize("name", CATEGORICAL)
def test_mmsr_with_crowdkits_conventions_matches_it(name):
    """With crowd-kit's two departures put back and its number of steps, MMSR gives crowd-kit's
    skills (to 1e-8; our start differs from its u = v, both reach the same point) and >= 99.5%
    of its labels."""
    answers = datasets.load(name).answers
    ref = _reference(name, answers.tasks)
    skills = pd.read_csv(
        REFERENCE / f"ckit2_{name}_mmsr_skills.csv.gz", dtype={"worker": str}
    ).set_index("worker")["skill"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = _CrowdKitConventionsMMSR(max_iter=int(ref["mmsr_n_iter"].iloc[0]), tol=0.0)
        est.fit(answers)
    np.testing.assert_allclose(
        est.skills_.to_numpy(), skills.loc[answers.workers.astype(str)].to_numpy(), atol=1e-8
    )
    assert _agree(est.truths_.to_numpy(), ref["mmsr"]) >= 0.995


def test_kos_is_binary(three_labels):
    with pytest.raises(ValidationError, match="KOS is binary; these answers have 3 labels"):
        KOS().fit(three_labels)


# ---------------------------------------------------------------- crowd-kit's attribute names
def test_crowdkit_attribute_names(dog_answers):
    answers = dog_answers
    ds = DawidSkene().fit(answers)
    assert ds.labels_ is ds.truths_
    pd.testing.assert_series_equal(
        ds.skills_, ds.weights_["weight"].rename("skill"), check_names=False
    )
    assert ds.skills_.name == "skill"
    assert ds.loss_history_ == ds.objective_.tolist()
    errors = ds.errors_
    assert errors.index.names == ["worker", "label"]
    assert errors.shape == (answers.n_workers * answers.n_labels, answers.n_labels)
    # Each (worker, true label) column of a block is a distribution over the given label.
    np.testing.assert_allclose(errors.groupby(level="worker").sum().to_numpy(), 1.0)
    w = answers.workers[3]
    assert errors is ds.confusions_
    cube = ds.confusions_.to_numpy().reshape(answers.n_workers, answers.n_labels, -1)
    np.testing.assert_allclose(errors.loc[w].to_numpy(), cube[3])
    # Rows are the label given, columns the truth: the [worker, answer, truth] cube.
    assert errors.columns.name == "truth"
    assert MajorityVote().fit(answers).errors_ is None
    with pytest.raises(NotFittedError):
        _ = DawidSkene().errors_
    with pytest.raises(NotFittedError):
        _ = Wawa().skills_
    np.testing.assert_allclose(
        MajorityVote().fit_predict_proba(answers).to_numpy(), MajorityVote().fit(answers).probas_
    )


# ---------------------------------------------------------------- multi-label
MULTI = pd.DataFrame(
    {
        "task": [1, 1, 1, 2, 2, 2],
        "worker": ["a", "b", "c", "a", "b", "c"],
        "label": [["cat"], ["cat", "dog"], ("cat", "dog"), [], {"dog"}, ["bird"]],
    }
)


def test_binary_relevance_by_hand():
    # cat: task 1 (3 of 3 yes), task 2 (0 of 3) -> {cat} on 1 only; dog: task 1 2 of 3,
    # task 2 1 of 3; bird: task 2 1 of 3. Majority per label: 1 -> {cat, dog}, 2 -> {}.
    est = BinaryRelevance("mv").fit(MULTI)
    assert est.truths_.tolist() == [{"cat", "dog"}, set()]
    assert est.labels_ is est.truths_
    np.testing.assert_allclose(est.probas_.loc[1, ["bird", "cat", "dog"]], [0, 1, 2 / 3])
    assert set(est.estimators_) == {"bird", "cat", "dog"}
    assert list(est.weights_.columns) == ["bird", "cat", "dog", "n_answers"]
    gold = BinaryRelevance("mv").fit(MULTI, gold={2: ["bird"]})
    assert gold.truths_.tolist() == [{"cat", "dog"}, {"bird"}]


def test_binary_relevance_over_an_em_method_recovers_labels():
    # Three independent binary labels from one-coin workers of accuracy U(0.7, 0.95), 5 answers
    # per task. A plain majority of 5 workers at the mean accuracy 0.825 errs with probability
    # P(Bin(5, 0.175) >= 3) = 0.0405; DS weighs workers, so does no worse in expectation. Over
    # 300 tasks the error rate's sd is sqrt(0.0405 * 0.96 / 300) = 0.0114: each label's
    # accuracy must reach 1 - 0.0405 - 3 sd = 0.925.
    gen = np.random.default_rng(4)
    n_t, n_w, labels = 300, 20, ["x", "y", "z"]
    truth = gen.random((n_t, 3)) < 0.4
    acc = gen.uniform(0.7, 0.95, size=n_w)
    rows = []
    for t in range(n_t):
        for w in gen.choice(n_w, size=5, replace=False):
            flip = gen.random(3) > acc[w]
            chosen = truth[t] ^ flip
            rows.append((t, w, [lab for lab, c in zip(labels, chosen, strict=True) if c]))
    frame = pd.DataFrame(rows, columns=["task", "worker", "answer"])
    est = BinaryRelevance("ds").fit(frame)
    found = est.truths_.loc[range(n_t)]
    for j, label in enumerate(labels):
        has = found.map(lambda chosen, label=label: label in chosen).to_numpy()
        assert (has == truth[:, j]).mean() >= 0.925, label
        # Each label is exactly the binary method's fit on "did the worker choose it?".
        binary = frame["answer"].map(lambda chosen, label=label: label in chosen)
        alone = DawidSkene().fit(frame.assign(answer=binary))
        assert np.array_equal(alone.truths_.loc[range(n_t)].to_numpy(), has)


def test_binary_relevance_errors():
    with pytest.raises(SchemaError, match="lacks column"):
        BinaryRelevance().fit(MULTI.drop(columns="worker"))
    with pytest.raises(ValidationError, match="empty"):
        BinaryRelevance().fit(MULTI.iloc[:0])
    with pytest.raises(ValidationError, match="No worker chose any label"):
        BinaryRelevance().fit(MULTI.assign(label=[[]] * 6))
    with pytest.raises(ValidationError, match="no worker chose"):
        BinaryRelevance().fit(MULTI, gold={1: ["fish"]})
    with pytest.raises(NotFittedError):
        _ = BinaryRelevance().truths_
    with pytest.raises(ValidationError, match="Unknown method"):
        BinaryRelevance("nope").fit(MULTI)


def _cli(args, capsys):
    from privtd.cli import main

    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_multi_label(tmp_path, capsys):
    src = tmp_path / "ml.csv"
    src.write_text(
        "task,worker,answer\n1,a,cat\n1,b,cat|dog\n1,c,cat|dog\n2,a,\n2,b,dog\n2,c,bird\n"
    )
    out, probas = tmp_path / "out.csv", tmp_path / "p.csv"
    args = ["infer", str(src), "-m", "mv", "--multi-label", "|", "-o", str(out)]
    code, _, err = _cli([*args, "--probas-output", str(probas)], capsys)
    assert code == 0, err
    truths = pd.read_csv(out, keep_default_na=False)
    assert truths["truth"].tolist() == ["cat|dog", ""]
    assert pd.read_csv(probas, index_col="task").loc[1, "dog"] == pytest.approx(2 / 3)
    code, _, err = _cli([*args, "-M", "one-layer", "-e", "1"], capsys)
    assert code != 0 and "--multi-label needs --method" in err and "Traceback" not in err


def test_majority_vote_skills_are_each_workers_agreement_with_the_majority():
    # t1: a a b -> a; t2: b a b -> b; t3: a a a -> a. w1 agrees 3/3, w2 and w3 2/3.
    frame = pd.DataFrame(
        {
            "task": ["t1", "t1", "t1", "t2", "t2", "t2", "t3", "t3", "t3"],
            "worker": ["w1", "w2", "w3"] * 3,
            "answer": ["a", "a", "b", "b", "a", "b", "a", "a", "a"],
        }
    )
    mv = MajorityVote().fit(frame)
    assert mv.skills_.to_dict() == pytest.approx({"w1": 1.0, "w2": 2 / 3, "w3": 2 / 3})
    assert mv.skills_.name == "skill" and mv.skills_.index.name == "worker"
    assert (mv.weights_["weight"] == 1.0).all()  # the vote weight stays 1 for everyone
