"""Run crowd-kit's own aggregation tests against ``privtd.compat.crowdkit``.

The tests are run twice on copies of a crowd-kit ``tests`` directory: once as they are
(crowd-kit on itself) and once with every ``crowdkit.aggregation`` name that
``privtd.compat.crowdkit.__all__`` exports rewritten to come from privtd. Names privtd does not
export keep coming from crowd-kit. The script prints both outcomes per test node, the totals,
and the tests crowd-kit passes but privtd does not; it exits with 1 when there are any.

Setup (one virtual environment holding both libraries)::

    git clone https://github.com/Toloka/crowd-kit /tmp/crowd-kit
    git -C /tmp/crowd-kit checkout 35f0661
    python -m venv /tmp/ckvenv
    /tmp/ckvenv/bin/pip install crowd-kit==1.4.2 pytest
    /tmp/ckvenv/bin/pip install --no-deps -e .   # privtd, from its checkout
    /tmp/ckvenv/bin/pip install numba            # privtd's dependencies crowd-kit lacks
    /tmp/ckvenv/bin/python benchmarks/crowdkit_suite.py /tmp/crowd-kit/tests

Five tests are left out by default (``--no-exclude`` runs them): two read GLAD's private
methods, two pin MACE's random-restart trajectory, and one pins MMSR's raw scores on the toy
data, none of which a reimplementation is bound to reproduce.

Only the standard library is used here; pytest and the libraries run in a subprocess.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

CLASSIFICATION = "tests/aggregation/test_classification_aggregation.py"
EXCLUDED = (
    "tests/aggregation/test_glad_aggregation.py::test_glad_e_step",
    "tests/aggregation/test_glad_aggregation.py::test_glad_derivative",
    "tests/aggregation/test_mace_aggregation.py::test_aggregate_mace_on_simple[em]",
    "tests/aggregation/test_mace_aggregation.py::test_thetas_on_simple",
    f"{CLASSIFICATION}::test_fit_predict_classification_aggregations_methods"
    "[MMSR predict scores on toy YSDA]",
)
TARGET = "privtd.compat.crowdkit"
FROM_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from crowdkit\.aggregation import "
    r"(?:\((?P<group>[^)]*)\)|(?P<line>[^\n]*))",
    re.MULTILINE,
)
ATTRIBUTE = re.compile(r"\bcrowdkit\.aggregation\.(?P<name>\w+)\b")


def exported_names() -> set[str]:
    code = f"import {TARGET} as m; print(' '.join(m.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def _rewrite_import(match: re.Match[str], exported: set[str]) -> str:
    body = match["group"] if match["group"] is not None else match["line"]
    body = re.sub(r"#[^\n]*", "", body)  # comments inside a parenthesised import
    names = [n.strip() for n in body.replace("\n", " ").split(",") if n.strip()]
    ours = [n for n in names if n.split(" as ")[0].strip() in exported]
    theirs = [n for n in names if n not in ours]
    indent = match["indent"]
    lines = [f"{indent}from {TARGET} import {', '.join(ours)}"] if ours else []
    if theirs:
        lines.append(f"{indent}from crowdkit.aggregation import {', '.join(theirs)}")
    return "\n".join(lines) if lines else f"{indent}pass"


def rewrite_source(text: str, exported: set[str]) -> str:
    """Point crowd-kit aggregation names that privtd exports at privtd."""
    text = FROM_IMPORT.sub(lambda m: _rewrite_import(m, exported), text)

    def attribute(m: re.Match[str]) -> str:
        return f"{TARGET}.{m['name']}" if m["name"] in exported else m[0]

    new = ATTRIBUTE.sub(attribute, text)
    if new != text:  # a dotted reference needs the package bound
        new = f"import {TARGET}\n" + new
    return new


def run_pytest(root: Path, exclude: bool) -> dict[str, str]:
    """Run the copy under ``root`` and return node id -> outcome."""
    (root / "pytest.ini").write_text("[pytest]\n")  # keep any outside config out
    report = root / "report.xml"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"]
    args += ["-o", "junit_family=xunit1", f"--junitxml={report}", "tests/aggregation"]
    for node in EXCLUDED if exclude else ():
        args += ["--deselect", node]
    proc = subprocess.run(args, cwd=root, capture_output=True, text=True)
    if not report.exists():
        sys.exit(f"pytest wrote no report in {root}:\n{proc.stdout}\n{proc.stderr}")
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).iter("testcase"):
        file = case.get("file", "")
        module = file.removesuffix(".py").replace("/", ".")
        cls = case.get("classname", "").removeprefix(module).lstrip(".")
        node = "::".join(p for p in (file, cls, case.get("name", "")) if p)
        tags = {child.tag for child in case}
        outcome = next((t for t in ("error", "failure", "skipped") if t in tags), "passed")
        outcome = {"failure": "failed"}.get(outcome, outcome)
        if outcomes.get(node, "passed") == "passed":  # a teardown error must not hide a failure
            outcomes[node] = outcome
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tests", type=Path, help="a crowd-kit checkout's tests directory")
    parser.add_argument("--no-exclude", action="store_true", help="run the five left-out tests")
    opts = parser.parse_args()
    exported = exported_names()
    print(f"{TARGET} exports: {', '.join(sorted(exported))}")
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for label in ("crowd-kit", "privtd"):
            root = Path(tmp, label)
            shutil.copytree(opts.tests, root / "tests")
            if label == "privtd":
                for path in (root / "tests").rglob("*.py"):
                    path.write_text(rewrite_source(path.read_text(), exported))
            results[label] = run_pytest(root, exclude=not opts.no_exclude)
    ck, pt = results["crowd-kit"], results["privtd"]
    nodes = sorted(set(ck) | set(pt))
    width = max(len(n) for n in nodes) - len("tests/aggregation/")
    print(f"\n{'test':<{width}}  crowd-kit  privtd")
    for node in nodes:
        name = node.removeprefix("tests/aggregation/")
        print(f"{name:<{width}}  {ck.get(node, '-'):<9}  {pt.get(node, '-')}")
    for label, res in results.items():
        passed = sum(v == "passed" for v in res.values())
        print(f"{label}: {passed} passed of {len(res)}")
    lost = [n for n in nodes if ck.get(n) == "passed" and pt.get(n) != "passed"]
    print(f"\ncrowd-kit passes, privtd does not ({len(lost)}):")
    print("\n".join(f"  {n}" for n in lost) or "  none")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
