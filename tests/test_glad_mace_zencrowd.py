"""GLAD, MACE and ZenCrowd, plain and perturbation-aware: brute force on tiny instances.

Every check enumerates what the model sums over (all truths of 3 tasks x 3 workers, and each
report's own answer through the randomized-response channel) and compares with the fit."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from privtd import Answers
from privtd.datasets import make_categorical
from privtd.errors import ConvergenceWarning
from privtd.inference import GLAD, MACE, ZenCrowd
from privtd.inference._channel import channel_matrix, report_likelihood
from privtd.mechanisms import OneLayerRR

K = 3
# reports[task][worker]
REPORTS = [[0, 0, 1], [2, 1, 1], [0, 2, 2]]
RR = OneLayerRR(f=0.2, n_labels=K)
# Randomized response is symmetric; an asymmetric channel (patched in) also catches a
# transposed C in the code.
ASYMMETRIC = np.array([[0.7, 0.1, 0.3], [0.2, 0.6, 0.1], [0.1, 0.3, 0.6]])
MECHANISMS = [None, RR, "asymmetric"]


@pytest.fixture(autouse=True)
def _asymmetric(request, monkeypatch):
    if getattr(request.node, "callspec", None) and (
        request.node.callspec.params.get("mechanism") == "asymmetric"
    ):
        for module in ("glad", "mace", "zencrowd"):
            monkeypatch.setattr(
                f"privtd.inference.{module}.channel_matrix", lambda *args: ASYMMETRIC
            )


def tiny() -> Answers:
    rows = [(f"t{q}", f"w{u}", REPORTS[q][u]) for q in range(3) for u in range(3)]
    return Answers.from_frame(pd.DataFrame(rows, columns=["task", "worker", "answer"]))


def channel_of(mechanism) -> np.ndarray:
    if isinstance(mechanism, str):
        return ASYMMETRIC
    c = channel_matrix(mechanism, K, "test")
    return np.eye(K) if c is None else c


def report_given_truth(answer_lik: np.ndarray, channel: np.ndarray) -> np.ndarray:
    """P(r | y) = sum_a C[r, a] P(a | y), by an explicit sum over own answers a."""
    out = np.zeros((K, K))
    for r, a, y in itertools.product(range(K), range(K), range(K)):
        out[r, y] += channel[r, a] * answer_lik[a, y]
    return out


def enumerate_truths(lik) -> tuple[np.ndarray, float]:
    """Posterior marginals and log marginal likelihood by summing over all K^3 truth vectors
    (uniform class prior); ``lik(q, u, y)`` = P(report of worker u on task q | truth y)."""
    marg = np.zeros((3, K))
    total = 0.0
    for truths in itertools.product(range(K), repeat=3):
        p = K**-3.0
        for q, u in itertools.product(range(3), range(3)):
            p *= lik(q, u, truths[q])
        total += p
        for q in range(3):
            marg[q, truths[q]] += p
    return marg / total, float(np.log(total))


def codes(est, answers: Answers) -> tuple[np.ndarray, np.ndarray]:
    """Task and worker positions of the tiny data's t0..t2, w0..w2 in the fit."""
    tasks = answers.tasks.get_indexer([f"t{q}" for q in range(3)])
    workers = answers.workers.get_indexer([f"w{u}" for u in range(3)])
    return tasks, workers


