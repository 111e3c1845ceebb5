"""The browser page's numeric releases (src/privtd/service/static/exact.js, through perturb.js),
run by Node with the same crypto.getRandomValues as a browser; and the privacy figures the page
computes itself (static/ceiling.js) against privtd.mechanisms'.

- The floating-point consistency attack (Mironov 2012; benchmarks/attacks/float_page.mjs) finds
  no release that rules out a neighbouring answer, over 200,000 releases per mechanism; on the
  page's samplers at f7fad90 (kept in the attack script as the reference) it rules most out.
- The exact samplers (Canonne, Kamath and Steinke 2020, Algorithms 1-3) follow their laws:
  chi-square and binomial tests against pmfs computed here, in Python.

The draws come from the platform's secure generator and cannot be seeded, so each statistical
check is a test at level 1e-6 (a correct sampler fails one run in a million), with the sample
size fixed; a power check shows the same sample rejects a slightly wrong law.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

NODE = shutil.which("node")
ROOT = Path(__file__).parents[1]
EXACT = ROOT / "src" / "privtd" / "service" / "static" / "exact.js"
PERTURB = ROOT / "src" / "privtd" / "service" / "static" / "perturb.js"
CEILING = ROOT / "src" / "privtd" / "service" / "static" / "ceiling.js"
ATTACK = ROOT / "benchmarks" / "attacks" / "float_page.mjs"
N = 200_000  # releases per mechanism through the page
N_LAW = 100_000  # draws per law of a sampler
LEVEL = 1e-6

if NODE is None and os.environ.get("PRIVTD_TEST_NODE") == "require":
    raise RuntimeError("Node.js is required here (.ci/run sets PRIVTD_TEST_NODE=require).")
pytestmark = pytest.mark.skipif(NODE is None, reason="needs Node.js to run the browser module")


def node(body: str):
    """Run ``body`` as an ES module with exact.js as E, perturb.js's perturbWorker, ceiling.js
    as C and the attack module as A; it must write one JSON value to stdout."""
    program = f"""
    import * as E from {json.dumps(EXACT.as_uri())};
    import * as C from {json.dumps(CEILING.as_uri())};
    import {{ perturbWorker }} from {json.dumps(PERTURB.as_uri())};
    import * as A from {json.dumps(ATTACK.as_uri())};
    const histogram = (draw, n) => {{
      const h = {{}};
      for (let i = 0; i < n; i++) {{ const x = String(draw()); h[x] = (h[x] || 0) + 1; }}
      return h;
    }};
    {body}
    """
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", program], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def rational(x) -> str:
    """A Python number as the BigInt pair exact.js takes, e.g. ``7n, 3n``."""
    f = Fraction(x)
    return f"{f.numerator}n, {f.denominator}n"


def discrete_laplace_pmf(t: float, support: np.ndarray) -> np.ndarray:
    q = np.exp(-1.0 / t)
    return (1 - q) / (1 + q) * q ** np.abs(support)


def discrete_gaussian_pmf(var: float, support: np.ndarray) -> np.ndarray:
    """N_Z(0, var) on ``support``, normalised over all the integers (the law's mass beyond
    |x| = 40 sigma + 40 is below 1e-300)."""
    if var == 0:
        return (support == 0).astype(float)
    every = np.arange(-int(40 * np.sqrt(var)) - 40, int(40 * np.sqrt(var)) + 41)
    return np.exp(-(support**2) / (2 * var)) / np.exp(-(every**2) / (2 * var)).sum()


def chi_square(histogram: dict, pmf) -> float:
    """p-value of the counts (value -> count) against ``pmf(support)``: one bin per value with
    an expected count of at least 20, the rest of each tail pooled into the outermost one."""
    n = sum(histogram.values())
    width = max(abs(int(v)) for v in histogram) + 400  # the laws here have < 1e-20 beyond
    support = np.arange(-width, width + 1)
    probs = pmf(support)
    counts = np.zeros(support.size)
    for value, count in histogram.items():
        counts[int(value) + width] += count
    inner = np.flatnonzero(n * probs >= 20)
    lo, hi = inner[0], inner[-1]
    # Each tail is pooled into the outermost inner bin, which then holds the law's whole mass
    # beyond it: a tail bin of its own can expect 0.02 (N_Z(0, 0.3) beyond +-2 at 1e5 draws),
    # and one draw there (a 4% event) gave p-values near 1e-8, failing a correct sampler.
    observed = counts[lo : hi + 1].copy()
    observed[0] += counts[:lo].sum()
    observed[-1] += counts[hi + 1 :].sum()
    left = probs[:lo].sum()
    expected = n * probs[lo : hi + 1]
    expected[0] += n * left
    expected[-1] += n * max(0.0, 1 - probs[lo : hi + 1].sum() - left)
    return stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue


# --- (a) the attack on today's page, (c) the attack on the page at f7fad90 -------------------


def test_attack_finds_no_release_that_excludes_a_neighbour():
    # 200,000 releases per mechanism from perturbWorker: laplace at epsilon 1 (scores 1..5,
    # scale 5, answer 3) and exp-gaussian over [-3.7, 12.1] with the default granularity, both
    # checked for being low + J * g exactly (J an integer, which every answer reaches).
    out = node(f"process.stdout.write(JSON.stringify(A.attackAfter({N})));")
    assert out["releases"] == N
    for mechanism in ("laplace", "exp_gaussian"):
        assert out[mechanism] == {"off_grid": 0, "excluded": 0}, (mechanism, out)


def test_the_attack_rules_out_neighbours_on_the_old_page_sampler():
    # f7fad90's page: about 65 to 70% of laplace releases are impossible from a neighbouring
    # score (measured 64% and 70% over 200,000), and at least 20% of exp-gaussian releases from
    # a neighbouring answer (a lower bound: the attack counts any double as a possible noise
    # value). The attack never rules out the true answer (its soundness).
    n = 20_000
    out = node(f"process.stdout.write(JSON.stringify(A.attackBefore({n})));")
    lap, gauss = out["laplace"], out["exp_gaussian"]
    assert lap["excluded_by_truth"] == 0 and gauss["excluded_by_truth"] == 0
    # Thresholds some 30 binomial standard deviations (about 0.35% here) below the measures.
    assert lap["excluded_by_4"] > 0.5 * n and lap["excluded_by_2"] > 0.5 * n
    assert lap["excluded_by_some_other_score"] > 0.9 * n
    assert gauss["excluded_by_4_1"] > 0.1 * n


def test_the_attack_sees_an_off_grid_release():
    # The grid check is not vacuous: the double next to a grid value is off the grid.
    out = node("""
      const g = 15.8 / 1024, low = -3.7, y = low + 517 * g;
      const next = y + 2 ** -49;
      process.stdout.write(JSON.stringify([A.gridStep(y, low, g), A.reachableGrid(next, low, g)]));
    """)
    assert out == [517, False]


# --- (b) the exact samplers' laws ------------------------------------------------------------


@pytest.mark.parametrize("t", [5, 2.5, 0.7, 5 / 0.7])
def test_discrete_laplace_law(t):
    hist = node(f"""
      const [num, den] = E.floatToRational({t!r});
      process.stdout.write(JSON.stringify(histogram(() => E.discreteLaplace(num, den), {N_LAW})));
    """)
    assert chi_square(hist, lambda s: discrete_laplace_pmf(t, s)) > LEVEL
    # Power: the same sample rejects a scale 10% off.
    assert chi_square(hist, lambda s: discrete_laplace_pmf(1.1 * t, s)) < LEVEL


# The last variance is the page's kind: s = S / 2^30 (here s near 1.3), s^2 over 2^60.
@pytest.mark.parametrize(
    "var", [Fraction(3, 10), Fraction(7, 3), Fraction(9, 4), 20, Fraction(1395864371, 2**30) ** 2]
)
def test_discrete_gaussian_law(var):
    hist = node(f"""
      const draw = () => E.discreteGaussian({rational(var)});
      process.stdout.write(JSON.stringify(histogram(draw, {N_LAW})));
    """)
    assert chi_square(hist, lambda s: discrete_gaussian_pmf(float(var), s)) > LEVEL
    assert chi_square(hist, lambda s: discrete_gaussian_pmf(1.1 * float(var), s)) < LEVEL


def test_discrete_gaussian_of_zero_variance_is_zero():
    assert node("process.stdout.write(JSON.stringify(String(E.discreteGaussian(0n, 7n))));") == "0"


@pytest.mark.parametrize("gamma", [0, Fraction(1, 2), 1, Fraction(7, 3), Fraction(11, 2), 0.1])
def test_bernoulli_exp_frequency(gamma):
    hits = node(f"""
      let hits = 0;
      for (let i = 0; i < {N_LAW}; i++) if (E.bernoulliExp({rational(gamma)})) hits++;
      process.stdout.write(JSON.stringify(hits));
    """)
    p = float(np.exp(-float(gamma)))
    if gamma == 0:
        assert hits == N_LAW
    else:
        assert stats.binomtest(hits, N_LAW, p).pvalue > LEVEL


def test_bernoulli_and_uniform_beyond_two_to_the_53():
    # The BigInt paths: a denominator above 2^53 (digit-by-digit comparison) and a range above
    # 2^53 (rejection on its bits).
    out = node(f"""
      let hits = 0;
      for (let i = 0; i < {N_LAW}; i++) if (E.bernoulli(2n ** 70n + 1n, 3n * 2n ** 69n)) hits++;
      const thirds = histogram(() => E.uniformBelow(3n * 2n ** 60n) >> 60n, {N_LAW});
      process.stdout.write(JSON.stringify([hits, thirds]));
    """)
    hits, thirds = out
    assert stats.binomtest(hits, N_LAW, float(Fraction(2**70 + 1, 3 * 2**69))).pvalue > LEVEL
    assert stats.chisquare([thirds[k] for k in ("0", "1", "2")]).pvalue > LEVEL


def test_float_to_rational_is_exact():
    values = [5.0, 0.1, -3.5, 5 / 0.7, 5e-324, 1e-310, 2.0**60, 1e300, 0.0, -0.0]
    out = node(f"""
      process.stdout.write(JSON.stringify({json.dumps(values)}.map((x) =>
        E.floatToRational(x).map(String))));
    """)
    assert [(int(a), int(b)) for a, b in out] == [v.as_integer_ratio() for v in values]


# --- the page's laws, through perturbWorker -------------------------------------------------


def test_page_laplace_law():
    # Answer 4 and a NULL filled with 2: 4 + DL(1.5) and 2 + DL(1.5); with the uniform fill, a
    # NULL is a fifth of DL(1.0) around each score 0..4.
    out = node(f"""
      const fixed = {{ name: "laplace", params: {{ scale: 1.5, low: 0, high: 4, fill: 2 }} }};
      const uniform = {{ name: "laplace", params: {{ scale: 1.0, low: 0, high: 4, fill: null }} }};
      const a = {{}}, b = {{}}, c = {{}};
      const add = (h, x) => {{ h[x] = (h[x] || 0) + 1; }};
      for (let i = 0; i < {N}; i++) {{
        const [[, y0], [, y1]] = perturbWorker(fixed, {{ t0: 4 }}, null, ["t0", "t1"]);
        add(a, y0); add(b, y1);
        add(c, perturbWorker(uniform, {{}}, null, ["t0"])[0][1]);
      }}
      process.stdout.write(JSON.stringify([a, b, c]));
    """)
    around, fill, mixed = out
    assert chi_square(around, lambda s: discrete_laplace_pmf(1.5, s - 4)) > LEVEL
    assert chi_square(fill, lambda s: discrete_laplace_pmf(1.5, s - 2)) > LEVEL
    mixture = lambda s: np.mean([discrete_laplace_pmf(1.0, s - k) for k in range(5)], axis=0)  # noqa: E731
    assert chi_square(mixed, mixture) > LEVEL


def exp_gaussian_pmf(rate: float, g: float, support: np.ndarray) -> np.ndarray:
    """The law of k' - k: N_Z(0, s^2) mixed over s = sqrt(v) / g, v ~ Exp(rate), integrated
    over v's quantile u (v = -log(u) / rate). The page's 2^-30 rounding of s moves it by less
    than 1e-8, far below what 200,000 draws resolve."""

    def at(u):
        var = -np.log(u) / rate / g**2
        return discrete_gaussian_pmf(var, support)

    value, _ = integrate.quad_vec(at, 0, 1, epsabs=1e-10, points=[1e-12, 0.5])
    return value


def test_page_exp_gaussian_law():
    # One answer per call, so each release draws its own secret variance: the releases follow
    # the mixture. Answer 3 on [0, 10] with granularity 0.5 is the code 6.
    rate, g = 0.5, 0.5
    steps = node(f"""
      const params = {{ rate: {rate}, low: 0, high: 10, granularity: {g} }};
      const m = {{ name: "exp-gaussian", params }};
      process.stdout.write(JSON.stringify(histogram(() => {{
        const y = perturbWorker(m, {{ t0: 3 }}, null, ["t0"])[0][1];
        return A.gridStep(y, 0, {g}) - 6;
      }}, {N})));
    """)
    assert chi_square(steps, lambda s: exp_gaussian_pmf(rate, g, s)) > LEVEL
    # Power: a rate 10% off is rejected.
    assert chi_square(steps, lambda s: exp_gaussian_pmf(1.1 * rate, g, s)) < LEVEL


def test_one_secret_scale_per_call():
    # Every answer of a call shares s: with many answers, the spread of a call's noise varies
    # from call to call far more than independent scales would make it.
    out = node("""
      const m = { name: "exp-gaussian", params: { rate: 0.5, low: 0, high: 10, granularity: 0.5 } };
      const answers = Object.fromEntries(Array.from({ length: 400 }, (_, i) => [`t${i}`, 5]));
      const spreads = [];
      for (let i = 0; i < 200; i++) {
        const ys = perturbWorker(m, answers, null, Object.keys(answers)).map((p) => p[1] - 5);
        spreads.push(Math.sqrt(ys.reduce((a, y) => a + y * y, 0) / ys.length));
      }
      process.stdout.write(JSON.stringify(spreads));
    """)
    spreads = np.array(out)
    # With one s per call, a call's RMS noise is about s * g, whose quantiles spread widely
    # (v ~ Exp: the 10% and 90% quantiles of sqrt(v) differ by a factor 4.7); with a fresh s
    # per answer every call's RMS would be within a few percent of the mixture's.
    assert np.quantile(spreads, 0.9) > 2.5 * np.quantile(spreads, 0.1)


def test_the_grid_is_the_same_doubles_as_in_python():
    # discrete.md's grid: n = floor((high - low) / g + 0.5), k = floor((x - low) / g + 0.5)
    # clipped to [0, n], release low + k' * g; IEEE arithmetic makes Python's the same doubles.
    low, high = -3.7, 12.1
    g = (high - low) / 1024
    xs = [low, high, *np.random.default_rng(0).uniform(low, high, 2000).tolist()]
    steps = list(range(-3000, 3000, 7))
    out = node(f"""
      const grid = E.expGaussianGrid({{ low: {low}, high: {high}, granularity: {g!r} }});
      const xs = {json.dumps(xs)}, steps = {json.dumps(steps)};
      process.stdout.write(JSON.stringify([grid.n, xs.map(grid.code),
                                           steps.map((j) => grid.low + j * grid.g)]));
    """)
    n = int(np.floor((high - low) / g + 0.5))
    codes = [min(n, max(0, int(np.floor((x - low) / g + 0.5)))) for x in xs]
    assert out == [n, codes, [low + j * g for j in steps]]


EG = {"name": "exp-gaussian", "params": {"rate": 0.5, "low": 0, "high": 10, "granularity": 0.5}}
LAP = {"name": "laplace", "params": {"scale": 5, "low": 1, "high": 5, "fill": None}}


@pytest.mark.parametrize(
    ("mechanism", "answers", "message"),
    [
        (
            {"name": "exp-gaussian", "params": {"rate": 0.5, "low": 0, "high": 10}},
            {"t": 1},
            "granularity",
        ),
        (
            {
                "name": "exp-gaussian",
                "params": {"rate": 0.5, "low": 0, "high": 10, "granularity": 0.5},
            },
            {"t": 11},
            "from 0 to 10",
        ),
        (
            {"name": "laplace", "params": {"scale": 5, "low": 1, "high": 5, "fill": None}},
            {"t": 2.5},
            "an integer from 1 to 5",
        ),
        (
            {"name": "laplace", "params": {"scale": 5, "low": 1, "high": 5, "fill": None}},
            {"t": 6},
            "an integer from 1 to 5",
        ),
        ({"name": "laplace", "params": {"scale": 5, "low": 1, "high": 5, "fill": 2.5}}, {}, "fill"),
    ],
)
def test_the_page_refuses_what_is_off_the_grid(mechanism, answers, message):
    out = node(f"""
      try {{
        perturbWorker({json.dumps(mechanism)}, {json.dumps(answers)}, null, ["t"]);
        process.stdout.write(JSON.stringify(null));
      }} catch (error) {{ process.stdout.write(JSON.stringify(error.message)); }}
    """)
    assert out is not None and message in out, out


def test_every_random_decision_comes_from_crypto():
    # The page's three files: no draw from Math.random (not a cryptographic generator).
    for script in (EXACT, PERTURB, PERTURB.with_name("collect.html")):
        text = script.read_text()
        assert "Math.random" not in text
        assert "getRandomValues" in text


def test_page_secret_variance_keeps_the_exponential_tail():
    # benchmarks/attacks/attack_expgauss_tail.py: -ln of a 53-bit uniform stops at 53 ln 2 / rate
    # (36.7 at rate 1), and past ~60 noise scales the loss of the mixture so truncated exceeds
    # epsilon. Fed a run of zero bits, the page's sampler must go past that cap. rate 1, g 1:
    # S / 2^30 = sqrt(v).
    out = node("""
      const real = globalThis.crypto;
      let zeroFills = 1;
      Object.defineProperty(globalThis, "crypto", { configurable: true, value: {
        getRandomValues: (a) => (zeroFills-- > 0 ? a.fill(0) : real.getRandomValues(a)),
      } });
      const s = Number(E.expGaussianScale(1, 1)) / 2 ** 30;
      Object.defineProperty(globalThis, "crypto", { configurable: true, value: real });
      const draws = Array.from({ length: 200000 }, () => E.exponential());
      process.stdout.write(JSON.stringify({ v: s * s, draws }));
    """)
    assert out["v"] > 100 * math.log(2) > 53 * math.log(2)
    assert stats.kstest(np.array(out["draws"]), "expon").pvalue > 1e-6


# --- the figures the page computes for k answers under one draw ---------------------------


def test_the_page_computes_two_layers_shared_draw_figures_as_python_does():
    # ceiling.js mirrors privtd.mechanisms._shared_draw: one answer given the other k - 1 of
    # the same draw, and the whole release, on a grid of (k, s, a, b), to 1e-9 relative (the
    # two differ only in rounding: numpy's and the page's Gauss-Legendre nodes, summation order).
    from privtd.mechanisms._shared_draw import shared_flip_epsilons

    grid = [
        (k, s, a, b)
        for k in (1, 2, 3, 20, 100, 1000, 20_000)
        for s in (2, 3, 7)
        for a, b in ((0.0, 1.0), (0.0, 0.5378828427399902), (0.05, 0.4879), (0.2, 0.2), (0.0, 0.3))
        if k < 20_000 or (s == 2 and a == 0.0 and b < 0.6)
    ]
    out = node(
        f"process.stdout.write(JSON.stringify({json.dumps(grid)}.map("
        "([k, s, a, b]) => C.sharedFlipEpsilons(k, s, a, b))));"
    )
    for (k, s, a, b), got in zip(grid, out, strict=True):
        want = shared_flip_epsilons(k, s, a, b)
        for g, w in zip(got, want, strict=True):
            assert g == pytest.approx(w, rel=1e-9, abs=1e-12), (k, s, a, b, got, want)
    # a = b = 0 never flips: infinite, as in Python (JSON writes Infinity as null).
    assert node("process.stdout.write(JSON.stringify(C.sharedFlipEpsilons(5, 2, 0, 0)));") == [
        None,
        None,
    ]


def test_the_page_figures_for_each_served_mechanism_and_fails_closed():
    # Independent answers: the mechanism's epsilon per answer given the others, k times it for
    # all k (Python's answer_epsilon / release_epsilon). Two-layer: the shared-draw figures.
    # exp-gaussian and two-layer-null share a secret draw the page has no figures for: it
    # refuses them rather than use the server's number.
    from privtd.mechanisms import make_mechanism

    cases = [
        ("one-layer", {"epsilon": 1.3, "n_labels": 4}, ["a", "b", "c", "d"]),
        ("binary-rr", {"epsilon": 0.7}, ["a", "b"]),
        ("two-layer", {"epsilon": 1.0, "n_labels": 2}, ["a", "b"]),
        ("two-layer", {"epsilon": 2.0, "n_labels": 3, "a": 0.05}, ["a", "b", "c"]),
        ("krr-null", {"epsilon": 1.5, "low": 1, "high": 5}, None),
        ("laplace", {"epsilon": 0.8, "low": 1, "high": 5}, None),
    ]
    mechs = []
    for name, kw, labels in cases:
        kw = dict(kw)
        mech = make_mechanism(name, kw.pop("epsilon"), **kw)
        params = {k: (v.item() if hasattr(v, "item") else v) for k, v in mech.params().items()}
        mechs.append(({"name": name, "params": params}, labels, mech))
    refused = [
        ("exp-gaussian", {"epsilon": 2.5, "low": 0.0, "high": 10.0}),
        ("two-layer-null", {"epsilon": 1.5, "low": 1, "high": 5}),
    ]
    closed = []
    for name, kw in refused:
        kw = dict(kw)
        mech = make_mechanism(name, kw.pop("epsilon"), **kw)
        params = {k: (v.item() if hasattr(v, "item") else v) for k, v in mech.params().items()}
        closed.append(
            {
                "name": "c",
                "labels": None,
                "whole_row": name == "two-layer-null",
                "n_tasks": 5,
                "mechanism": {"name": name, "params": params, "epsilon": 0.1, "unit": "answer"},
            }
        )
    out = node(
        f"""
        const figures = {json.dumps([[m, labels] for m, labels, _ in mechs])}.map(
          ([m, labels]) => [1, 7, 30].map((k) => C.releaseFigures(m, labels, k)));
        const ceiling = C.loadCeiling({{ getItem: () => null }});
        const refusals = {json.dumps(closed)}.map((c) => C.refuseCampaign(ceiling, c));
        process.stdout.write(JSON.stringify({{ figures, refusals }}));
        """
    )
    for (m, _, mech), got in zip(mechs, out["figures"], strict=True):
        for k, fig in zip((1, 7, 30), got, strict=True):
            assert fig["perAnswer"] == pytest.approx(mech.answer_epsilon(k), rel=1e-9), m
            assert fig["whole"] == pytest.approx(mech.release_epsilon(k), rel=1e-9), m
    for reason in out["refusals"]:
        assert "cannot compute" in reason and "does not take the server's word" in reason


def test_the_page_refuses_a_submission_past_the_ceiling_given_the_others():
    # Two-layer a = 0, b = 1 states epsilon 0: one answer alone passes a ceiling of 3, but 100
    # answers of one submission keep ln 100 = 4.61 each given the other 99; the page names the
    # figure and the largest submission within the ceiling (20: ln 20 = 3.00).
    campaign = {
        "name": "c",
        "labels": ["no", "yes"],
        "whole_row": False,
        "n_tasks": 100,
        "mechanism": {
            "name": "two-layer",
            "params": {"a": 0.0, "b": 1.0, "n_labels": 2},
            "epsilon": 0.0,
            "unit": "answer",
        },
    }
    out = node(
        f"""
        const c = {json.dumps(campaign)};
        const ceiling = C.loadCeiling({{ getItem: () => null }});
        process.stdout.write(JSON.stringify([1, 20, 21, 100].map(
          (k) => C.refuseCampaign(ceiling, c, k))));
        """
    )
    assert out[0] is None and out[1] is None
    assert "epsilon 3.045 per answer, given your other 20 answers" in out[2]
    assert "epsilon 4.605 per answer, given your other 99 answers" in out[3]
    assert "Send at most 20 per submission" in out[3]


def test_the_page_draws_a_fresh_flip_probability_for_each_submission():
    # perturbWorker is one submission: two-layer's f_u is drawn once per call and shared by
    # that call's answers. 20 calls of 2,000 answers under a = 0, b = 1: the calls' flip rates
    # spread like U(0, 1) (variance 1/12), not one f_u's binomial noise (at most 1.25e-4); the
    # sample variance of 20 uniforms is below 0.01 with probability under 1e-9.
    mechanism = {"name": "two-layer", "params": {"a": 0.0, "b": 1.0, "n_labels": 2}}
    out = node(
        f"""
        const answers = Object.fromEntries(
          Array.from({{ length: 2000 }}, (_, i) => [`t${{i}}`, "no"]));
        const rates = Array.from({{ length: 20 }}, () => {{
          const out = perturbWorker({json.dumps(mechanism)}, answers, ["no", "yes"]);
          return out.filter(([, v]) => v === "yes").length / out.length;
        }});
        process.stdout.write(JSON.stringify(rates));
        """
    )
    assert np.var(out, ddof=1) > 0.01, out


def test_the_page_says_what_the_campaign_costs_before_the_first_answer():
    # The campaign of 108 tasks at epsilon 1 with a budget of 108: a worker with the default
    # lifetime ceiling (100) can answer 100 of them, and the page says so before any answer
    # (before, it said so only once all 108 were chosen, refusing them). Then: 30 spent in
    # another campaign leaves 70; a budget of 50 stops at 50; a cap of 20 per worker; two-layer
    # with a = 0 over 100 tasks, where one submission fits 20 (ln 20 = 3.00 per answer).
    def campaign(n, budget, mechanism=None, **extra):
        return {
            "name": "c",
            "labels": ["no", "yes"],
            "whole_row": False,
            "n_tasks": n,
            "budget": budget,
            "mechanism": mechanism
            or {
                "name": "one-layer",
                "params": {"f": 1 / (1 + math.e), "n_labels": 2},
                "epsilon": 1.0,
                "unit": "answer",
            },
            **extra,
        }

    two_layer = {
        "name": "two-layer",
        "params": {"a": 0.0, "b": 1.0, "n_labels": 2},
        "epsilon": 0.0,
        "unit": "answer",
    }
    cases = [
        (campaign(108, 108.0), {}),
        (campaign(108, 108.0), {"elsewhere": 30}),
        (campaign(108, 50.0), {}),
        (campaign(108, 108.0, max_answers_per_worker=20), {}),
        (campaign(100, 1000.0, two_layer), {}),
        (campaign(5, 10.0), {}),
    ]
    out = node(
        f"""
        const plans = {json.dumps(cases)}.map(([c, spent]) => {{
          const ceiling = C.loadCeiling({{ getItem: () => null }});
          ceiling.spent = spent;
          return C.campaignPlan(ceiling, c, "here");
        }});
        process.stdout.write(JSON.stringify(plans));
        """
    )
    fits = [p["fits"] for p in out]
    assert fits == [100, 70, 50, 20, 20, 5]
    assert out[0]["cost"] == pytest.approx(108.0) and out[0]["room"] == pytest.approx(100.0)
    assert "you can answer 100 of the 108 tasks" in out[0]["text"]
    assert "raise your lifetime ceiling" in out[0]["text"]
    assert "you can answer 70 of the 108" in out[1]["text"]
    assert "the campaign's budget allows no more" in out[2]["text"]
    assert out[3]["all"] == 20 and "takes at most 20 per worker" in out[3]["text"]
    assert "you can answer all 20" in out[3]["text"]
    assert "more would pass your ceiling per answer" in out[4]["text"]
    assert out[5]["text"].endswith("you can answer all 5.")


def test_two_tabs_recording_at_once_keep_both_spends():
    # Two tabs read the ceiling, then each records its own campaign's release: the second
    # record must not write back the ledger it read before the first one's.
    out = node(
        """
        const items = {};
        const storage = { getItem: (k) => items[k] ?? null, setItem: (k, v) => { items[k] = v; } };
        const tabA = C.loadCeiling(storage), tabB = C.loadCeiling(storage);
        C.record(storage, tabA, "a", 2);
        C.record(storage, tabB, "b", 3);
        C.record(storage, tabA, "a", 1);  // never lowers a recorded total
        const order = [];
        const viaLock = await (async () => {
          globalThis.navigator = { locks: { request: async (name, fn) => {
            order.push(name); const r = await fn(); order.push("released"); return r; } } };
          return C.withCeilingLock(() => { order.push("ran"); return 7; });
        })();
        delete globalThis.navigator;
        const unlocked = await C.withCeilingLock(() => 8);
        process.stdout.write(JSON.stringify(
          { spent: C.loadCeiling(storage).spent, viaLock, order, unlocked }));
        """
    )
    assert out["spent"] == {"a": 2, "b": 3}
    assert out["viaLock"] == 7 and out["order"] == ["privtd:ceiling", "ran", "released"]
    assert out["unlocked"] == 8


def test_two_tabs_of_one_campaign_cannot_pass_the_lifetime_ceiling_together():
    # Both tabs read their state (spent 0) before either sent; the second tab's check starts
    # from the ledger's figure for the campaign, which the first tab's release raised.
    out = node(
        """
        const items = {};
        const storage = { getItem: (k) => items[k] ?? null, setItem: (k, v) => { items[k] = v; } };
        C.saveCeiling(storage, { perAnswer: 3, lifetime: 5, spent: { other: 2 } });
        const key = "http://x c1";
        const tabA = { spent: 0 }, tabB = { spent: 0 };
        const step = (s, stored, cost) => {  // collect.html's locked step
          const ceiling = C.loadCeiling(storage);
          s.spent = C.spentBefore(ceiling, key, s, stored);
          if (C.refuseSpend(ceiling, key, s.spent + cost)) return false;
          C.record(storage, ceiling, key, s.spent + cost);
          s.spent += cost;
          return true;
        };
        const a = step(tabA, null, 2), b = step(tabB, null, 2);
        const ledger = C.loadCeiling(storage);
        process.stdout.write(JSON.stringify({ a, b, total: C.lifetimeTotal(ledger),
          fromState: C.spentBefore(ledger, key, { spent: 3.5 }, null) }));
        """
    )
    assert out["a"] is True and out["b"] is False
    assert out["total"] == 4
    assert out["fromState"] == 3.5  # a state's higher figure counts too
