"""Minimax entropy (Zhou et al., NIPS 2012): the M-step's gradient against finite differences,
the fitted posteriors and objective against a brute-force enumeration on a tiny instance, EM's
ascent, gold, the Dawid-Skene limit, accuracy on bundled data, and the CLI."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_runner import run_cli
from privtd import Answers, ValidationError, datasets
from privtd.datasets import make_categorical
from privtd.errors import ConvergenceWarning
from privtd.inference import DawidSkene, MajorityVote, MinimaxEntropy
from privtd.inference import minimax_entropy as mm
from privtd.inference._ops import shares, vote_matrix

K = 3
# reports[task][worker]; worker w3 skips task t2, so the tasks differ in size.
REPORTS = [[0, 0, 1, 0], [2, 1, 1, 2], [0, 2, 2, None]]


def tiny() -> Answers:
    rows = [
        (f"t{q}", f"w{u}", r)
        for q, row in enumerate(REPORTS)
        for u, r in enumerate(row)
        if r is not None
    ]
    return Answers.from_frame(pd.DataFrame(rows, columns=["task", "worker", "answer"]))


def fitted(answers, **params) -> MinimaxEntropy:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return MinimaxEntropy(**params).fit(answers)


@pytest.mark.parametrize("scale", [0.7, 400.0])
def test_gradient_matches_finite_differences(scale, monkeypatch):
    # scale 400 puts |sigma| + |tau| past the bound where exp() is taken unshifted, so both
    # paths of the normaliser are checked.
    answers = tiny()
    model = mm._Model(answers)
    model.set_penalties(0.3, 1.7)
    gen = np.random.default_rng(5)
    x = gen.normal(size=model.size) * scale
    mu = gen.dirichlet(np.ones(K), size=answers.n_tasks)
    lin = model.linear_part(mu)
    value, grad = model.negative_q(x, mu, lin)
    h = 1e-6 * max(scale, 1.0)
    numeric = np.empty(model.size)
    for i in range(model.size):
        step = np.zeros(model.size)
        step[i] = h
        numeric[i] = (
            model.negative_q(x + step, mu, lin)[0] - model.negative_q(x - step, mu, lin)[0]
        ) / (2 * h)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7 * max(scale, 1.0))
    # The shifted and the unshifted normaliser agree where both are safe.
    if scale < 1:
        monkeypatch.setattr(mm, "_SAFE_LOGIT", 0.0)
        shifted_value, shifted_grad = model.negative_q(x, mu, lin)
        assert shifted_value == pytest.approx(value, rel=1e-12)
        np.testing.assert_allclose(shifted_grad, grad, rtol=1e-10, atol=1e-15)


def brute_force(est: MinimaxEntropy, answers: Answers, gold: dict | None = None):
    """Posteriors and the penalised log marginal likelihood per answer, from the fitted
    ``sigmas_`` and ``taus_``, by enumerating every task's truth with explicit loops."""
    sigma, tau = est.sigmas_, est.taus_
    labels = list(answers.labels)
    posts, loglik = {}, 0.0
    for q, row in enumerate(REPORTS):
        task = f"t{q}"
        j = answers.tasks.get_loc(task)
        joint = np.zeros(K)
        for c in range(K):
            p = 1.0 / K
            for u, r in enumerate(row):
                if r is None:
                    continue
                i = answers.workers.get_loc(f"w{u}")
                logits = [sigma[i, c, k] + tau[j, c, k] for k in range(K)]
                z = sum(np.exp(v) for v in logits)
                p *= np.exp(logits[labels.index(r)]) / z
            joint[c] = p
        if gold and task in gold:
            keep = labels.index(gold[task])
            loglik += np.log(joint[keep])
            joint = np.eye(K)[keep]
        else:
            loglik += np.log(joint.sum())
        posts[task] = joint / joint.sum()
    penalty = 0.5 * (est.beta_ * (sigma**2).sum() + est.alpha_ * (tau**2).sum())
    return pd.DataFrame(posts).T, (loglik - penalty) / answers.n_answers


