"""privtd's methods on the datasets it ships from Zheng et al. (VLDB 2017, "Truth inference in
crowdsourcing: is the problem solved?"): accuracy (categorical) and MAE / RMSE (numeric) against
the expert truths, each method at its defaults.

    PYTHONPATH=src python benchmarks/bench_survey_datasets.py

The survey's own figures are not stored with the data (the SOURCE.md files give provenance and
counts only), so this table reports privtd's figures alone; see docs/reference.md.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from privtd import METHODS, datasets, make_estimator
from privtd.errors import ConvergenceWarning, ValidationError
from privtd.inference import AWARE_METHODS

RESULT = Path(__file__).resolve().parent / "results" / "survey_datasets.txt"
CATEGORICAL = {"sentiment": "D_PosSent", "dog": "S_Dog", "adult_content": "S_Adult"}
NUMERIC = {"emotion": "N_Emotion"}


def main() -> None:
    warnings.simplefilter("ignore", ConvergenceWarning)
    lines = ["dataset (survey name)        method          metric"]
    for group, numeric in ((CATEGORICAL, False), (NUMERIC, True)):
        for name, survey in group.items():
            data = datasets.load(name)
            truth = data.truth
            for method, cls in METHODS.items():
                # The perturbation-aware models need a mechanism; these answers are not perturbed.
                if method in AWARE_METHODS:
                    continue
                if ("numeric" if numeric else "categorical") not in cls.kinds:
                    continue
                try:
                    est = make_estimator(method).fit(data.answers)
                except (ValidationError, TypeError):  # binary-only, or needs a mechanism
                    continue
                found = est.truths_.reindex(truth.index)
                if numeric:
                    err = found.to_numpy(float) - truth.to_numpy(float)
                    metric = f"MAE {np.mean(np.abs(err)):.4f}  RMSE {np.sqrt(np.mean(err**2)):.4f}"
                else:
                    metric = f"accuracy {(found.astype(str) == truth.astype(str)).mean():.4f}"
                lines.append(f"{name} ({survey})".ljust(29) + f"{method:15s} {metric}")
                print(lines[-1], flush=True)
    RESULT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
