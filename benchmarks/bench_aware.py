"""Perturbation-aware inference against the estimators that ignore the mechanism.

    python benchmarks/bench_aware.py grr        # 200,000 tasks, 1,000 workers, 5 answers per task
    python benchmarks/bench_aware.py grr-trials --trials 100 --tasks 20000 --workers 100
    python benchmarks/bench_aware.py numeric    # P1's noise on 1,000,000 answers, and P1's size
    python benchmarks/bench_aware.py sparse     # P3's designs with NULL: synthetic and real
    python benchmarks/bench_aware.py sparse --estimate map
    python benchmarks/bench_aware.py null-starts  # AwareNull's two starts, picked by the bound
    python benchmarks/bench_aware.py null-trials --trials 30  # sparsity 0.9, epsilon 0.1, each
    python benchmarks/bench_aware.py p0-oracle  # P0's Duchenne: what one-layer RR leaves an oracle
    python benchmarks/bench_aware.py p0-profile --trials 10  # the class prior in its reports
    python benchmarks/bench_aware.py duchenne   # P0's Duchenne: aware-ds against Dawid-Skene, time
    python benchmarks/bench_aware.py duchenne-ratios --trials 20  # the same, 60 releases each
    python benchmarks/bench_aware.py web-budgets  # Web's 2-layer: each worker's budget modelled
    python benchmarks/bench_aware.py k2-eb --trials 5  # two labels: a learned population law
    python benchmarks/bench_aware.py null-centre --trials 5  # AwareNull centred on a posterior mean

grr: answers of one-coin workers (accuracy U(0.55, 0.95)) perturbed by generalized randomized
response at epsilon per answer, against majority vote and Dawid-Skene; ``aware`` is the one-coin
model told the mechanism, ``aware-ds`` the Dawid-Skene one (the default for two labels), timed
against Dawid-Skene (best of three fits). ``oracle`` is the weighted
vote with every worker's true observed accuracy: the Bayes rule for this model, an upper bound on
what any estimator can reach on this data. One trial per setting: with 200,000 tasks the standard
error of an accuracy is at most 0.0011.

numeric: P1's workers (own variance Exp(1)) and mechanism (variance Exp(1 / noise level)),
AwareGaussian against P1's two aggregators, CRH and GTM, and against ``plain``, the same
hierarchical model told no mechanism: MAE against the truth and time.

sparse: P3's releases with NULL (krr-null, two-layer-null) of its synthetic design (2,000 workers
x 200 tasks at sparsity 0.1, 0.5, 0.9) and of Web and AdultContent, AwareNull against P3's
aggregator (WeightedAverage) on the same release: MAE against the truth and time, best of five
fits (a fit takes milliseconds here), both on the kernel backend in use (numba when installed,
else ``PRIVTD_BACKEND=numpy``). The target: at most 3x.

p0-oracle: on Duchenne's gold tasks under one-layer RR, the Bayes rule with every worker's clean
confusion taken from the gold itself (in-sample, add-one smoothed: an optimistic bound for any
Dawid-Skene-type fit) and either the gold's class prior or the one that best explains the reports
of all 2,134 tasks with those confusions held fixed (the same release for both), as error-rate
change against TD's clean error (0.2830, the footing of ``aware_ds_vs_td`` in ``privtd reproduce
kdd18``), beside P0's two-layer TD column. It shows whether the one-layer reports carry enough to
reach that column, and how much of it they carry only once the workers' biases are known.

duchenne: Duchenne's 17,729 answers released by P0's one-layer and two-layer randomized response,
AwareDawidSkene (the default aware estimator over two labels) against Dawid-Skene and AwareOneCoin
against the one-coin Dawid-Skene on the same release: time (fits in turn, best of ten) and
iterations (passes over the answers), one release per setting.

duchenne-ratios: AwareDawidSkene's time over Dawid-Skene's on each of 3 x ``--trials`` releases per
mechanism (epsilon 1, 0.5, 0.1; seeds from ``--seed``), best of five, with the mean, median and
largest ratio: the speed target (at most 3x) release by release.

web-budgets: Web's two-layer release at epsilon 0.5-20 (one each, ``--seed``), P3's aggregator and
AwareNull against a prototype that models each worker's private budget and answer rate
(``budget_fit``, not shipped: too slow for the 3x target, and worse from epsilon 1 down).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Iterator

import numpy as np
import pandas as pd
import scipy.optimize

import privtd
from privtd.experiments import bigdata18, kdd18
from privtd.inference import (
    CRH,
    GTM,
    AwareDawidSkene,
    AwareGaussian,
    AwareNull,
    AwareOneCoin,
    DawidSkene,
    MajorityVote,
    OneCoinDawidSkene,
    WeightedAverage,
)
from privtd.inference.aware_null import grouped_median, null_channel, pooled_distribution
from privtd.mechanisms import ExpGaussian, KRRNull, OneLayerRR, TwoLayerNull, TwoLayerRR


def oracle(perturbed: privtd.Answers, accuracy: np.ndarray, mech: OneLayerRR) -> np.ndarray:
    k = mech.n_labels
    observed = accuracy * (1 - mech.f) + (1 - accuracy) * mech.f / (k - 1)
    weight = np.log(observed * (k - 1) / (1 - observed))
    votes = np.zeros((perturbed.n_tasks, k))
    np.add.at(votes, (perturbed.task, perturbed.value), weight[perturbed.worker])
    return np.asarray(perturbed.labels)[votes.argmax(axis=1)]


def grr(args: argparse.Namespace) -> None:
    print(
        "K  eps     mv      ds  one-coin  aware  aware-ds  oracle | aware-max(mv,ds) "
        "ads-max(mv,ds) | time aware/one-coin  aware-ds/ds"
    )
    for k in (2, 5):
        answers, truth, info = privtd.datasets.make_categorical(
            args.tasks, args.workers, k, answers_per_task=5, rng=args.seed
        )
        for eps in (0.5, 1.0, 2.0, 4.0):
            mech = OneLayerRR.from_epsilon(eps, k)
            perturbed = mech.perturb(answers, rng=args.seed + 1)
            truth_by_task = truth.reindex(perturbed.tasks).to_numpy()
            scores, seconds = {}, {}
            for name, est in (
                ("mv", MajorityVote()),
                ("ds", DawidSkene()),
                ("one-coin", OneCoinDawidSkene()),
                ("aware", AwareOneCoin(mech)),
                ("aware-ds", AwareDawidSkene(mech)),
            ):
                seconds[name] = best_of_three(est, perturbed)
                scores[name] = float((est.truths_.to_numpy() == truth_by_task).mean())
            best = (oracle(perturbed, info["accuracy"], mech) == truth_by_task).mean()
            gain = scores["aware"] - max(scores["mv"], scores["ds"])
            gain_ds = scores["aware-ds"] - max(scores["mv"], scores["ds"])
            print(
                f"{k}  {eps:3.1f}  {scores['mv']:.4f}  {scores['ds']:.4f}  {scores['one-coin']:.4f}"
                f"  {scores['aware']:.4f}  {scores['aware-ds']:.4f}  {best:.4f} | {gain:+.4f}  "
                f"{gain_ds:+.4f} | {seconds['aware']:.2f} s / {seconds['one-coin']:.2f} s  "
                f"{seconds['aware-ds']:.2f} s / {seconds['ds']:.2f} s",
                flush=True,
            )


def grr_trials(args: argparse.Namespace) -> None:
    """The synthetic target with ``--trials`` fresh crowds and perturbations per setting: the gain
    of the default aware estimator (``privtd infer --mechanism``) over the better of majority
    vote and Dawid-Skene in each trial, mean and standard error, and the oracle's."""
    print("K  eps  default          gain over max(mv, ds) ± SE   oracle gain ± SE   trials")
    for k in (2, 5):
        for eps in (0.5, 1.0, 2.0, 4.0):
            mech = OneLayerRR.from_epsilon(eps, k)
            method = privtd.inference.aware_method(mech)
            gains, oracle_gains = [], []
            for trial in range(args.trials):
                seed = args.seed + 1000 * trial
                answers, truth, info = privtd.datasets.make_categorical(
                    args.tasks, args.workers, k, answers_per_task=5, rng=seed
                )
                perturbed = mech.perturb(answers, rng=seed + 1)
                gold = truth.reindex(perturbed.tasks).to_numpy()
                score = {
                    name: float((est.fit(perturbed).truths_.to_numpy() == gold).mean())
                    for name, est in (
                        ("mv", MajorityVote()),
                        ("ds", DawidSkene()),
                        ("aware", privtd.make_estimator(method, mechanism=mech)),
                    )
                }
                baseline = max(score["mv"], score["ds"])
                gains.append(score["aware"] - baseline)
                oracle_gains.append(
                    float((oracle(perturbed, info["accuracy"], mech) == gold).mean()) - baseline
                )
            se = np.std(gains, ddof=1) / np.sqrt(args.trials)
            ose = np.std(oracle_gains, ddof=1) / np.sqrt(args.trials)
            print(
                f"{k}  {eps:3.1f}  {method:15s}  {np.mean(gains):+.5f} ± {se:.5f}"
                f"              {np.mean(oracle_gains):+.4f} ± {ose:.4f}   {args.trials}",
                flush=True,
            )