def fit_quiet(est, data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(data, **kwargs)


def one_coin(s: float) -> np.ndarray:
    m = np.full((K, K), (1 - s) / (K - 1))
    np.fill_diagonal(m, s)
    return m


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_glad_posterior_and_objective_by_enumeration(mechanism):
    answers = tiny()
    est = fit_quiet(GLAD(mechanism, max_iter=5, tol=0.0), answers)
    c = channel_of(mechanism)
    alpha = est.weights_["weight"].loc[[f"w{u}" for u in range(3)]].to_numpy()
    beta = est.betas_.loc[[f"t{q}" for q in range(3)]].to_numpy()

    def lik(q, u, y):
        return report_given_truth(one_coin(expit(alpha[u] * beta[q])), c)[REPORTS[q][u], y]

    marg, loglik = enumerate_truths(lik)
    probas = est.probas_.loc[[f"t{q}" for q in range(3)], list(range(K))].to_numpy()
    np.testing.assert_allclose(probas, marg, rtol=1e-9, atol=1e-12)
    log_prior = -0.5 * ((alpha - 1) ** 2).sum() - 0.5 * ((np.log(beta) - 1) ** 2).sum()
    log_prior -= 0.5 * np.log(2 * np.pi) * 6
    assert est.objective_[-1] * 9 == pytest.approx(loglik + log_prior, rel=1e-10)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_glad_fixed_point_zeroes_the_marginal_gradient(mechanism):
    # At an EM fixed point the gradient of the expected complete log-posterior (what the
    # M-step follows, through the channel) equals that of the log marginal posterior, which we
    # differentiate numerically by enumeration.
    answers = tiny()
    est = fit_quiet(
        GLAD(mechanism, max_iter=500, tol=1e-14, m_step_tol=1e-8, m_step_max_iter=200),
        answers,
    )
    c = channel_of(mechanism)
    alpha = est.weights_["weight"].loc[[f"w{u}" for u in range(3)]].to_numpy()
    log_beta = np.log(est.betas_.loc[[f"t{q}" for q in range(3)]].to_numpy())

    def log_posterior(x: np.ndarray) -> float:
        a, b = x[:3], np.exp(x[3:])

        def lik(q, u, y):
            return report_given_truth(one_coin(expit(a[u] * b[q])), c)[REPORTS[q][u], y]

        return enumerate_truths(lik)[1] - 0.5 * ((x - 1) ** 2).sum()

    x = np.concatenate([alpha, log_beta])
    h = 1e-5
    grad = [(log_posterior(x + h * e) - log_posterior(x - h * e)) / (2 * h) for e in np.eye(6)]
    np.testing.assert_allclose(grad, 0.0, atol=1e-4)


def mace_answer_lik(trust: float, spam: float, strategy: np.ndarray) -> np.ndarray:
    """P(a | y) = trust [a = y] + spam xi(a)."""
    return trust * np.eye(K) + spam * strategy[:, None]


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("method", ["em", "vb"])
def test_mace_posterior_and_objective_by_enumeration(mechanism, method):
    answers = tiny()
    est = fit_quiet(MACE(mechanism, method=method, max_iter=4, n_restarts=3), answers)
    c = channel_of(mechanism)
    _, workers = codes(est, answers)
    trust = est.weights_["weight"].to_numpy()[workers]
    strategy = est.strategies_[workers]
    spam = est.weights_["spam"].to_numpy()[workers]
    if method == "em":
        np.testing.assert_allclose(spam, 1 - trust)

    def lik(q, u, y):
        m = mace_answer_lik(trust[u], spam[u], strategy[u])
        return report_given_truth(m, c)[REPORTS[q][u], y]

    marg, loglik = enumerate_truths(lik)
    probas = est.probas_.loc[[f"t{q}" for q in range(3)], list(range(K))].to_numpy()
    np.testing.assert_allclose(probas, marg, rtol=1e-9, atol=1e-12)
    assert est.objective_[-1] * 9 == pytest.approx(loglik, rel=1e-10)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_mace_em_step_by_enumeration(mechanism):
    # One EM step from a given start: the expected counts of earnest answers and of spammed own
    # answers, by enumerating each answer's (truth, earnest or spammed, own answer), then the
    # smoothed normalisation of the reference implementation.
    answers = tiny()
    c = channel_of(mechanism)
    rng = np.random.default_rng(5)
    trust0 = rng.uniform(0.3, 0.9, 3)
    strategy0 = rng.dirichlet(np.ones(K), 3)
    est = MACE(mechanism, max_iter=1, method="em")
    _, workers = codes(est, answers)
    start_trust = np.empty(3)
    start_strategy = np.empty((3, K))
    start_trust[workers] = trust0
    start_strategy[workers] = strategy0
    est._starts = [(start_trust, 1 - start_trust, start_strategy)]
    fit_quiet(est, answers)

    def lik(q, u, y):
        m = mace_answer_lik(trust0[u], 1 - trust0[u], strategy0[u])
        return report_given_truth(m, c)[REPORTS[q][u], y]

    marg, _ = enumerate_truths(lik)
    earnest = np.zeros(3)
    spammed = np.zeros((3, K))
    for q, u in itertools.product(range(3), range(3)):
        r = REPORTS[q][u]
        for y in range(K):
            p_r = lik(q, u, y)
            earnest[u] += marg[q, y] * trust0[u] * c[r, y] / p_r
            for a in range(K):
                spammed[u, a] += marg[q, y] * (1 - trust0[u]) * strategy0[u, a] * c[r, a] / p_r
    s = 0.01 / K
    np.testing.assert_allclose(earnest + spammed.sum(axis=1), 3.0)
    trust = (earnest + s) / (3 + 2 * s)
    strategy = (spammed + s) / (spammed + s).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(est.weights_["weight"].to_numpy()[workers], trust, rtol=1e-10)
    np.testing.assert_allclose(est.strategies_[workers], strategy, rtol=1e-10)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_zencrowd_posterior_step_and_objective_by_enumeration(mechanism):
    answers = tiny()
    c = channel_of(mechanism)
    one = fit_quiet(ZenCrowd(mechanism, max_iter=1), answers)
    two = fit_quiet(ZenCrowd(mechanism, max_iter=2), answers)
    _, workers = codes(one, answers)
    p0 = one.weights_["weight"].to_numpy()[workers]
    p1 = two.weights_["weight"].to_numpy()[workers]

    def lik_at(p):
        return lambda q, u, y: report_given_truth(one_coin(p[u]), c)[REPORTS[q][u], y]

    marg, loglik = enumerate_truths(lik_at(p0))
    probas = one.probas_.loc[[f"t{q}" for q in range(3)], list(range(K))].to_numpy()
    np.testing.assert_allclose(probas, marg, rtol=1e-9, atol=1e-12)
    assert one.objective_[-1] * 9 == pytest.approx(loglik, rel=1e-10)
    # The reliability step: the expected share of a worker's answers whose own answer (before
    # the channel) is the truth.
    right = np.zeros(3)
    for q, u in itertools.product(range(3), range(3)):
        r = REPORTS[q][u]
        for y in range(K):
            right[u] += marg[q, y] * p0[u] * c[r, y] / lik_at(p0)(q, u, y)
    np.testing.assert_allclose(p1, right / 3, rtol=1e-10)


@pytest.mark.parametrize("cls", [lambda m: GLAD(m), lambda m: ZenCrowd(m), lambda m: MACE(m)])
def test_em_objective_never_falls(cls):
    answers, _, _ = make_categorical(200, 15, 3, answers_per_task=5, accuracy=(0.5, 0.9), rng=2)
    mech = OneLayerRR.from_epsilon(2.0, n_labels=3)
    reports = mech.perturb(answers, rng=3)
    est = fit_quiet(cls(mech), reports)
    # EM (with GLAD's gradient M-step, which only moves uphill) climbs its objective; MACE's
    # smoothing makes it a MAP objective, so its log-likelihood may dip by the pseudo-counts'
    # share.
    assert np.diff(est.objective_).min() > -1e-6


def test_aware_zencrowd_reliability_is_the_workers_own():
    # Under RR the plain model reads the channel's flips as the workers' own errors; the aware
    # form takes them out, so its reliabilities are the workers' own, above what their reports
    # show.
    answers, truth, _ = make_categorical(
        400, 20, 2, answers_per_task=7, accuracy=(0.75, 0.95), rng=4
    )
    mech = OneLayerRR.from_epsilon(1.0, n_labels=2)
    reports = mech.perturb(answers, rng=5)
    plain = fit_quiet(ZenCrowd(), reports)
    aware = fit_quiet(ZenCrowd(mech), reports)
    # Own accuracies average 0.85; the reports' ~0.85 * 0.73 + 0.15 * 0.27 = 0.66. Each
    # worker's estimate has sd ~ sqrt(0.66 * 0.34 / 140) / 0.46 = 0.09 (140 answers, RR's scale
    # 0.46), so the mean of 20 is within ~0.02: 0.75 is 5 sd from either.
    assert plain.weights_["weight"].mean() < 0.75 < aware.weights_["weight"].mean()


def test_mace_competence_separates_spammers():
    rng = np.random.default_rng(0)
    n_t, good, bad = 300, 6, 4
    truth = rng.integers(0, 3, n_t)
    rows = []
    for u in range(good + bad):
        for q in range(n_t):
            a = truth[q] if (u < good and rng.random() < 0.8) else rng.integers(0, 3)
            rows.append((q, u, int(a)))
    frame = pd.DataFrame(rows, columns=["task", "worker", "answer"])
    est = fit_quiet(MACE(), frame)
    w = est.weights_["weight"]
    assert w.loc[list(range(good))].min() > w.loc[list(range(good, good + bad))].max()
    assert (est.truths_.to_numpy() == truth).mean() > 0.95


def test_glad_difficulties():
    est = fit_quiet(GLAD(), make_categorical(100, 10, 2, answers_per_task=5, rng=1)[0])
    assert (est.difficulties_ > 0).all()
    np.testing.assert_allclose(est.difficulties_ * est.betas_, 1.0)


def test_report_likelihood_matches_matrix_product():
    rng = np.random.default_rng(1)
    c = ASYMMETRIC
    report = rng.integers(0, K, 20)
    match = rng.uniform(0, 0.5, 20)
    d = rng.dirichlet(np.ones(K), 20) * 0.5
    spread = (d @ c.T)[np.arange(20), report]
    got = report_likelihood(c, report, match, spread, K)
    want = np.array([(c @ (match[n] * np.eye(K) + d[n][:, None]))[report[n]] for n in range(20)])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_two_layer_shares_the_channel_of_its_smallest_flip():
    # R_f = R_g R_a for every f in [a, b]: the scales 1 - f K / (K - 1) multiply, so the
    # channel all two-layer workers share is R_a and the rest is a symmetric RR per worker.
    from privtd.mechanisms import TwoLayerRR

    mech = TwoLayerRR(a=0.1, b=0.4, n_labels=K)
    shared = channel_matrix(mech, K, "test")
    np.testing.assert_allclose(shared, channel_matrix(OneLayerRR(f=0.1, n_labels=K), K, "t"))
    scale = lambda f: 1 - f * K / (K - 1)  # noqa: E731
    for f in (0.15, 0.25, 0.4):
        g = (1 - scale(f) / scale(0.1)) * (K - 1) / K
        own = channel_matrix(OneLayerRR(f=g, n_labels=K), K, "t")
        np.testing.assert_allclose(
            own @ shared, channel_matrix(OneLayerRR(f=f, n_labels=K), K, "t")
        )


@pytest.mark.parametrize(
    "make", [lambda: MACE(n_restarts=2), lambda: ZenCrowd(), lambda: ZenCrowd(RR)]
)
def test_backends_agree_with_gold_on_unsorted_answers(make):
    # MACE and ZenCrowd run the Dawid-Skene pass (numba or numpy); answers out of task order
    # and gold exercise its layout and gold paths.
    from privtd.inference import _kernels

    answers, truth, _ = make_categorical(600, 20, 3, answers_per_task=4, rng=8)
    order = np.random.default_rng(0).permutation(answers.n_answers)
    shuffled = Answers(
        answers.task[order],
        answers.worker[order],
        answers.value[order],
        answers.tasks,
        answers.workers,
        answers.labels,
    )
    gold = truth.iloc[:30]
    before = _kernels.get_backend()
    fits = {}
    try:
        for name in ("numpy", "numba"):
            _kernels.set_backend(name)
            fits[name] = fit_quiet(make(), shuffled, gold=gold)
    finally:
        _kernels.set_backend(before)
    a, b = fits["numpy"], fits["numba"]
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_allclose(a.objective_, b.objective_, rtol=1e-10)
    np.testing.assert_allclose(a.probas_, b.probas_, atol=1e-9)
    assert (b.truths_.loc[gold.index] == gold).all()


# ------------------------------------------------------------------ the mechanism parameter
FORMS = [
    ("glad", GLAD, "AwareGLAD"),
    ("mace", MACE, "AwareMACE"),
    ("zencrowd", ZenCrowd, "AwareZenCrowd"),
]


def small_fit_params(method: str) -> dict:
    return {"n_restarts": 2, "max_iter": 5} if method == "mace" else {"max_iter": 5}


@pytest.mark.parametrize("method, cls, alias", FORMS)
def test_mechanism_is_a_parameter_that_picks_the_form(method, cls, alias):
    from privtd.inference import clone, get_tags

    plain, aware = cls(), cls(RR)
    assert plain.get_params()["mechanism"] is None and aware.get_params()["mechanism"] is RR
    assert repr(aware).startswith(f"{cls.__name__}(mechanism=OneLayerRR(")
    assert get_tags(plain).name == method and not get_tags(plain).aware
    assert get_tags(aware).name == f"aware-{method}" and get_tags(aware).mechanisms
    assert get_tags(cls).name == method and get_tags(cls).aware_form.name == f"aware-{method}"
    copy = clone(aware)
    assert type(copy) is cls and copy.get_params() == aware.get_params()
    assert get_tags(copy.set_params(mechanism=None)).name == method


@pytest.mark.parametrize("method, cls, alias", FORMS)
def test_deprecated_alias_warns_and_fits_as_the_parameter(method, cls, alias):
    import privtd.inference as inference

    answers, _, _ = make_categorical(60, 8, K, answers_per_task=4, rng=6)
    reports = RR.perturb(answers, rng=7)
    with pytest.warns(FutureWarning, match=rf"^{alias} is deprecated; use {cls.__name__}\("):
        old = getattr(inference, alias)(RR, **small_fit_params(method))
    new = cls(mechanism=RR, **small_fit_params(method))
    assert isinstance(old, cls) and old.get_params() == new.get_params()
    fit_quiet(old, reports)
    fit_quiet(new, reports)
    np.testing.assert_array_equal(old.probas_, new.probas_)
    np.testing.assert_array_equal(old.weights_, new.weights_)
    np.testing.assert_array_equal(old.objective_, new.objective_)
    # ... and privtd's own way to the aware form builds the class itself, with no warning.
    from privtd.inference import make_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        built = make_estimator(f"aware-{method}", mechanism=RR, **small_fit_params(method))
    assert type(built) is cls and built.get_params() == new.get_params()


@pytest.mark.parametrize("method, cls, alias", FORMS)
def test_the_aware_form_pickles_with_its_mechanism(method, cls, alias):
    import pickle

    answers, _, _ = make_categorical(60, 8, K, answers_per_task=4, rng=6)
    est = fit_quiet(cls(RR, **small_fit_params(method)), RR.perturb(answers, rng=7))
    back = pickle.loads(pickle.dumps(est))
    assert back.get_params() == est.get_params()
    np.testing.assert_array_equal(back.probas_, est.probas_)


def test_a_plain_method_given_a_mechanism_is_its_aware_form():
    # make_estimator builds what the constructor builds: glad given a mechanism is aware-glad.
    from privtd.inference import get_tags, make_estimator

    est = make_estimator("glad", mechanism=RR, max_iter=3)
    assert get_tags(est).name == "aware-glad"
    assert est.get_params() == make_estimator("aware-glad", mechanism=RR, max_iter=3).get_params()
    # Without one the aware name is the plain model, as infer's note says.
    assert get_tags(make_estimator("aware-glad")).name == "glad"


def test_the_aware_zencrowds_warm_state_keeps_its_name():
    # The service keeps each run's warm_state_ for the next: one saved by AwareZenCrowd
    # resumes ZenCrowd(mechanism=...), and a plain fit's state does not start the aware form.
    import privtd.inference as inference
    from privtd import ValidationError

    answers, _, _ = make_categorical(60, 8, K, answers_per_task=4, rng=6)
    reports = RR.perturb(answers, rng=7)
    plain = fit_quiet(ZenCrowd(max_iter=3), reports)
    aware = fit_quiet(ZenCrowd(RR, max_iter=3), reports)
    assert plain.warm_state_["estimator"] == "ZenCrowd"
    assert aware.warm_state_["estimator"] == "AwareZenCrowd"
    with pytest.warns(FutureWarning):
        old = fit_quiet(inference.AwareZenCrowd(RR), reports)
    resumed = fit_quiet(ZenCrowd(RR), reports, warm_start=old.warm_state_)
    assert resumed.n_iter_ >= 1
    with pytest.raises(ValidationError, match="warm_start comes from ZenCrowd; this is Aware"):
        ZenCrowd(RR).fit(reports, warm_start=plain.warm_state_)
