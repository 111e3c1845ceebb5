"""Write crowd-kit's labels on every bundled categorical dataset, for tests/test_reference.py.

crowd-kit is the independent implementation we check against. It is heavy (it pulls in
transformers), so the tests read these stored outputs instead of importing it. Regenerate with:

    python -m venv /tmp/ck && /tmp/ck/bin/pip install crowd-kit==1.4.2 'scikit-learn<1.6'
    /tmp/ck/bin/pip install --no-deps -e .
    /tmp/ck/bin/python benchmarks/crowdkit_reference.py
"""

from __future__ import annotations

from pathlib import Path

import crowdkit
import pandas as pd
from crowdkit.aggregation import DawidSkene, MajorityVote, OneCoinDawidSkene

from privtd import datasets

OUT = Path(__file__).resolve().parent.parent / "tests" / "reference" / "crowdkit"
CATEGORICAL = ["duchenne", "web", "adult_content", "sentiment", "dog"]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in CATEGORICAL:
        frame = datasets.load(name).answers.to_frame().rename(columns={"answer": "label"})
        columns = {}
        for key, model in (
            ("mv_share", None),
            ("ds", DawidSkene(n_iter=100, tol=1e-5)),
            ("one_coin_ds", OneCoinDawidSkene(n_iter=100, tol=1e-5)),
        ):
            if model is None:
                # MajorityVote's own labels break ties at random; its vote shares are exact.
                proba = MajorityVote().fit_predict_proba(frame)
                columns["mv_top_share"] = proba.max(axis=1)
                columns["mv_top_count"] = (proba.eq(proba.max(axis=1), axis=0)).sum(axis=1)
                continue
            columns[key] = model.fit_predict(frame)
            # crowd-kit stops when its ELBO (posteriors of one step scored against the parameters
            # of the next) stops rising, which is not monotone; keep its iteration count so the
            # test can compare the same number of EM steps.
            columns[f"{key}_n_iter"] = len(model.loss_history_)
        result = pd.DataFrame(columns).rename_axis("task")
        result.to_csv(OUT / f"{name}.csv.gz", compression={"method": "gzip", "mtime": 0})
        print(name, len(result))
    (OUT / "VERSION").write_text(f"crowd-kit {crowdkit.__version__}\n")


if __name__ == "__main__":
    main()