def best_of_three(
    est: privtd.inference.Estimator, answers: privtd.Answers, repeats: int = 3
) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        est.fit(answers)
        times.append(time.perf_counter() - start)
    return min(times)


def best_interleaved(
    fits: tuple[privtd.inference.Estimator, ...], answers: privtd.Answers, repeats: int
) -> list[float]:
    """Each estimator's best time, the fits taken in turn so that a slow spell of a shared
    machine falls on all of them, not on one estimator's block."""
    times: list[list[float]] = [[] for _ in fits]
    for _ in range(repeats):
        for est, bucket in zip(fits, times, strict=True):
            start = time.perf_counter()
            est.fit(answers)
            bucket.append(time.perf_counter() - start)
    return [min(bucket) for bucket in times]


def numeric(args: argparse.Namespace) -> None:
    print(
        "tasks  workers  answers  level | MAE crh  gtm  aware  plain | seconds crh  gtm  aware  "
        "plain | aware / crh  gtm  plain"
    )
    for tasks, workers, per_task in ((20_000, 2_000, 50), (30, 150, None)):
        for level in (0.5, 2.0):
            answers, truth, _ = privtd.datasets.make_numeric(
                tasks, workers, answers_per_task=per_task, error_rate=1.0, rng=args.seed
            )
            low, high = float(answers.value.min()), float(answers.value.max())
            mech = ExpGaussian(1.0 / level, low, high)
            perturbed = mech.perturb(answers, rng=args.seed + 1)
            gold = truth.reindex(perturbed.tasks).to_numpy()
            # Best of 30 on P1's 4,500 answers (a fit takes milliseconds; ten left 30% noise
            # between runs on a 2-core machine), of three on 1e6.
            repeats = 30 if len(perturbed) < 100_000 else 3
            fits = (CRH(), GTM(), AwareGaussian(mech), AwareGaussian(None))
            seconds = best_interleaved(fits, perturbed, repeats)
            mae = [np.abs(est.truths_.to_numpy() - gold).mean() for est in fits]
            ratios = [seconds[2] / seconds[i] for i in (0, 1, 3)]
            print(
                f"{tasks:6d} {workers:7d} {len(perturbed):8d}  {level:4.1f} | "
                + "  ".join(f"{m:.4f}" for m in mae)
                + " | "
                + "  ".join(f"{t:.4f}" for t in seconds)
                + " | "
                + "  ".join(f"{r:4.1f}x" for r in ratios),
                flush=True,
            )

    # How much of the gain over CRH is the mechanism's law: on the emotion scores, 10 releases
    # per epsilon, the aware fit against the same model told no mechanism (paired).
    data = privtd.datasets.load("emotion")
    answers = data.answers
    gold = answers.encode_tasks(data.truth.index, "truth")
    truth = data.truth.to_numpy(dtype=float)
    low, high = float(answers.value.min()), float(answers.value.max())
    print("emotion  eps | MAE crh  aware  plain | aware - plain ± SE (10 releases)")
    for eps in (0.5, 1.0, 2.0, 4.0):
        mech = ExpGaussian.from_epsilon(eps, low, high)
        mae = np.empty((10, 3))
        for trial in range(10):
            perturbed = mech.perturb(answers, rng=args.seed + trial)
            for j, est in enumerate((CRH(), AwareGaussian(mech), AwareGaussian(None))):
                mae[trial, j] = np.abs(est.fit(perturbed).truths_.to_numpy()[gold] - truth).mean()
        diff = mae[:, 1] - mae[:, 2]
        print(
            f"emotion  {eps:3.1f} | {mae[:, 0].mean():.1f}  {mae[:, 1].mean():.1f}  "
            f"{mae[:, 2].mean():.1f} | {diff.mean():+.2f} ± {diff.std(ddof=1) / np.sqrt(10):.2f}",
            flush=True,
        )