@pytest.mark.parametrize("gold", [None, {"t1": 0}])
def test_posteriors_and_objective_are_the_brute_force(gold):
    answers = tiny()
    est = MinimaxEntropy(alpha=0.5, beta=0.8, max_iter=200, tol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(answers, gold=gold)
    posts, objective = brute_force(est, answers, gold)
    probas = est.probas_.loc[posts.index]
    np.testing.assert_allclose(probas.to_numpy(), posts.to_numpy(), rtol=1e-10, atol=1e-12)
    assert est.objective_[-1] == pytest.approx(objective, rel=1e-10)
    # Each worker's confusion at tau = 0 is softmax_k sigma[c, k], laid out as DawidSkene's.
    cube = est.confusions_.to_numpy().reshape(answers.n_workers, K, K)  # [worker, answer, truth]
    soft = np.exp(est.sigmas_) / np.exp(est.sigmas_).sum(axis=2, keepdims=True)
    np.testing.assert_allclose(cube, soft.transpose(0, 2, 1), rtol=1e-12)
    assert est.errors_ is est.confusions_
    shares = est.probas_.to_numpy().mean(axis=0)
    accuracy = (np.diagonal(soft, axis1=1, axis2=2) * shares).sum(axis=1)
    np.testing.assert_allclose(est.weights_["weight"], accuracy, rtol=1e-12)


@pytest.mark.parametrize("name", ["synthetic", "dog"])
def test_objective_never_decreases(name):
    if name == "dog":
        answers = datasets.load("dog").answers
    else:
        answers, _, _ = make_categorical(300, 25, 3, answers_per_task=5, rng=11)
    est = fitted(answers, tol=0.0, max_iter=15)
    assert est.n_iter_ == 15
    # Generalised EM: each M-step raises Q (L-BFGS-B descends from the previous point), so
    # the penalised marginal likelihood never falls; 1e-12 per answer is rounding.
    assert (np.diff(est.objective_) >= -1e-12).all(), np.diff(est.objective_).min()


def test_gold_tasks_keep_their_truth():
    answers, truth, _ = make_categorical(150, 12, 3, answers_per_task=5, rng=4)
    plain = fitted(answers)
    # Gold that contradicts the fit on 10 tasks: each must keep its gold label.
    tasks = plain.truths_.index[:10]
    gold = {t: (plain.truths_[t] + 1) % 3 for t in tasks}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = MinimaxEntropy().fit(answers, gold=gold)
    assert all(est.truths_[t] == g for t, g in gold.items())
    for t, g in gold.items():
        assert est.probas_.loc[t, g] == 1.0


def dawid_skene_uniform_prior(answers: Answers, n_iter: int = 2000):
    """Reference: Dawid-Skene's EM with the class prior fixed uniform (the minimax model's),
    from the soft majority vote; returns posteriors and confusions [worker, truth, answer]."""
    t, w, r = answers.task, answers.worker, answers.value
    k, n_w = answers.n_labels, answers.n_workers
    mu = shares(vote_matrix(answers.task, answers.value, answers.n_tasks, answers.n_labels))
    for _ in range(n_iter):
        counts = np.zeros((n_w, k, k))
        np.add.at(counts, (w, slice(None), r), mu[t])
        conf = counts / counts.sum(axis=2, keepdims=True)
        scores = np.zeros((answers.n_tasks, k))
        np.add.at(scores, t, np.log(np.maximum(conf, 1e-300))[w, :, r])
        mu = np.exp(scores - scores.max(axis=1, keepdims=True))
        mu /= mu.sum(axis=1, keepdims=True)
    return mu, conf


def test_strong_task_penalty_gives_a_dawid_skene_model():
    # A clean crowd (one-coin workers, uniform truths). With tau pinned at 0 by a huge alpha
    # and a weak penalty on sigma, the model is Dawid-Skene with confusions softmax(sigma)
    # and a uniform prior: the fit must be that EM's fixed point. The unpreconditioned M-step
    # failed this (its few L-BFGS-B steps barely moved sigma against alpha = 1e8).
    answers, _, _ = make_categorical(600, 30, 3, answers_per_task=7, accuracy=(0.55, 0.9), rng=2)
    est = fitted(answers, alpha=1e8, beta=1e-3, tol=1e-10, max_iter=1000)
    assert est.converged_
    assert np.abs(est.taus_).max() < 1e-5
    mu, conf = dawid_skene_uniform_prior(answers)
    probas = est.probas_.to_numpy()
    assert (probas.argmax(axis=1) == mu.argmax(axis=1)).all()
    # beta = 1e-3 shrinks sigma a little: confusions within 0.01, posteriors within 0.05.
    cube = est.confusions_.to_numpy().reshape(answers.n_workers, 3, 3).transpose(0, 2, 1)
    assert np.abs(cube - conf).max() < 0.01
    assert np.abs(probas - mu).max() < 0.05
    # privtd's DawidSkene fits the prior too: near-ties may go the other way, at most 2%.
    ds = DawidSkene(tol=1e-8, max_iter=500).fit(answers)
    assert (est.truths_ == ds.truths_).mean() >= 0.98


@pytest.mark.parametrize("name", ["sentiment", "dog"])
def test_accuracy_at_least_majority_vote(name):
    data = datasets.load(name)
    truth = data.truth

    def accuracy(est):
        pred = est.fit(data.answers).truths_.loc[truth.index]
        return float((pred.to_numpy() == truth.to_numpy()).mean())

    mv = accuracy(MajorityVote(tie_break="first"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ours = accuracy(MinimaxEntropy())
    # Tolerance: one standard error of an accuracy near mv's on this many truths.
    tolerance = np.sqrt(mv * (1 - mv) / len(truth))
    assert ours >= mv - tolerance, (ours, mv, tolerance)


def test_parameters_are_checked():
    answers = tiny()
    for bad in ({"alpha": 0.0}, {"beta": -1.0}, {"m_step_max_iter": 0}, {"m_step_tol": 0.0}):
        with pytest.raises(ValidationError, match="MinimaxEntropy"):
            MinimaxEntropy(**bad).fit(answers)


def test_default_penalties_are_the_authors_rule(dog_answers):
    answers = dog_answers
    est = fitted(answers, max_iter=2)
    k = answers.n_labels
    assert est.beta_ == k * k / 4
    assert est.alpha_ == pytest.approx(est.beta_ * answers.n_tasks / answers.n_workers)


def test_start_is_the_majority_vote_shares():
    # Before any M-step, sigma = tau = 0 and the first M-step reads the soft majority vote:
    # its expected counts are the linear term at that start.
    answers = tiny()
    model = mm._Model(answers)
    mu = shares(vote_matrix(answers.task, answers.value, answers.n_tasks, answers.n_labels))
    lin = model.linear_part(mu)
    sigma_counts, tau_counts = model.split(lin)
    for (q, row), c in itertools.product(enumerate(REPORTS), range(K)):
        j = answers.tasks.get_loc(f"t{q}")
        for k in range(K):
            expected = sum(mu[j, c] for r in row if r is not None and r == k)
            assert tau_counts[j, c, k] == pytest.approx(expected)
    assert sigma_counts.sum() == pytest.approx(answers.n_answers)


def test_cli_infers_with_minimax(tmp_path, capsys, dog_truth):
    code, _, _ = run_cli(["datasets", "export", "dog", "-o", str(tmp_path / "dog")], capsys)
    assert code == 0
    out, workers = tmp_path / "t.csv", tmp_path / "w.csv"
    args = ["infer", str(tmp_path / "dog" / "answers.csv"), "-m", "minimax", "-o", str(out)]
    code, _, err = run_cli([*args, "--workers-output", str(workers), "-P", "beta=2"], capsys)
    assert code == 0, err
    truths = pd.read_csv(out)
    assert list(truths.columns) == ["task", "truth"] and len(truths) == 807
    assert {"worker", "weight", "n_answers"} <= set(pd.read_csv(workers).columns)
    truth = dog_truth
    pred = truths.set_index("task")["truth"].loc[truth.index.astype(type(truths["task"][0]))]
    assert (pred.to_numpy() == truth.to_numpy()).mean() > 0.8


ROOT = Path(__file__).resolve().parents[1]
DOC_ROWS = {
    "duchenne": "Duchenne (159 truths)",
    "web": "Web",
    "adult_content": "AdultContent (333 truths)",
    "sentiment": "Sentiment",
    "dog": "Dog",
}


def test_docs_table_quotes_the_stored_benchmark():
    stored = (ROOT / "benchmarks" / "results" / "minimax_entropy.txt").read_text()
    doc = (ROOT / "docs" / "inference.md").read_text()
    for name, label in DOC_ROWS.items():
        line = next(row for row in stored.splitlines() if row.startswith(name + " "))
        fields = line.replace("|", " ").split()
        mv, ds, ds_time, mm, mm_iter, mm_time = (
            fields[6],
            fields[7],
            fields[9],
            fields[10],
            fields[11],
            fields[13],
        )
        row = f"| {label} | {mv} | {ds} | {mm} | {mm_iter} | {mm_time} s | {ds_time} s |"
        assert row in doc, row
