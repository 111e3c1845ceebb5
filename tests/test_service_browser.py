"""The browser client's perturbation (src/privtd/service/static/perturb.js, run here by Node,
with the same crypto.getRandomValues as a browser) against the exact output law of the Python
mechanism. The draws cannot be seeded (they come from the platform's secure generator), so
each check is a test at level 1e-6: a correct implementation fails one in a million runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from privtd.answers import Answers
from privtd.mechanisms import (
    KRRNull,
    OneLayerRR,
    TwoLayerNull,
    TwoLayerRR,
)

NODE = shutil.which("node")
SCRIPT = Path(__file__).parents[1] / "src" / "privtd" / "service" / "static" / "perturb.js"
N = 200_000
LEVEL = 1e-6

if NODE is None and os.environ.get("PRIVTD_TEST_NODE") == "require":
    raise RuntimeError("Node.js is required here (.ci/run sets PRIVTD_TEST_NODE=require).")
pytestmark = pytest.mark.skipif(NODE is None, reason="needs Node.js to run the browser module")


def run_js(mechanism, answers, labels, tasks, n=N):
    """``n`` independent releases of one worker's ``answers``; the values, one list per call."""
    program = f"""
    import {{ perturbWorker }} from {json.dumps(SCRIPT.as_uri())};
    const out = [];
    for (let i = 0; i < {n}; i++) {{
      out.push(perturbWorker({json.dumps(mechanism)}, {json.dumps(answers)},
                             {json.dumps(labels)}, {json.dumps(tasks)}).map((p) => p[1]));
    }}
    process.stdout.write(JSON.stringify(out));
    """
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def chi_square(counts, probs):
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    return stats.chisquare(counts, counts.sum() * probs).pvalue


def describe(mech):
    params = {k: (v.item() if hasattr(v, "item") else v) for k, v in mech.params().items()}
    return {"name": mech.name, "params": params}


@pytest.mark.parametrize(
    "mech", [OneLayerRR.from_epsilon(1.0, n_labels=3), TwoLayerRR.from_epsilon(1.0, n_labels=3)]
)
def test_categorical_laws(mech):
    labels = ["a", "b", "c"]
    out = run_js(describe(mech), {"t0": "b"}, labels, ["t0"])
    counts = [sum(o[0] == lab for o in out) for lab in labels]
    f = mech.f if isinstance(mech, OneLayerRR) else (mech.a + mech.b) / 2  # marginal flip
    probs = [f / 2, 1 - f, f / 2]
    assert chi_square(counts, probs) > LEVEL
    # The Python mechanism has the same law: N workers with one answer each (two-layer draws
    # one flip probability per worker).
    one_each = Answers(
        np.zeros(N, np.int32),
        np.arange(N, dtype=np.int32),
        np.ones(N, np.int64),
        pd.RangeIndex(1),
        pd.RangeIndex(N),
        labels=pd.Index(labels),
    )
    py = np.bincount(mech.perturb(one_each, rng=0).value, minlength=3)
    assert chi_square(py, probs) > LEVEL


@pytest.mark.parametrize(
    "mech", [KRRNull.from_epsilon(1.0, 1, 4), TwoLayerNull.from_epsilon(1.0, 1, 4)]
)
def test_null_aware_laws(mech):
    # One answered task (score 2) and one NULL, so both rows of the channel are checked.
    out = run_js(describe(mech), {"t0": 2}, None, ["t0", "t1"])
    keep, other = (
        (mech.keep, (1 - mech.keep) / 4) if isinstance(mech, KRRNull) else mech._marginal()
    )
    symbols = [1, 2, 3, 4, None]
    for column, true in ((0, 2), (1, None)):
        counts = [sum(o[column] == s for o in out) for s in symbols]
        probs = [keep if s == true else other for s in symbols]
        assert chi_square(counts, probs) > LEVEL, (column, counts)


# The numeric mechanisms (laplace, exp-gaussian) release on a grid with exact discrete noise:
# their laws are checked in tests/test_page_exact.py.


def test_the_page_is_served(tmp_path):
    from fastapi.testclient import TestClient

    from privtd.service import create_app

    token = "requester-token-of-32-characters!"
    app = create_app(f"sqlite:///{tmp_path / 's.db'}", requester_token=token)
    with TestClient(app) as client:
        page = client.get("/collect")
        assert page.status_code == 200 and "perturb.js" in page.text
        script = client.get("/static/perturb.js")
        assert script.status_code == 200 and "getRandomValues" in script.text
    app.state.engine.dispose()