def sparse_instances(
    seed: int,
) -> Iterator[tuple[str, privtd.Answers, np.ndarray, np.ndarray, int, int]]:
    """(name, answers, gold task codes, gold values, low, high) for P3's designs."""
    for sparsity in (0.1, 0.5, 0.9):
        answers, mu = bigdata18.synthetic(2000, 200, sparsity, np.random.default_rng(seed))
        yield f"synthetic sp {sparsity}", answers, np.arange(200), mu, 0, 9
    for name in ("web", "adult_content"):
        data = privtd.datasets.load(name)
        coded = data.answers
        assert coded.labels is not None
        values = np.asarray(coded.labels, dtype=float)[coded.value]
        answers = privtd.Answers(coded.task, coded.worker, values, coded.tasks, coded.workers)
        gold = answers.encode_tasks(data.truth.index, "truth")
        low, high = int(values.min()), int(values.max())
        yield name, answers, gold, data.truth.to_numpy(dtype=float), low, high


def sparse(args: argparse.Namespace) -> None:
    # Both estimators use the compiled kernels when numba is installed (privtd[fast]).
    print(
        f"kernel backend: {privtd.inference._kernels.get_backend()}; "
        f"AwareNull estimate: {args.estimate}"
    )
    print("data                  mechanism       eps | MAE p3  aware | seconds p3  aware  ratio")
    worst = 0.0
    for name, answers, gold, truth, low, high in sparse_instances(args.seed):
        for mech_class in (KRRNull, TwoLayerNull):
            for eps in (0.1, 0.5, 1.0, 2.0, 5.0):
                mech = mech_class.from_epsilon(eps, low, high)
                released = mech.perturb(answers, rng=args.seed + 1)
                p3, aware = WeightedAverage(), AwareNull(mech, estimate=args.estimate)
                t_p3, t_aware = best_of_three(p3, released, 5), best_of_three(aware, released, 5)
                mae = [np.abs(e.truths_.to_numpy()[gold] - truth).mean() for e in (p3, aware)]
                worst = max(worst, t_aware / t_p3)
                print(
                    f"{name:20s}  {mech.name:14s} {eps:4.1f} | {mae[0]:.3f}  {mae[1]:.3f} | "
                    f"{t_p3 * 1e3:7.1f} ms {t_aware * 1e3:7.1f} ms  {t_aware / t_p3:4.1f}x",
                    flush=True,
                )
    print(f"worst ratio {worst:.1f}x (target 3x: {'met' if worst <= 3 else 'MISSED'})")


def null_starts(args: argparse.Namespace) -> None:
    """The variational AwareNull from the pooled start and from each task's deconvolved counts,
    per task the fit with the higher variational bound, and the MAP estimate (one fixed point),
    on P3's designs: MAE against the truth and the share of tasks where the two variational
    starts end more than 1e-3 apart."""
    print(
        "data                  mechanism       eps | MAE pooled  deconvolved  by-bound  map"
        " | differ"
    )
    for name, answers, gold, truth, low, high in sparse_instances(args.seed):
        for mech_class in (KRRNull, TwoLayerNull):
            for eps in (0.1, 0.5, 1.0, 2.0, 5.0):
                mech = mech_class.from_epsilon(eps, low, high)
                released = mech.perturb(answers, rng=args.seed + 1)
                fits = [
                    AwareNull(mech, estimate="variational", start=s).fit(released)
                    for s in ("pooled", "deconvolved")
                ]
                truths = [f.truths_.to_numpy() for f in fits]
                higher = fits[1].bound_.to_numpy() > fits[0].bound_.to_numpy()
                truths.append(np.where(higher, truths[1], truths[0]))
                truths.append(AwareNull(mech, estimate="map").fit(released).truths_.to_numpy())
                mae = [np.abs(t[gold] - truth).mean() for t in truths]
                differ = float((np.abs(truths[0] - truths[1]) > 1e-3).mean())
                print(
                    f"{name:20s}  {mech.name:14s} {eps:4.1f} | {mae[0]:.4f}      {mae[1]:.4f}"
                    f"       {mae[2]:.4f}    {mae[3]:.4f} | {differ:.2f}",
                    flush=True,
                )


