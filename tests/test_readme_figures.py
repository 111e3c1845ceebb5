"""Figures the README and the docs quote agree with the results files they come from: a figure
copied by hand drifts when a run is redone, and then the docs claim what no file shows. Each
test reads the quoted text and the stored output, so it fails when
either side changes without the other.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = (ROOT / "README.md").read_text(encoding="utf-8")
REPRODUCTION = (ROOT / "docs" / "reproduction.md").read_text(encoding="utf-8")

# ---------------------------------------------------------------- the reproductions


def _seconds(text: str) -> float:
    m = re.search(r"about (\d+(?:\.\d+)?) (s|min)\b", text)
    assert m, f"no 'about N s' or 'about N min' in {text!r}"
    return float(m.group(1)) * (60.0 if m.group(2) == "min" else 1.0)


def test_readme_kdd18_time_matches_the_stored_runs() -> None:
    line = next(
        x for x in README.splitlines() if x.startswith("privtd reproduce kdd18 --trials 100")
    )
    quoted = _seconds(line)
    # The 1,000-trial run's time per 100 trials is the reference, within a factor of 2 either
    # way (the README's "about 20 s" was off by more than 3x).
    header = (RESULTS / "kdd18_1000_trials.txt").read_text(encoding="utf-8").splitlines()[0]
    m = re.search(r"--trials (\d+) .*\((\d+) s wall", header)
    assert m, header
    per_100 = float(m.group(2)) * 100 / float(m.group(1))
    assert 0.5 <= quoted / per_100 <= 2.0, (quoted, per_100)
    # A run at the default 100 trials beside other jobs bounds it from above.
    loaded = (RESULTS / "reproduce_defaults_loaded.txt").read_text(encoding="utf-8")
    wall = re.search(r"^## kdd18: (\d+) s wall", loaded, re.M)
    assert wall and quoted <= float(wall.group(1))


def test_icdcs20_headline_quotes_its_own_table() -> None:
    # The headline check and the table above it come from the same run (--trials 50).
    headline = re.search(r"CRH MAE (0\.\d+);", REPRODUCTION)
    row = re.search(
        r"^\| fig2_crh \| 150 \| 1 \| 2 \| [\d.]+ \| [\d.]+ \| (0\.\d+) ±", REPRODUCTION, re.M
    )
    assert headline and row
    assert abs(float(headline.group(1)) - float(row.group(1))) <= 0.0005 + 1e-12


# ---------------------------------------------------------------- the scale table

SCALE_ROWS = [
    ("1e8 answers, majority vote", "scale-1e8.txt", "mv", "seconds", "peak_rss_gb"),
    ("1e8 answers, weighted vote", "scale-1e8.txt", "wv", "seconds", "peak_rss_gb"),
    ("1e8 answers, one-coin DS", "scale-1e8.txt", "one-coin-ds", "seconds", "peak_rss_gb"),
    ("1e7 numeric answers, CRH", "numeric-1e7.txt", "crh", "privtd_s", None),
    ("1e7 numeric answers, CATD", "numeric-1e7.txt", "catd", "privtd_s", None),
    ("1e7 numeric answers, GTM", "numeric-1e7.txt", "gtm", "privtd_s", None),
]


def _records(name: str, method: str) -> list[dict]:
    out = []
    for line in (RESULTS / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("method") == method:
                out.append(record)
    return out


def _numbers(cell: str, unit: str) -> list[float]:
    # "72.5 s and 179.6 s" -> [72.5, 179.6]; "3.2-3.5 GB" -> [3.2, 3.5]
    return [float(x) for x in re.findall(rf"(\d+(?:\.\d+)?)(?=(?:-[\d.]+)? {unit}\b|-)", cell)]


@pytest.mark.parametrize(("label", "name", "method", "time_key", "memory_key"), SCALE_ROWS)
def test_scale_table_quotes_every_run(
    label: str, name: str, method: str, time_key: str, memory_key: str | None
) -> None:
    row = next(line for line in README.splitlines() if line.startswith(f"| {label}"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    records = _records(name, method)
    assert records, f"{name} has no run of {method}"
    # Every stored run is quoted (to the 0.1 s the file holds), and nothing else is.
    assert sorted(_numbers(cells[1], "s")) == sorted({round(r[time_key], 1) for r in records})
    if memory_key is not None:
        quoted = _numbers(cells[2], "GB")
        peaks = [r[memory_key] for r in records]
        assert all(any(abs(q - p) <= 0.051 for q in quoted) for p in peaks), (quoted, peaks)
        assert all(any(abs(q - p) <= 0.051 for p in peaks) for q in quoted), (quoted, peaks)


# ---------------------------------------------------------------- the fidelity count

# Where each experiment's stored checks are: the checks table `privtd reproduce NAME` writes
# (checks.md), kept under a heading of a results file.
CHECK_SOURCES = {
    "kdd18": ("reproduce_defaults_loaded.txt", "## kdd18:"),
    "icdcs20": ("reproduce_defaults_loaded.txt", "## icdcs20:"),
    "bigdata18": ("reproduce_defaults_loaded.txt", "## bigdata18:"),
    "ladp": ("reproduce_defaults_loaded.txt", "## ladp:"),
    "dmkd14": ("reproduce_defaults_loaded.txt", "## dmkd14:"),
}


def _stored_checks(name: str, heading: str) -> list[dict[str, str]]:
    lines = (RESULTS / name).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    out = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        verdict = re.search(r"\| \*\*(reproduced|in trend|differs)\*\* \|$", line)
        if verdict:
            claim = line[2:].split(" | ")[0]
            out.append({"claim": claim, "ours": "", "verdict": verdict.group(1)})
    assert out, f"no checks under {heading!r} in {name}"
    return out


def test_readme_reproduction_count_is_the_stored_checks() -> None:
    from privtd.experiments import checks

    stored = {exp: _stored_checks(*where) for exp, where in CHECK_SOURCES.items()}
    counts = checks.summary(stored)
    # Both kinds are present, so the test would notice one folded into the other.
    assert sum(counts["papers"].values()) and sum(counts["beyond"].values())
    sentence = checks.summary_sentence(counts)
    assert sentence in " ".join(README.split()), sentence
    assert sentence in " ".join(REPRODUCTION.split()), sentence


# ---------------------------------------------------------------- docs/privacy.md

PRIVACY = (ROOT / "docs" / "privacy.md").read_text(encoding="utf-8")


def _jsonl(name: str) -> list[dict]:
    text = (RESULTS / name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _row_in(text: str, prefix: str) -> list[str]:
    rows = [line for line in text.splitlines() if line.startswith(prefix)]
    assert len(rows) == 1, (prefix, rows)
    return [c.strip() for c in rows[0].strip("|").split(" | ")]


def _row(prefix: str) -> list[str]:
    return _row_in(PRIVACY, prefix)


def test_privacy_audit_table_is_the_stored_audit() -> None:
    records = _jsonl("audit_table.jsonl")
    section = PRIVACY.split("## Audit", 1)[1].split("##", 1)[0]
    table_rows = [
        line
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| mechanism")
    ]
    assert len(table_rows) == len(records)
    for r in records:
        cells = _row_in(section, f"| {r['row']} |")
        assert cells[1] == f"`{r['command']}`"
        assert float(cells[2]) == round(r["claimed_epsilon"], 3)
        assert float(cells[3]) == round(r["lower_bound"], 3)
        assert cells[4].startswith(r["verdict"].split(" (")[0])


def test_privacy_attack_tables_are_the_stored_attack() -> None:
    records = _jsonl("attack_tables.jsonl")
    synthetic = [r for r in records if r["crowd"] == "synthetic"]
    duchenne = [r for r in records if r["crowd"] == "duchenne"]
    assert synthetic and duchenne
    for eps in sorted({r["epsilon"] for r in synthetic}):
        one, two = (
            next(r for r in synthetic if r["epsilon"] == eps and r["mechanism"] == m)
            for m in ("one-layer", "two-layer")
        )
        cells = _row(f"| {eps:g} | 0.")
        want = [one["as_reported"], one["recovered"], two["as_reported"], two["recovered"]]
        assert [float(c) for c in cells[1:]] == [round(x, 4) for x in want]
    for r in duchenne:
        cells = _row(f"| {r['epsilon']:g} | {r['mechanism']} |")
        assert cells[2] == f"{r['as_reported']:.4f}"
        assert cells[3] == f"{r['recovered']:.4f} ± {r['recovered_se']:.4f}"
        assert cells[4] == f"{r['inverted_workers']:.1f}"
    chance = re.search(r"chance \(most common original answer\): (0\.\d+)", PRIVACY)
    assert chance and chance.group(1) == f"{duchenne[0]['chance']:.4f}"


# ---------------------------------------------------------------- mechanisms and secure EM


def test_readme_mechanism_times_are_the_stored_benchmark() -> None:
    runs = {r["what"]: r for r in _jsonl("mechanisms.txt")}
    text = " ".join(README.split())
    assert f"1e7 answers takes {runs['one-layer batch, seed']['seconds']:.1f} s" in text
    assert f"({runs['one-layer batch, generator']['seconds']:.1f} s with a Generator)" in text
    assert f"d = 100 {runs['mf batch, d=100']['seconds']:.1f} s" in text
    assert f"on its device {runs['two-layer record-local, 100 answers']['ms']:.2f} ms" in text


def test_readme_secure_em_times_are_the_stored_run() -> None:
    stored = (RESULTS / "secure_duchenne.txt").read_text(encoding="utf-8")
    inproc = re.search(r"^masking, in-process: .* total ([\d.]+) s", stored, re.M)
    procs = re.search(r"^masking, one process per worker: .* total ([\d.]+) s", stored, re.M)
    assert inproc and procs
    text = " ".join(README.split())
    assert (
        f"converges in {float(inproc.group(1)):.0f} s in-process and "
        f"{float(procs.group(1)):.0f} s with one process per worker" in text
    )


# ---------------------------------------------------------------- the 1e6 comparison table

METHODS = {"majority vote": "mv", "Dawid-Skene": "ds", "one-coin DS": "one-coin-ds"}


@pytest.mark.parametrize("label", [f"{m}, K = {k}" for m in METHODS for k in (2, 5)])
def test_readme_crowdkit_table_is_the_stored_run(label: str) -> None:
    method, k = label.rsplit(", K = ", 1)
    stored = next(
        r
        for r in _jsonl("inference-1e6-pandas2.txt")[1:]
        if r.get("data") == f"synthetic K={k}"
        and r.get("method") == METHODS[method]
        and r.get("n_answers") == 1_000_000
    )
    cells = _row_in(README, f"| {label} |")
    ours, theirs, ratio, with_coding, same = (float(re.sub(r"[sx% ]", "", c)) for c in cells[1:])
    # The README rounds: privtd's time to 1 ms, crowd-kit's to 3 digits, ratios to whole or
    # tenths, agreement to 0.01%.
    assert abs(ours - stored["privtd_s"]) <= 0.0005 + 1e-9
    assert abs(theirs - stored["crowdkit_s"]) <= 0.005 * stored["crowdkit_s"]
    assert abs(ratio - stored["ratio"]) <= 0.5
    assert abs(with_coding - stored["ratio_with_coding"]) <= 0.5
    assert abs(same - 100 * stored["same_label"]) <= 0.005 + 1e-9


def _whole(x: float) -> int:
    # Half up, as the README rounds (format's half-to-even turns 76.5 into 76).
    return int(x + 0.5)


def test_readme_1e7_ratios_are_the_stored_run() -> None:
    stored = {
        (r["method"], r["data"][-1]): r
        for r in _jsonl("inference-1e7-pandas2.txt")[1:]
        if r.get("n_answers") == 10_000_000
    }
    text = " ".join(README.split())
    for label, method in (("Dawid-Skene", "ds"), ("one-coin", "one-coin-ds")):
        pair = f"{_whole(stored[(method, '2')]['ratio'])}x"
        assert f"{label} {pair}" in text, (label, pair)
    mv = f"majority vote {_whole(stored[('mv', '2')]['ratio'])}x and "
    mv += f"{_whole(stored[('mv', '5')]['ratio'])}x"
    assert mv in text
    same = sorted(r["same_label"] for r in stored.values())
    assert f"with {100 * same[0]:.2f}% to {100 * same[-1]:.0f}% of labels" in text


def test_readme_audit_gap_is_the_stored_audit() -> None:
    text = " ".join(README.split())
    m = re.search(r"within (\d+)% of the claim at 1e6 samples for the tight ones", text)
    assert m
    gaps = [
        1 - r["lower_bound"] / r["claimed_epsilon"]
        for r in _jsonl("audit_table.jsonl")
        if r["verdict"] == "holds (tight)" and r["samples"] == 1_000_000
    ]
    assert gaps and max(gaps) <= int(m.group(1)) / 100 and max(gaps) > (int(m.group(1)) - 1) / 100


def test_readme_two_layer_range_is_the_calibration() -> None:
    # A computed figure: the README's comment is what from_epsilon(1.0) gives.
    from privtd.mechanisms import TwoLayerRR

    m = re.search(r"from_epsilon\(1\.0\) +# f_u ~ U\(0, (0\.\d+)\)", README)
    assert m and float(m.group(1)) == round(TwoLayerRR.from_epsilon(1.0).b, 4)


def test_scale_doc_demo_times_are_the_stored_runs() -> None:
    runs = {r["run"]: r["seconds"] for r in _jsonl("demo_first_run.txt")}
    text = " ".join((ROOT / "docs" / "scale.md").read_text(encoding="utf-8").split())
    assert (
        f"took {runs['default']:.1f} s ({runs['numpy']:.1f} s with `PRIVTD_BACKEND=numpy`); "
        f"forced onto numba it took {runs['numba, cold cache']:.1f} s with a cold cache, "
        f"compiling, and {runs['numba, warm cache']:.1f} s with a warm one" in text
    )


def test_reproduction_loaded_total_is_the_stored_runs() -> None:
    loaded = (RESULTS / "reproduce_defaults_loaded.txt").read_text(encoding="utf-8")
    walls = dict(re.findall(r"^## (\w+): (\d+) s wall", loaded, re.M))
    assert set(walls) == set(CHECK_SOURCES)
    total = sum(int(w) for w in walls.values())
    assert f"took {total} s together ({_whole(total / 60)} min;" in " ".join(REPRODUCTION.split())


# ---------------------------------------------------------------- docs/reference.md

REFERENCE_DOC = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_survey_table_is_the_stored_run() -> None:
    # Every privtd cell of "The survey's datasets" is the stored accuracy, and every stored
    # categorical row is in the table ("binary only" where a method did not run).
    stored: dict[tuple[str, str], str] = {}
    for line in (RESULTS / "survey_datasets.txt").read_text(encoding="utf-8").splitlines():
        m = re.match(r"(\w+) \((\w+)\) +(.+?) +accuracy (\d\.\d{4})$", line)
        if m:
            stored[(m.group(3), m.group(2))] = m.group(4)
    section = _section(REFERENCE_DOC, "## The survey's datasets")
    header = _row_in(section, "| method |")
    columns = header[1:4]
    assert columns == ["D_PosSent", "S_Dog", "S_Adult"], header
    seen = set()
    for method in {m for m, _ in stored}:
        # The table names a method's fixed parameters in brackets ("mace (vb)").
        label = re.sub(r" (\w+)=(\w+)", r" (\2)", method)
        cells = _row_in(section, f"| {label} |")
        for survey, cell in zip(columns, cells[1:4], strict=True):
            assert cell == stored.get((method, survey), "binary only"), (method, survey, cell)
            seen.add((method, survey))
    assert len(stored) >= 40, len(stored)  # the parse found the stored run (42 cells now)
    assert set(stored) <= seen


def test_crowdkit_table_mmsr_column_is_the_stored_run() -> None:
    stored = {}
    for line in (RESULTS / "crowdkit_methods.txt").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 8 and parts[1] == "mmsr":
            stored[parts[0]] = f"{parts[2]} / {parts[3]}"
    assert len(stored) == 5, stored
    section = _section(REFERENCE_DOC, "## Wawa, ZeroBasedSkill, KOS, MMSR")
    for name, pair in stored.items():
        assert _row_in(section, f"| {name} |")[4] == pair, name


def test_crowdkit_ds_tables_are_the_stored_run() -> None:
    # Every cell of "Dawid-Skene and one-coin Dawid-Skene"'s two tables (steps and agreement,
    # then accuracy) is the stored run's, and every stored dataset has its rows.
    stored: dict[str, dict[str, list[str]]] = {}
    for line in (RESULTS / "crowdkit_ds_steps.txt").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) == 8 and parts[1] in ("ds", "one-coin-ds") and parts[2].isdigit():
            stored.setdefault(parts[0], {})[parts[1]] = parts[2:]
    assert len(stored) == 5 and all(len(m) == 2 for m in stored.values()), stored
    section = _section(REFERENCE_DOC, "## Dawid-Skene and one-coin Dawid-Skene")
    steps_rows = [x for x in section.splitlines() if re.match(r"\| \w+ \| \d+ \|", x)]
    accuracy_rows = [x for x in section.splitlines() if re.match(r"\| \w+ \| 0\.\d{4} \|", x)]
    assert len(steps_rows) == len(accuracy_rows) == len(stored)
    for name, models in stored.items():
        ds, one = models["ds"], models["one-coin-ds"]
        cells = _row_in("\n".join(steps_rows), f"| {name} |")
        assert cells[1:] == ds[:4] + one[:4], name
        cells = _row_in("\n".join(accuracy_rows), f"| {name} |")
        assert cells[1:] == ds[4:] + one[4:], name


def test_privacy_worker_level_table_is_the_code() -> None:
    # Every cell of docs/privacy.md's worker-level table is what the mechanism computes.
    from privtd.mechanisms import make_mechanism

    section = PRIVACY.split("## A worker's whole release", 1)[1].split("\n## ", 1)[0]
    rows = [
        line for line in section.splitlines() if line.startswith("| ") and "mechanism" not in line
    ]
    ranges = {
        "krr-null": {"low": 0, "high": 4},
        "laplace": {"low": 0, "high": 4},
        "two-layer-null": {"low": 0, "high": 4},
        "exp-gaussian": {"low": 0, "high": 10},
    }
    assert len(rows) >= 10
    for line in rows:
        name, stated, *cells = (c.strip() for c in line.strip("|").split(" | "))
        mech = make_mechanism(name, float(stated), **ranges.get(name, {}))
        figures = [mech.epsilon]
        for k in (20, 100):
            figures += [mech.answer_epsilon(k), mech.release_epsilon(k)]
        for cell, figure in zip(cells, figures, strict=True):
            digits = len(cell.replace(".", "").lstrip("0"))
            assert float(cell) == pytest.approx(float(f"{figure:.{max(digits, 1)}g}")), (line, cell)


def test_privacy_worker_audit_figures_are_the_audit() -> None:
    from privtd.audit import audit_worker
    from privtd.mechanisms import TwoLayerRR

    text = " ".join(PRIVACY.split())
    m = re.search(
        r"two-layer at stated 0\.1 measures at least (\d\.\d\d) for one answer given the others "
        r".*? and (\d\.\d\d) for the release with half",
        text,
    )
    assert m
    mech = TwoLayerRR.from_epsilon(0.1)
    one = audit_worker(mech, 20, 1, samples=20_000, seed=0)
    half = audit_worker(mech, 20, 10, samples=20_000, seed=0)
    assert float(m.group(1)) == round(one.lower_bound, 2)
    assert float(m.group(2)) == round(half.lower_bound, 2)


def test_reproduction_worker_table_is_the_code() -> None:
    from privtd.mechanisms import OneLayerRR, TwoLayerRR

    section = REPRODUCTION.split("### What the epsilon axis means for a Duchenne worker", 1)[1]
    section = section.split("\n## ", 1)[0].split("\n### ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "stated" not in line]
    assert len(rows) == 4
    for line in rows:
        eps, *cells = (float(c) for c in line.strip("|").split(" | "))
        two = TwoLayerRR.from_epsilon(eps)
        assert cells[:3] == pytest.approx([eps, 104 * eps, 1834 * eps])
        if eps > 0:
            one = OneLayerRR.from_epsilon(eps)
            assert cells[1:3] == pytest.approx(
                [one.release_epsilon(104), one.release_epsilon(1834)]
            )
        assert cells[3] == round(two.answer_epsilon(104), 2)
        assert cells[4] == round(two.release_epsilon(104), 2)
        assert cells[5] == round(two.release_epsilon(1834), 1)
    # The equal-release one-layer figure quoted beside it.
    text = " ".join(section.split())
    m = re.search(r"one-layer at (0\.\d+) per answer bills a 104-answer worker (\d+\.\d)", text)
    assert m and float(m.group(2)) == round(TwoLayerRR.from_epsilon(0.1).release_epsilon(104), 1)
    assert float(m.group(1)) == round(TwoLayerRR.from_epsilon(0.1).release_epsilon(104) / 104, 2)


def test_readme_demo_mechanism_figures_are_the_stored_run() -> None:
    records = {r["mechanism"]: r for r in _jsonl("demo_mechanism.txt")}
    text = " ".join(README.split())
    m = re.search(
        r"balanced accuracy, mean of 5 seeds: (0\.\d+) against (0\.\d+), "
        r"accuracy (0\.\d+) against (0\.\d+); the experts' majority",
        text,
    )
    assert m
    for group, name, score in (
        (1, "two-layer", "balanced_accuracy"),
        (2, "one-layer", "balanced_accuracy"),
        (3, "two-layer", "accuracy"),
        (4, "one-layer", "accuracy"),
    ):
        runs = records[name][score]["aware-ds"]
        assert float(m.group(group)) == round(sum(runs) / len(runs), 3)
    two = records["two-layer"]
    m = re.search(r"\((\d\.\d\d) per answer given the median worker's other (\d+), (\d+\.\d)", text)
    assert m and int(m.group(2)) == two["median_worker"] - 1
    assert float(m.group(1)) == round(two["given_others_median"], 2)
    assert float(m.group(3)) == round(two["release_median"], 1)
    assert f"({records['one-layer']['median_worker']} for the median worker, per worker)" in text
    from privtd import datasets

    share = datasets.load("duchenne").truth.value_counts(normalize=True).max()
    assert f"the experts' majority class alone scores {share:.3f} accuracy, 0.5 balanced" in text


def test_readme_demo_baseline_is_the_experts_majority_class() -> None:
    # The opening paragraph's trivial baseline, which the demo prints above its methods.
    from privtd import datasets
    from privtd.evaluation import evaluate

    truth = datasets.load("duchenne").truth
    base = evaluate(truth, truth)
    accuracy, balanced = base["baseline_accuracy"], base["baseline_balanced_accuracy"]
    text = " ".join(README.split())
    assert (
        f"every image labelled the experts' majority class: accuracy {accuracy:.3f}, "
        f"balanced accuracy {balanced:g})" in text
    )
    assert "prints each method's accuracy and balanced accuracy" in text