def null_trials(args: argparse.Namespace) -> None:
    """P3's synthetic design at sparsity 0.9, epsilon 0.1, trial by trial (``--trials`` crowds
    from ``--seed``): the MAE change of P3's aggregator and of AwareNull on each release, as
    ``privtd reproduce bigdata18`` computes it, to show how the trials spread."""
    keys = ("lp", "rr", "aware_rr", "mf", "two_layer", "aware_two_layer")
    print("trial | " + "  ".join(f"{k:>15s}" for k in keys))
    rows = []
    for i, s in enumerate(np.random.SeedSequence(args.seed).spawn(args.trials)):
        rng = np.random.default_rng(s)
        answers, mu = bigdata18.synthetic(2000, 200, 0.9, rng)
        change = bigdata18._changes(answers, np.arange(200), mu, 0.1, 0, 9, 10, rng)
        rows.append([change[k] for k in keys])
        print(f"{i:5d} | " + "  ".join(f"{change[k]:15.2f}" for k in keys), flush=True)
    r = np.array(rows)
    se = r.std(axis=0, ddof=1) / np.sqrt(len(r))
    cells = (f"{m:8.2f} ± {e:4.2f}" for m, e in zip(r.mean(axis=0), se, strict=True))
    print("mean  | " + "  ".join(cells))
    print("above 3: " + ", ".join(f"{k} {int((r[:, j] > 3).sum())}" for j, k in enumerate(keys)))


def p0_oracle(args: argparse.Namespace) -> None:
    data = privtd.datasets.load("duchenne")
    answers = data.answers
    n_t = answers.n_tasks
    gold_index = answers.encode_tasks(data.truth.index, "truth")
    gold_codes = answers.encode_labels(pd.Index(data.truth.to_numpy()), "truth")
    row_of = np.full(n_t, -1)
    row_of[gold_index] = np.arange(gold_index.size)
    on_gold = row_of[answers.task] >= 0
    confusion = np.ones((answers.n_workers, 2, 2))
    gold_truth = gold_codes[row_of[answers.task[on_gold]]]
    np.add.at(confusion, (answers.worker[on_gold], gold_truth, answers.value[on_gold]), 1.0)
    confusion /= confusion.sum(axis=2, keepdims=True)
    gold_prior = np.bincount(gold_codes, minlength=2) / gold_codes.size
    rng = np.random.default_rng(args.seed)
    print(
        "epsilon | oracle, gold's class prior ± SE | oracle, class prior fitted to the reports "
        "± SE  (fitted share of label 1) | P0 two-layer TD"
    )
    for eps in kdd18.EPSILONS:
        f = OneLayerRR.from_epsilon(eps).f
        observed = np.log(confusion @ np.array([[1 - f, f], [f, 1 - f]]))
        errors: dict[str, list[float]] = {"gold": [], "fitted": []}
        shares = []
        for _ in range(args.trials):
            reported = np.where(rng.random(answers.n_answers) < f, 1 - answers.value, answers.value)
            loglik = np.stack(
                [
                    np.bincount(answers.task, observed[answers.worker, c, reported], n_t)
                    for c in (0, 1)
                ],
                axis=1,
            )
            prior = fit_class_prior(loglik)
            shares.append(prior[1])
            for key, p in (("gold", gold_prior), ("fitted", prior)):
                labels = (loglik[gold_index] + np.log(np.maximum(p, 1e-300))).argmax(axis=1)
                errors[key].append(float((labels != gold_codes).mean()))
        cells = [
            f"{np.mean(e) - 0.2830:+.4f} ± {np.std(e, ddof=1) / np.sqrt(args.trials):.4f}"
            for e in errors.values()
        ]
        print(
            f"{eps:7g} | {cells[0]:>31s} | {cells[1]:>41s}  ({np.mean(shares):.3f})"
            f"{'':14s} | {kdd18.PAPER_TABLE3[eps][3]:.4f}",
            flush=True,
        )


def fit_class_prior(loglik: np.ndarray) -> np.ndarray:
    """The class prior over two labels that maximises the reports' likelihood over all tasks,
    the confusions held fixed (``loglik[task, label]``); the log-likelihood is concave in it.
    Where the reports say nothing (epsilon 0) it is flat, and the prior is uniform."""
    if np.ptp(loglik, axis=1).max() == 0:
        return np.full(2, 0.5)
    shift = loglik.max(axis=1, keepdims=True)
    lik = np.exp(loglik - shift)
    share = scipy.optimize.minimize_scalar(
        lambda p: -np.log((1 - p) * lik[:, 0] + p * lik[:, 1]).sum(),
        bounds=(0.0, 1.0),
        method="bounded",
        options={"xatol": 1e-9},
    ).x
    return np.array([1 - share, share])


def p0_profile(args: argparse.Namespace) -> None:
    """How much Duchenne's reports say about the class prior, whatever the workers: each task's
    count of reports of label 1 as a mixture of two binomials (rate ``r0`` for truth 0, ``r1 >=
    r0`` for truth 1, shared by every worker), maximised over the rates at each class prior on a
    grid; the profile log-likelihood's drop from its maximum at the gold's share (0.36) and near
    the answers' (0.48; theirs is 0.49), and the class priors within 1.92 of it (a 95%
    interval), on the clean answers and on ``--trials`` one-layer releases per epsilon."""
    answers = privtd.datasets.load("duchenne").answers
    n_t = answers.n_tasks
    n = np.bincount(answers.task, minlength=n_t).astype(float)
    grid = np.round(np.arange(0.04, 0.961, 0.02), 2)
    rng = np.random.default_rng(args.seed)
    print(
        "answers       | best share of 1 | drop at 0.36 | drop at 0.48 | 95% interval of the share"
    )
    releases: list[tuple[str, float]] = [("clean", 0.0)]
    releases += [(f"epsilon {eps:g}", eps) for eps in (1.0, 0.5, 0.3, 0.2)]
    for name, eps in releases:
        rows = []
        for _ in range(1 if eps == 0 else args.trials):
            f = OneLayerRR.from_epsilon(eps).f if eps else 0.0
            flip = rng.random(answers.n_answers) < f
            k = np.bincount(answers.task, np.where(flip, 1 - answers.value, answers.value), n_t)
            profile = np.array([mixture_loglik(k, n, share) for share in grid])
            inside = grid[profile >= profile.max() - 1.92]
            rows.append(
                (
                    grid[profile.argmax()],
                    profile.max() - profile[grid == 0.36][0],
                    profile.max() - profile[grid == 0.48][0],
                    inside.min(),
                    inside.max(),
                )
            )
        r = np.array(rows)
        print(
            f"{name:13s} | {r[:, 0].mean():15.2f} | {r[:, 1].mean():12.2f} | {r[:, 2].mean():12.2f}"
            f" | {r[:, 3].mean():.2f}-{r[:, 4].mean():.2f} (mean of the ends over {len(r)})",
            flush=True,
        )


def mixture_loglik(k: np.ndarray, n: np.ndarray, share: float, passes: int = 500) -> float:
    """The largest log-likelihood of counts ``k`` of ``n`` as ``(1 - share) Bin(n, r0) + share
    Bin(n, r1)`` over ``r0 <= r1`` (EM on the rates from three starts; where EM ends with ``r0 >
    r1`` the constrained maximum is on ``r0 = r1``, one binomial), less the binomial
    coefficients, which do not depend on the rates."""
    weights = np.log([1 - share, share])
    mean = k.sum() / n.sum()
    one = float((k * np.log(mean) + (n - k) * np.log1p(-mean)).sum())
    best = one
    for gap in (0.05, 0.15, 0.3):
        rates = np.clip([mean - gap, mean + gap], 0.01, 0.99)
        for _ in range(passes):
            log_joint = weights + k[:, None] * np.log(rates) + (n - k)[:, None] * np.log1p(-rates)
            post = np.exp(log_joint - log_joint.max(axis=1, keepdims=True))
            post /= post.sum(axis=1, keepdims=True)
            last = rates
            rates = np.clip((post * k[:, None]).sum(0) / (post * n[:, None]).sum(0), 1e-9, 1 - 1e-9)
            if np.abs(rates - last).max() < 1e-7:
                break
        if rates[0] <= rates[1]:
            log_joint = weights + k[:, None] * np.log(rates) + (n - k)[:, None] * np.log1p(-rates)
            best = max(best, float(np.logaddexp.reduce(log_joint, axis=1).sum()))
    return best


def duchenne(args: argparse.Namespace) -> None:
    answers = privtd.datasets.load("duchenne").answers
    rng = np.random.default_rng(args.seed)
    print(
        "mechanism  epsilon | ms ds  aware-ds  one-coin  aware | iterations ds  aware-ds  "
        "one-coin  aware | aware-ds / ds  aware / one-coin"
    )
    for name, make in (
        ("one-layer", OneLayerRR.from_epsilon),
        ("two-layer", TwoLayerRR.from_epsilon),
    ):
        for eps in (1.0, 0.5, 0.1):
            mech = make(eps)
            released = mech.perturb(answers, rng=rng)
            fits = (DawidSkene(), AwareDawidSkene(mech), OneCoinDawidSkene(), AwareOneCoin(mech))
            ms = [1e3 * s for s in best_interleaved(fits, released, 10)]
            iters = [fit.n_iter_ for fit in fits]
            print(
                f"{name:9s}  {eps:7g} | {ms[0]:5.1f}  {ms[1]:8.1f}  {ms[2]:8.1f}  {ms[3]:5.1f} | "
                f"{iters[0]:13d}  {iters[1]:8d}  {iters[2]:8d}  {iters[3]:5d} | "
                f"{ms[1] / ms[0]:12.1f}x  {ms[3] / ms[2]:14.1f}x",
                flush=True,
            )


def duchenne_ratios(args: argparse.Namespace) -> None:
    """The speed target release by release: ``--trials`` seeds of Duchenne's answers released
    at epsilon 1, 0.5 and 0.1 by each mechanism, AwareDawidSkene's time over Dawid-Skene's (fits
    in turn, best of five), and the mean, median and largest ratio."""
    answers = privtd.datasets.load("duchenne").answers
    for name, make in (
        ("two-layer", TwoLayerRR.from_epsilon),
        ("one-layer", OneLayerRR.from_epsilon),
    ):
        ratios = []
        for seed in range(args.seed, args.seed + args.trials):
            rng = np.random.default_rng(seed)
            for eps in (1.0, 0.5, 0.1):
                mech = make(eps)
                released = mech.perturb(answers, rng=rng)
                fits = (DawidSkene(), AwareDawidSkene(mech))
                ds, aware = best_interleaved(fits, released, 5)
                ratios.append(aware / ds)
                print(
                    f"{name}  seed {seed:2d}  epsilon {eps:3g} | ds {1e3 * ds:5.1f} ms "
                    f"{fits[0].n_iter_:3d} iterations | aware-ds {1e3 * aware:5.1f} ms "
                    f"{fits[1].n_iter_:3d} passes | {aware / ds:.2f}x",
                    flush=True,
                )
        r = np.array(ratios)
        print(
            f"{name}: {r.size} releases, aware-ds / ds mean {r.mean():.2f}x, median "
            f"{np.median(r):.2f}x, largest {r.max():.2f}x, above 3x: {(r > 3).sum()}",
            flush=True,
        )


def budget_fit(
    released: privtd.Answers, mech: TwoLayerNull, passes: int = 300, grid: int = 64
) -> tuple[np.ndarray, int]:
    """A prototype, not shipped: EM with each worker's private budget (a posterior over
    ``grid`` midpoints of ``U(0, 2 mean_epsilon)``) and own answer rate, and each task's score
    shares under a Dirichlet prior of strength 2 on the pooled shares. A NULL report sends to
    score ``s`` the share ``a_u theta_q(s) / (a_u + (1 - a_u) rho_u)``, the task's share times a
    per-worker constant (``rho_u = exp E[log keep - log other]``), so each pass touches only
    the released scores. Budgets start from each worker's share of NULL reports read at the
    pooled answer rate (from uniform posteriors the fit reads the lowest-budget workers as
    keeping everything and answering most tasks). Returns the truths (grouped medians) and the
    passes taken."""
    g, low = mech.domain_size, mech.low
    n_w, n_t = released.n_workers, released.n_tasks
    task, worker = released.task.astype(np.int64), released.worker.astype(np.int64)
    x = np.rint(released.value - low).astype(np.int64)
    cell = task * g + x
    n_null = n_t - np.bincount(worker, minlength=n_w)
    eps = (np.arange(grid) + 0.5) / grid * 2 * mech.mean_epsilon
    keep, other = np.exp(eps) / (g + np.exp(eps)), 1 / (g + np.exp(eps))
    log_keep, log_other = np.log(keep), np.log(other)
    total = np.r_[np.bincount(x, minlength=g), n_null.sum()].astype(float)
    pooled = pooled_distribution(total, null_channel(mech))
    centre = np.maximum(pooled[:g], 1e-12)
    centre /= centre.sum()
    theta = np.tile(centre, (n_t, 1))
    rate = np.full(n_w, max(1 - pooled[g], 1e-3))

    def posterior(loglik: np.ndarray) -> np.ndarray:
        post = np.exp(loglik - loglik.max(axis=1, keepdims=True))
        return post / post.sum(axis=1, keepdims=True)

    p_null = keep * (1 - rate[0]) + other * rate[0]
    budget = posterior(np.outer(n_null, np.log(p_null)) + np.outer(n_t - n_null, np.log1p(-p_null)))
    before = None
    for step in range(passes):
        rho = np.exp(budget @ (log_keep - log_other))
        null_norm = rate + (1 - rate) * rho
        to_scores = rate / null_norm
        kept = theta.ravel()[cell]
        share = rate[worker] / (rate[worker] * (1 + (rho[worker] - 1) * kept) + 1 - rate[worker])
        spread = (
            to_scores.sum()
            - np.bincount(task, weights=to_scores[worker], minlength=n_t)
            + np.bincount(task, weights=share, minlength=n_t)
        )
        counts = theta * spread[:, None]
        counts += np.bincount(
            cell, weights=share * kept * (rho[worker] - 1), minlength=n_t * g
        ).reshape(n_t, g)
        answered = n_null * to_scores + np.bincount(
            worker, weights=share * (1 + (rho[worker] - 1) * kept), minlength=n_w
        )
        match = n_null * (1 - rate) * rho / null_norm + np.bincount(
            worker, weights=share * rho[worker] * kept, minlength=n_w
        )
        theta = counts + 2.0 * centre
        theta /= theta.sum(axis=1, keepdims=True)
        rate = (answered + 1) / (n_t + 2)
        budget = posterior(np.outer(match, log_keep) + np.outer(n_t - match, log_other))
        truth = grouped_median(theta, low)
        state = np.r_[truth, budget @ eps, 10 * rate]
        if before is not None and step > 10 and np.abs(state - before).max() < 1e-4:
            break
        before = state
    return truth, step + 1


def web_budgets(args: argparse.Namespace) -> None:
    """Web's two-layer release, one per epsilon: P3's aggregator, the shipped AwareNull (the
    marginal channel) and ``budget_fit`` (each worker's budget), MAE change and time."""
    _, answers, gold, truth, low, high = list(sparse_instances(args.seed))[3]
    base = np.abs(WeightedAverage().fit(answers).truths_.to_numpy()[gold] - truth).mean()
    print("eps | MAE change P3  aware  per-worker | passes  seconds  P3 ms")
    for eps in (0.5, 1.0, 2.0, 3.0, 5.0, 20.0):
        mech = TwoLayerNull.from_epsilon(eps, low, high)
        released = mech.perturb(answers, rng=args.seed)
        change = [
            np.abs(est.fit(released).truths_.to_numpy()[gold] - truth).mean() - base
            for est in (WeightedAverage(), AwareNull(mech))
        ]
        start = time.perf_counter()
        inferred, passes = budget_fit(released, mech, passes=args.passes)
        seconds = time.perf_counter() - start
        p3_ms = best_of_three(WeightedAverage(), released) * 1000
        change.append(np.abs(inferred[gold] - truth).mean() - base)
        print(
            f"{eps:4.1f} | {change[0]:.3f}  {change[1]:.3f}  {change[2]:.3f} | {passes}  "
            f"{seconds:.1f}  {p3_ms:.1f}",
            flush=True,
        )


def pseudo_eb_fit(
    answers: privtd.Answers,
    start: np.ndarray,
    mean: np.ndarray | None = None,
    outer: int = 30,
    inner: int = 10,
) -> tuple[np.ndarray, np.ndarray]:
    """A prototype over two labels, not shipped: each worker's reports through
    ``theta_u = (logit P(z = 1 | y = 0), logit P(z = 1 | y = 1))`` with a Gaussian population
    law ``N(m, T)`` learned by empirical Bayes. Each round fits every worker to its reports
    against the posteriors of its tasks without its own report (a per-worker likelihood free of
    the worker's pull on those posteriors: EM over the truth, ``inner`` steps), takes the
    information of that fit from its scores, fits ``m`` (unless ``mean`` is given) and ``T``
    to the workers' estimates and informations (normal-normal EM), and votes with each
    worker's posterior mean. Returns the label codes and ``T``."""
    task, worker = answers.task.astype(np.int64), answers.worker.astype(np.int64)
    one = answers.value == 1
    n_w, n_t = answers.n_workers, answers.n_tasks

    def per_worker(weights: np.ndarray) -> np.ndarray:
        return np.stack([np.bincount(worker, weights[:, y], minlength=n_w) for y in (0, 1)], 1)

    def logit_of(resp: np.ndarray) -> np.ndarray:
        p1 = (per_worker(resp * one[:, None]) + 0.5) / (per_worker(resp) + 1.0)
        return np.log(p1 / (1 - p1))

    def report_logs(theta: np.ndarray) -> np.ndarray:
        p1 = 1 / (1 + np.exp(-theta[worker]))
        return np.log(np.where(one[:, None], p1, 1 - p1))

    theta, prior = logit_of(start[task]), start.mean(axis=0)
    cov = np.eye(2)
    for _ in range(outer):
        own = report_logs(theta)
        log_post = np.log(prior) + np.stack(
            [np.bincount(task, own[:, y], minlength=n_t) for y in (0, 1)], 1
        )
        without = log_post[task] - own
        without = np.exp(without - without.max(axis=1, keepdims=True))
        without /= without.sum(axis=1, keepdims=True)
        fitted = theta
        for _ in range(inner):
            resp = without * np.exp(report_logs(fitted))
            resp /= resp.sum(axis=1, keepdims=True)
            fitted = logit_of(resp)
        resp = without * np.exp(report_logs(fitted))
        resp /= resp.sum(axis=1, keepdims=True)
        score = resp * (one[:, None] - 1 / (1 + np.exp(-fitted[worker])))
        info = np.stack(
            [per_worker(score * score[:, [i]]) for i in (0, 1)], axis=1
        ) + 1e-6 * np.eye(2)
        centre = fitted.mean(axis=0) if mean is None else mean
        cov = np.cov(fitted.T) + 1e-4 * np.eye(2)
        for _ in range(100):
            inv = np.linalg.inv(cov)
            post_cov = np.linalg.inv(inv + info)
            post = np.einsum(
                "wij,wj->wi", post_cov, inv @ centre + np.einsum("wij,wj->wi", info, fitted)
            )
            centre = post.mean(axis=0) if mean is None else mean
            cov = ((post - centre).T @ (post - centre) + post_cov.sum(axis=0)) / n_w
            cov += 1e-9 * np.eye(2)
        change = np.abs(post - theta).max()
        theta = post
        probas = np.exp(log_post - log_post.max(axis=1, keepdims=True))
        prior = (probas / probas.sum(axis=1, keepdims=True)).mean(axis=0)
        if change < 1e-4:
            break
    own = report_logs(theta)
    log_post = np.log(prior) + np.stack(
        [np.bincount(task, own[:, y], minlength=n_t) for y in (0, 1)], 1
    )
    return log_post.argmax(axis=1), cov


def k2_eb(args: argparse.Namespace) -> None:
    """``pseudo_eb_fit`` with the population mean learned (``eb``) or fixed at the composed
    confusion of AwareDawidSkene's prior mean (``eb-fixed``), both started from majority vote,
    against the shipped AwareDawidSkene: the target's synthetic design at two labels (gain over
    the better of majority vote and Dawid-Skene, ``--trials`` crowds), and P0's Duchenne under
    one-layer RR (error on the gold tasks, paired with AwareDawidSkene on the same release,
    20 releases per epsilon)."""

    def fixed_mean(mech: OneLayerRR) -> np.ndarray:
        a0 = 0.7 * (1 - mech.f) + 0.3 * mech.f
        return np.array([np.log((1 - a0) / a0), np.log(a0 / (1 - a0))])

    print("synthetic, K = 2: gain over max(mv, ds) ± SE | aware-ds  eb  eb-fixed  oracle")
    for eps in (0.5, 1.0):
        mech = OneLayerRR.from_epsilon(eps, 2)
        gains = []
        for trial in range(args.trials):
            seed = args.seed + 1000 * trial
            answers, truth, info = privtd.datasets.make_categorical(
                args.tasks, args.workers, 2, answers_per_task=5, rng=seed
            )
            perturbed = mech.perturb(answers, rng=seed + 1)
            gold = truth.reindex(perturbed.tasks).to_numpy()
            labels = np.asarray(perturbed.labels)
            mv = MajorityVote().fit(perturbed)
            score = [
                float((est.fit(perturbed).truths_.to_numpy() == gold).mean())
                for est in (mv, DawidSkene(), AwareDawidSkene(mech))
            ]
            start = mv.probas_.to_numpy()
            for mean in (None, fixed_mean(mech)):
                codes, _ = pseudo_eb_fit(perturbed, start, mean)
                score.append(float((labels[codes] == gold).mean()))
            score.append(float((oracle(perturbed, info["accuracy"], mech) == gold).mean()))
            gains.append(np.array(score[2:]) - max(score[:2]))
        g = np.array(gains)
        se = g.std(axis=0, ddof=1) / np.sqrt(len(g))
        print(
            f"eps {eps:3.1f}: "
            + "  ".join(f"{m:+.5f} ± {s:.5f}" for m, s in zip(g.mean(axis=0), se, strict=True))
            + f"  ({len(g)} crowds)",
            flush=True,
        )
    data = privtd.datasets.load("duchenne")
    print("P0 Duchenne, one-layer RR: error on the gold | aware-ds  eb  eb-fixed | eb - aware-ds")
    for eps in (1.0, 0.5, 0.3, 0.1):
        mech = OneLayerRR.from_epsilon(eps, 2)
        errors = []
        for seed in range(20):
            perturbed = mech.perturb(data.answers, rng=seed)
            at = perturbed.tasks.get_indexer(data.truth.index)
            labels = np.asarray(perturbed.labels)
            fit = AwareDawidSkene(mech).fit(perturbed).truths_.to_numpy()
            row = [float((fit[at] != data.truth.to_numpy()).mean())]
            start = MajorityVote().fit(perturbed).probas_.to_numpy()
            for mean in (None, fixed_mean(mech)):
                codes, _ = pseudo_eb_fit(perturbed, start, mean)
                row.append(float((labels[codes][at] != data.truth.to_numpy()).mean()))
            errors.append(row)
        e = np.array(errors)
        diff = e[:, 1:] - e[:, :1]
        se = diff.std(axis=0, ddof=1) / np.sqrt(len(e))
        print(
            f"eps {eps:3.1f}: "
            + "  ".join(f"{v:.4f}" for v in e.mean(axis=0))
            + " | "
            + "  ".join(f"{m:+.4f} ± {s:.4f}" for m, s in zip(diff.mean(axis=0), se, strict=True)),
            flush=True,
        )


def pooled_posterior_mean(
    total: np.ndarray, channel: np.ndarray, want: int = 2000, seed: int = 0
) -> tuple[np.ndarray, int]:
    """A prototype, not shipped: the posterior mean of the pooled distribution under a flat
    prior on the simplex, instead of ``pooled_distribution``'s maximum. The channel maps a
    distribution ``p`` to report shares ``u = d p + other``, so the posterior of ``u`` is the
    Dirichlet of the report totals plus one, truncated to ``u >= other``: drawn by rejection
    (batches of 20,000, until ``want`` are kept or 50 batches are spent). Returns the mean and
    the draws kept; with none kept, the maximum likelihood fit."""
    keep, other = float(channel[0, 0]), float(channel[0, 1])
    rng = np.random.default_rng(seed)
    kept: list[np.ndarray] = []
    for _ in range(50):
        u = rng.dirichlet(total + 1.0, size=20_000)
        kept.append(u[(u >= other).all(axis=1)])
        if sum(len(k) for k in kept) >= want:
            break
    u = np.concatenate(kept)
    if len(u) == 0:
        return pooled_distribution(total, channel), 0
    p = ((u - other) / (keep - other)).mean(axis=0)
    return p / p.sum(), len(u)


def null_centre(args: argparse.Namespace) -> None:
    """AwareNull with its prior centred on the pooled distribution's maximum (shipped) or on its
    posterior mean (``pooled_posterior_mean``), on P3's designs: MAE change against P3's
    aggregator on the clean answers, ``--trials`` releases per setting, and the fewest draws
    the sampler kept."""
    import privtd.inference.aware_null as aware_null

    shipped = aware_null.pooled_distribution
    kept: list[int] = []

    def centred(total: np.ndarray, channel: np.ndarray) -> np.ndarray:
        mean, n = pooled_posterior_mean(total, channel)
        kept.append(n)
        return mean

    print("data                mechanism      eps | MAE change P3  maximum  posterior mean | kept")
    for name, answers, gold, truth, low, high in sparse_instances(args.seed):
        base = np.abs(WeightedAverage().fit(answers).truths_.to_numpy()[gold] - truth).mean()
        for mech_class in (KRRNull, TwoLayerNull):
            for eps in (0.1, 0.5, 1.0, 2.0):
                mech = mech_class.from_epsilon(eps, low, high)
                kept.clear()
                rows = []
                for r in range(args.trials):
                    released = mech.perturb(answers, rng=args.seed + 100 + r)
                    row = [WeightedAverage().fit(released).truths_.to_numpy()]
                    for pooled in (shipped, centred):
                        aware_null.pooled_distribution = pooled
                        try:
                            row.append(AwareNull(mech).fit(released).truths_.to_numpy())
                        finally:
                            aware_null.pooled_distribution = shipped
                    rows.append([np.abs(t[gold] - truth).mean() - base for t in row])
                m, se = np.mean(rows, axis=0), np.std(rows, axis=0, ddof=1) / np.sqrt(len(rows))
                print(
                    f"{name:18s}  {mech.name:14s} {eps:3.1f} | {m[0]:.3f}  {m[1]:.3f} ± {se[1]:.3f}"
                    f"  {m[2]:.3f} ± {se[2]:.3f} | {min(kept)}",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    modes = {
        "grr": grr,
        "grr-trials": grr_trials,
        "numeric": numeric,
        "sparse": sparse,
        "null-starts": null_starts,
        "null-trials": null_trials,
        "p0-oracle": p0_oracle,
        "p0-profile": p0_profile,
        "duchenne": duchenne,
        "duchenne-ratios": duchenne_ratios,
        "web-budgets": web_budgets,
        "k2-eb": k2_eb,
        "null-centre": null_centre,
    }
    parser.add_argument("mode", choices=tuple(modes), nargs="?", default="grr")
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--estimate",
        choices=("map", "variational"),
        default="map",
        help="sparse: AwareNull's estimate",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=100,
        help="crowds (grr-trials, null-trials), draws (p0-*), seeds (duchenne-ratios)",
    )
    parser.add_argument("--passes", type=int, default=300, help="web-budgets: the EM's cap")
    args = parser.parse_args()
    warnings.simplefilter("ignore", privtd.ConvergenceWarning)
    modes[args.mode](args)


if __name__ == "__main__":
    main()
