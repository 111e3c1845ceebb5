"""Truth inference on a Dask cluster: the same answer as in memory, over processes and TLS.

A LocalCluster of two worker processes (127.0.0.1, TLS with a temporary certificate, no
dashboard) for most tests, and a scheduler and a worker started as separate processes
(``python -m distributed.cli...``, with certificates from ``privtd cluster-certs``) for the
ones that show the fit crossing a network connection; and the attacks on both: a stranger
who reaches their ports, a scheduler that accepts and never answers.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("distributed")
pytest.importorskip("pyarrow")

from cli_runner import run_cli as run
from privtd import Answers, datasets  # noqa: E402
from privtd.errors import ConvergenceWarning, ValidationError  # noqa: E402
from privtd.inference import fit_distributed, make_estimator  # noqa: E402
from privtd.inference.distributed import DISTRIBUTED_METHODS, connect, ingest  # noqa: E402

SRC = str(Path(__file__).resolve().parents[1] / "src")

# Few iterations keep the suite fast; tol=0 makes both fits run all of them, so the whole
# iteration path (not only the start) is compared. One test runs the default stopping rules.
CATEGORICAL = {
    "mv": {},
    "wv": {"max_iter": 5},
    "ds": {"max_iter": 6, "tol": 0.0},
    "one-coin-ds": {"max_iter": 6, "tol": 0.0},
    "zencrowd": {"max_iter": 6, "tol": 0.0},
    "crh": {"max_iter": 5},
    "catd": {"max_iter": 5},
}
NUMERIC = {
    "mean": {},
    "median": {},
    "crh": {"max_iter": 5, "tol": 0.0},
    "catd": {"max_iter": 5, "tol": 0.0},
    "gtm": {},
    "raykar": {"max_iter": 5, "tol": 0.0},
    "sigma": {"max_iter": 5, "tol": 0.0},
}


def _split(frame: pd.DataFrame, n: int) -> list[pd.DataFrame]:
    return [frame.iloc[idx] for idx in np.array_split(np.arange(len(frame)), n)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A categorical crowd in three Parquet files and a numeric one in three CSVs; a task's
    answers are spread over several files (the rows are shuffled)."""
    root = tmp_path_factory.mktemp("dist")
    gen = np.random.default_rng(3)
    cat, _, _ = datasets.make_categorical(
        240, 30, 3, answers_per_task=5, accuracy=(0.3, 0.95), rng=1
    )
    frame = cat.to_frame().sample(frac=1.0, random_state=2).reset_index(drop=True)
    frame["task"] = frame["task"].astype(str)
    frame["worker"] = frame["worker"].astype(str)
    (root / "cat").mkdir()
    for i, part in enumerate(_split(frame, 3)):
        part.to_parquet(root / "cat" / f"part-{i}.parquet", index=False)
    two, _, _ = datasets.make_categorical(
        200, 25, 2, answers_per_task=5, accuracy=(0.3, 0.95), rng=4
    )
    binary = two.to_frame().sample(frac=1.0, random_state=5).reset_index(drop=True)
    (root / "bin").mkdir()
    for i, part in enumerate(_split(binary, 2)):
        part.to_parquet(root / "bin" / f"part-{i}.parquet", index=False)
    n = 900
    num = pd.DataFrame(
        {
            "task": [f"q{t}" for t in gen.integers(0, 150, n)],
            "worker": [f"u{w}" for w in gen.integers(0, 25, n)],
            "answer": gen.normal(10.0, 3.0, n),
        }
    ).drop_duplicates(["task", "worker"])
    (root / "num").mkdir()
    for i, part in enumerate(_split(num, 3)):
        part.to_csv(root / "num" / f"part-{i}.csv", index=False)
    return {
        "root": root,
        "cat": root / "cat",
        "num": root / "num",
        "cat_frame": frame,
        "bin": root / "bin",
        "bin_frame": binary,
        "num_frame": pd.concat(
            [pd.read_csv(p, dtype={"task": str, "worker": str}) for p in _csvs(root / "num")],
            ignore_index=True,
        ),
    }


def _csvs(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.csv"))


@pytest.fixture(scope="module")
def client():
    with connect(workers=2) as cl:
        yield cl


@pytest.fixture(scope="module")
def ingested(client, files):
    cache: dict[tuple[str, int], object] = {}

    def get(kind: str, partitions: int):
        if (kind, partitions) not in cache:
            cache[kind, partitions] = ingest(files[kind], client, partitions=partitions)
        return cache[kind, partitions]

    return get


def _both(method, params, frame, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mem = make_estimator(method, **params).fit(Answers.from_frame(frame))
        dist = fit_distributed(make_estimator(method, **params), data)
    return mem, dist


def _assert_same(mem, dist, numeric):
    assert dist.truths_.index.equals(mem.truths_.index)
    if numeric:
        np.testing.assert_allclose(dist.truths_, mem.truths_, rtol=1e-9, atol=0)
    else:
        assert dist.truths_.equals(mem.truths_)
    assert dist.weights_.index.equals(mem.weights_.index)
    assert list(dist.weights_.columns) == list(mem.weights_.columns)
    # Per-worker sums taken shard by shard differ from one global sum by round-off only.
    np.testing.assert_allclose(
        dist.weights_.to_numpy(float), mem.weights_.to_numpy(float), rtol=1e-9, atol=1e-12
    )
    if mem.probas_ is None:
        assert dist.probas_ is None
    else:
        assert dist.probas_.columns.equals(mem.probas_.columns)
        np.testing.assert_allclose(dist.probas_, mem.probas_, rtol=0, atol=1e-9)
    assert dist.n_iter_ == mem.n_iter_ and dist.converged_ == mem.converged_
    np.testing.assert_allclose(dist.objective_, mem.objective_, rtol=1e-9)


# Every method on 3 shards; the EM ones (and one vote) also on 1 and 7, one with empty shards.
CASES = [(m, 3) for m in CATEGORICAL] + [
    (m, p) for m in ("mv", "ds", "one-coin-ds") for p in (1, 7)
]


@pytest.mark.parametrize(("method", "partitions"), CASES)
def test_same_labels_as_in_memory(method, partitions, files, ingested):
    mem, dist = _both(method, CATEGORICAL[method], files["cat_frame"], ingested("cat", partitions))
    _assert_same(mem, dist, numeric=False)


@pytest.mark.parametrize("method", ["ds", "zencrowd", "gtm"])
def test_fit_on_ingested_answers_runs_on_the_cluster(method, files, ingested):
    """``est.fit(data)`` on ingested answers is ``fit_distributed(est, data)``: the same
    estimator back, the same results as in memory."""
    kind = "cat" if method in CATEGORICAL else "num"
    params = {**CATEGORICAL, **NUMERIC}[method]
    data = ingested(kind, 3)
    est = make_estimator(method, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert est.fit(data) is est
        mem = make_estimator(method, **params).fit(Answers.from_frame(files[f"{kind}_frame"]))
    _assert_same(mem, est, numeric=kind == "num")


def test_fit_on_ingested_answers_refuses_what_a_cluster_cannot_run(files, ingested):
    data = ingested("cat", 3)
    with pytest.raises(ValidationError, match="no warm_start"):
        make_estimator("ds").fit(data, warm_start=make_estimator("ds").fit(data))
    with pytest.raises(ValidationError, match="conjugate gradients"):
        make_estimator("glad").fit(data)


@pytest.mark.parametrize(
    ("method", "partitions"), [(m, 3) for m in NUMERIC] + [("crh", 1), ("crh", 7)]
)
def test_same_numbers_as_in_memory(method, partitions, files, ingested):
    mem, dist = _both(method, NUMERIC[method], files["num_frame"], ingested("num", partitions))
    _assert_same(mem, dist, numeric=True)


@pytest.mark.parametrize("method", ["ds", "one-coin-ds"])
def test_default_stopping_rule_stops_at_the_same_iteration(method, files, ingested):
    mem, dist = _both(method, {}, files["cat_frame"], ingested("cat", 3))
    assert mem.converged_ and mem.n_iter_ > 3
    _assert_same(mem, dist, numeric=False)
    if method == "ds":
        np.testing.assert_allclose(dist.confusions_, mem.confusions_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dist.priors_, mem.priors_, rtol=1e-9)


@pytest.mark.parametrize("partitions", [1, 7])
def test_latent_class_same_labels_as_in_memory(partitions, files, ingested):
    params = {"max_iter": 6, "tol": 0.0}
    mem, dist = _both("lc", params, files["bin_frame"], ingested("bin", partitions))
    _assert_same(mem, dist, numeric=False)
    assert dist.prior_ == pytest.approx(mem.prior_, rel=1e-9)
    with pytest.raises(ValidationError, match="binary"):
        fit_distributed(make_estimator("lc"), ingested("cat", 3))


# The iterative methods on the engine that are not EM, each on the crowd it takes; tol=0 runs
# every iteration.
ENGINE_METHODS = {
    "zbs": ("cat", {"max_iter": 30, "tol": 0.0, "lr_init": 0.3, "lr_steps_to_reduce": 5}),
    "private-ds": ("bin", {"max_iter": 15, "tol": 0.0}),
}


@pytest.mark.parametrize(
    ("method", "partitions"), [(m, p) for m in ENGINE_METHODS for p in (1, 3, 7)]
)
def test_engine_methods_same_as_in_memory(method, partitions, files, ingested):
    kind, params = ENGINE_METHODS[method]
    mem, dist = _both(method, params, files[f"{kind}_frame"], ingested(kind, partitions))
    assert mem.n_iter_ > 10 and len(set(mem.objective_)) > 10
    _assert_same(mem, dist, numeric=False)


def test_private_ds_on_a_cluster_refuses_an_init_array(ingested):
    with pytest.raises(ValidationError, match="init='mv'"):
        fit_distributed(make_estimator("private-ds", init=np.full(200, 0.5)), ingested("bin", 3))


def _mechanism(name, k):
    from privtd.mechanisms import OneLayerRR, TwoLayerRR

    return {
        "none": None,
        "one-layer": OneLayerRR(0.2, n_labels=k),
        "two-layer": TwoLayerRR(0.1, 0.3, n_labels=k),
    }[name]


# The aware estimators run their own EM (SQUAREM jumps, the orientation check with two labels)
# with the truth step on the shards: the same labels for every mechanism and partition count.
AWARE_CASES = [
    (m, mech, kind, p)
    for m in ("aware-ds", "aware-one-coin")
    for mech, kind, p in [
        ("one-layer", "cat", 1),
        ("one-layer", "cat", 3),
        ("two-layer", "cat", 7),
        ("none", "bin", 3),
        ("two-layer", "bin", 7),
    ]
]


@pytest.mark.parametrize(("method", "mechanism", "kind", "partitions"), AWARE_CASES)
def test_aware_estimators_same_labels_as_in_memory(
    method, mechanism, kind, partitions, files, ingested
):
    k = 3 if kind == "cat" else 2
    params = {"mechanism": _mechanism(mechanism, k), "max_iter": 12}
    mem, dist = _both(method, params, files[f"{kind}_frame"], ingested(kind, partitions))
    _assert_same(mem, dist, numeric=False)
    np.testing.assert_allclose(dist.priors_, mem.priors_, rtol=1e-9)
    if method == "aware-ds":
        np.testing.assert_allclose(dist.confusions_, mem.confusions_, rtol=1e-9, atol=1e-12)
        # Its default class prior: fixed uniform through a channel over more than two labels.
        auto = "uniform" if k > 2 and mechanism != "none" else "learned"
        assert dist.class_prior_ == mem.class_prior_ == auto


@pytest.mark.parametrize(
    ("mechanism", "kind", "partitions"), [("one-layer", "cat", 3), ("two-layer", "bin", 7)]
)
def test_aware_zencrowd_same_labels_as_in_memory(mechanism, kind, partitions, files, ingested):
    k = 3 if kind == "cat" else 2
    params = {"mechanism": _mechanism(mechanism, k), "max_iter": 8, "tol": 0.0}
    mem, dist = _both("aware-zencrowd", params, files[f"{kind}_frame"], ingested(kind, partitions))
    _assert_same(mem, dist, numeric=False)


# MACE runs one EM per restart on the shards and keeps the best; on this crowd that is not the
# last restart, so the kept one's posteriors are computed again on the shards.
@pytest.mark.parametrize("partitions", [1, 3, 7])
@pytest.mark.parametrize("variant", ["em", "vb", "aware"])
def test_mace_keeps_the_same_restart_as_in_memory(variant, partitions, files, ingested):
    from privtd.inference import MACE

    def make():
        params = {"n_restarts": 3, "max_iter": 6, "tol": 0.0}
        if variant == "aware":
            return MACE(_mechanism("one-layer", 3), **params)
        return MACE(method=variant, **params)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mem = make().fit(Answers.from_frame(files["cat_frame"]))
        dist = fit_distributed(make(), ingested("cat", partitions))
    _assert_same(mem, dist, numeric=False)
    np.testing.assert_allclose(dist.strategies_, mem.strategies_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dist.restart_objectives_, mem.restart_objectives_, rtol=1e-9)
    assert mem.restart_objectives_.argmax() < 2


def test_mace_default_stopping_rule_stops_at_the_same_iteration(files, ingested):
    mem, dist = _both("mace", {"n_restarts": 2}, files["cat_frame"], ingested("cat", 3))
    assert mem.converged_ and mem.n_iter_ >= 50
    _assert_same(mem, dist, numeric=False)


@pytest.mark.parametrize("method", ["aware-ds", "aware-one-coin"])
def test_aware_orientation_refit_from_the_mirror_is_the_same(method, files, ingested, monkeypatch):
    """Force the orientation check's refit from the mirrored posteriors (agreement with
    majority vote read upside down, in memory and on the cluster alike): same labels."""
    from privtd.inference import perturbation_aware

    calls: list[str] = []
    real = perturbation_aware.agreement

    def upside_down(executor, n_tasks):
        calls.append(type(executor).__name__)
        return 1.0 - real(executor, n_tasks)

    monkeypatch.setattr(perturbation_aware, "agreement", upside_down)
    params = {"mechanism": _mechanism("one-layer", 2), "max_iter": 8}
    mem, dist = _both(method, params, files["bin_frame"], ingested("bin", 3))
    # Each fit measured its first fit and the refit from the mirror.
    assert calls.count("InMemory") == 2 and calls.count("_Passes") == 2
    _assert_same(mem, dist, numeric=False)


def test_crh_absolute_loss_uses_exact_per_task_weighted_medians(files, ingested):
    params = {"loss": "absolute", "max_iter": 4, "tol": 0.0}
    mem, dist = _both("crh", params, files["num_frame"], ingested("num", 3))
    _assert_same(mem, dist, numeric=True)


def test_a_task_split_over_files_lands_whole_in_one_shard(files, ingested):
    data = ingested("cat", 7)
    assert data.n_tasks == files["cat_frame"]["task"].nunique()  # no task counted twice
    assert data.n_answers == len(files["cat_frame"])
    counts = files["cat_frame"]["worker"].value_counts()
    assert dict(zip(data.workers, data.counts, strict=True)) == counts.to_dict()


def test_fit_distributed_reads_a_glob_and_starts_no_cluster_when_given_one(files, client):
    pattern = str(files["num"] / "*.csv")
    dist = fit_distributed(make_estimator("median"), pattern, client=client, partitions=2)
    mem = make_estimator("median").fit(Answers.from_frame(files["num_frame"]))
    np.testing.assert_allclose(dist.truths_, mem.truths_, rtol=1e-9)


# ---------------------------------------------------------------------- refusals, bad input
def test_other_methods_refuse_naming_the_distributed_ones(files, ingested):
    cat = ingested("cat", 3)
    with pytest.raises(ValidationError, match="GLAD") as info:
        fit_distributed(make_estimator("glad"), cat)
    assert all(m in str(info.value) for m in DISTRIBUTED_METHODS)
    with pytest.raises(ValidationError, match="^GLAD .*conjugate gradients"):
        fit_distributed(make_estimator("aware-glad", mechanism=_mechanism("one-layer", 3)), cat)
    binary = ingested("bin", 3)
    for method, why in [("kos", "reduction inside"), ("mmsr", "covariance"), ("minimax", "L-BFGS")]:
        with pytest.raises(ValidationError, match=why):
            fit_distributed(make_estimator(method), binary)


def test_missing_and_unreadable_files_are_one_line(files, client, tmp_path):
    with pytest.raises(ValidationError, match="No such file"):
        ingest(tmp_path / "absent.parquet", client)
    with pytest.raises(ValidationError, match="No file matches"):
        ingest(str(tmp_path / "*.parquet"), client)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(ValidationError, match="Cannot read"):
        ingest(bad, client)


def test_a_pair_repeated_across_files_is_an_error(files, client, tmp_path):
    frame = files["cat_frame"]
    frame.iloc[:50].to_parquet(tmp_path / "a.parquet", index=False)
    frame.iloc[40:90].to_parquet(tmp_path / "b.parquet", index=False)
    with pytest.raises(ValidationError, match="10 answer") as info:
        ingest(tmp_path, client, partitions=3)
    # Both answers named by file and row: b's first 10 rows are a's rows 41 to 50.
    import re

    found = re.search(
        r"a\.parquet' data row (\d+) and .*b\.parquet' data row (\d+)", str(info.value)
    )
    assert found and int(found[1]) == int(found[2]) + 40
    assert "\n" not in str(info.value)


def test_task_ids_of_different_types_across_files_are_an_error(files, client, tmp_path):
    """5 in one file and "5" in another would be two tasks: refused, naming both files."""
    frame = files["bin_frame"].copy()
    frame["task"] = frame["task"].astype(str).str.extract(r"(\d+)", expand=False).astype(int)
    frame.iloc[:300].to_parquet(tmp_path / "a.parquet", index=False)
    strings = frame.iloc[300:].assign(task=lambda f: f["task"].astype(str))
    strings.to_parquet(tmp_path / "b.parquet", index=False)
    with pytest.raises(ValidationError, match=r"integer in .*a\.parquet.* but string in .*b\.parq"):
        ingest(tmp_path, client, partitions=2)
    strings.to_csv(tmp_path / "b.csv", index=False)  # CSV ids are strings, Parquet's integers
    (tmp_path / "b.parquet").unlink()
    with pytest.raises(ValidationError, match="Task ids are integer"):
        ingest(tmp_path, client, partitions=2)


def test_integer_answers_in_one_file_and_floats_in_another_are_numbers(files, client, tmp_path):
    """Each file codes its answers as it reads them (labels where they are not floats); where
    the files together are numbers, a file's labels stand as their values."""
    frame = files["num_frame"].copy()
    frame.loc[: len(frame) // 2 - 1, "answer"] = frame["answer"].iloc[: len(frame) // 2].round()
    ints = frame.iloc[: len(frame) // 2].assign(answer=lambda f: f["answer"].astype(np.int64))
    ints.to_parquet(tmp_path / "a.parquet", index=False)
    frame.iloc[len(frame) // 2 :].to_parquet(tmp_path / "b.parquet", index=False)
    data = ingest(tmp_path, client, partitions=3)
    assert data.kind == "numeric"
    mem, dist = _both("mean", {}, frame, data)
    _assert_same(mem, dist, numeric=True)
    with pytest.raises(ValidationError, match="numbers in some files and labels in others"):
        frame.iloc[: len(frame) // 2].assign(answer="x").to_parquet(
            tmp_path / "a.parquet", index=False
        )
        ingest(tmp_path, client, partitions=3)


def test_declared_labels_code_every_file_in_their_order(files, client):
    """Declared labels, in an order other than sorted and with one that has no answer: each
    file's label codes map to the declared ones, as in memory."""
    domain = ["2", "0", "9", "1"]
    frame = files["cat_frame"].assign(answer=lambda f: f["answer"].astype(str))
    folder = files["root"] / "cat-str"
    folder.mkdir(exist_ok=True)
    for i, part in enumerate(_split(frame, 3)):
        part.to_parquet(folder / f"part-{i}.parquet", index=False)
    data = ingest(folder, client, partitions=3, labels=domain)
    assert data.labels.tolist() == domain
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mem = make_estimator("ds", max_iter=4, tol=0.0).fit(
            Answers.from_frame(frame, labels=domain)
        )
        dist = fit_distributed(make_estimator("ds", max_iter=4, tol=0.0), data)
    _assert_same(mem, dist, numeric=False)


def test_default_partitions_come_from_the_rows_before_reading(tmp_path):
    """The default shard count is set before any file is read: Parquet footers state their
    rows; a CSV's are estimated from its first megabyte's mean line length."""
    from privtd.inference.distributed._ingest import _rows_about

    small = pd.DataFrame({"task": range(1000), "worker": 1, "answer": 0})
    small.to_parquet(tmp_path / "a.parquet", index=False)
    small.to_csv(tmp_path / "a.csv", index=False)
    assert _rows_about(str(tmp_path / "a.parquet")) == 1000
    assert _rows_about(str(tmp_path / "a.csv")) == 1000
    big = pd.DataFrame({"task": np.arange(300_000) % 977, "worker": 12345, "answer": 1})
    big.to_csv(tmp_path / "b.csv", index=False)
    assert abs(_rows_about(str(tmp_path / "b.csv")) - len(big)) < 0.05 * len(big)


def test_cli_unreachable_scheduler_and_missing_file(files, tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "t.csv"
    args = ["infer", str(files["cat"]), "-m", "ds", "-o", str(out), "--engine", "dask"]
    code, _, err = run(
        [*args, "--scheduler", f"tcp://127.0.0.1:{port}", "--allow-plain-tcp"], capsys
    )
    assert code == 2 and "Cannot reach the Dask scheduler" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    code, _, err = run(["infer", str(tmp_path / "nope"), *args[2:]], capsys)
    assert code == 2 and "No such file" in err and not out.exists()
    code, _, err = run(args[:-2], capsys)  # a directory, in memory
    assert code == 2 and "--engine dask" in err and not out.exists()
    code, _, err = run([*args, "-m", "glad"], capsys)
    assert code == 2 and "one-coin-ds" in err and not out.exists()
    assert "conjugate gradients" in err and "Leave out --engine dask" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_memory_limit_runs_a_limited_local_cluster(files, tmp_path, capsys):
    both = pd.concat([pd.read_parquet(p) for p in sorted(files["cat"].glob("*.parquet"))])
    both.to_csv(tmp_path / "all.csv", index=False)
    in_memory = ["infer", str(tmp_path / "all.csv"), "-m", "one-coin-ds"]
    code, _, err = run([*in_memory, "-o", str(tmp_path / "x.csv"), "--memory-limit", "2GB"], capsys)
    assert code == 2 and "--memory-limit need --engine dask" in err
    memory, dask = tmp_path / "memory.csv", tmp_path / "dask.csv"
    assert run([*in_memory, "-o", str(memory)], capsys)[0] == 0
    args = ["infer", str(files["cat"]), "-m", "one-coin-ds", "-o", str(dask), "--engine", "dask"]
    code, _, err = run([*args, "--workers", "1", "--memory-limit", "2GB"], capsys)
    assert code == 0, err
    assert pd.read_csv(dask).equals(pd.read_csv(memory))


# ---------------------------------------------------------------------- across processes, TCP
@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A private CA and the certificates of a scheduler, a client and a worker."""
    from privtd.inference.distributed._certs import make_cluster_certs

    return make_cluster_certs(tmp_path_factory.mktemp("certs") / "tls", workers=1)


def _tls_args(certs, party, prefix="--tls"):
    cert, key = certs[party]
    return [f"{prefix}-ca-file", certs["ca"][0], f"{prefix}-cert", cert, f"{prefix}-key", key]


@pytest.fixture(scope="module")
def remote(tmp_path_factory, certs):
    """A scheduler and a worker, each its own process, talking TLS on 127.0.0.1 with the
    certificates ``privtd cluster-certs`` makes."""
    from privtd.inference.distributed import tls_security

    folder = tmp_path_factory.mktemp("sched")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tls://127.0.0.1:{port}"
    common = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1"]
        + ["--port", str(port), "--no-dashboard", "--protocol", "tls"]
        + _tls_args(certs, "scheduler"),
        **common,
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "1"]
        + ["--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard"]
        + ["--local-directory", str(folder)]
        + _tls_args(certs, "worker-1"),
        **common,
    )
    security = tls_security(certs["ca"][0], *certs["client"])
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with connect(scheduler=address, security=security, connect_timeout=5) as probe:
                    probe.wait_for_workers(1, timeout=30)
                break
            except ValidationError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        yield address, security
    finally:
        for proc in (worker, scheduler):  # nothing to save: no graceful shutdown needed
            proc.kill()
            proc.wait(timeout=20)


def test_separate_scheduler_and_worker_processes_over_tls(remote, files):
    address, security = remote
    with connect(scheduler=address, security=security) as cl:
        [pid] = cl.run(os.getpid).values()
        assert pid != os.getpid()  # the shards live in another process
        [address] = cl.scheduler_info()["workers"]
        assert address.startswith("tls://127.0.0.1:")
        data = ingest(files["cat"], cl, partitions=3)
        mem, dist = _both("ds", CATEGORICAL["ds"], files["cat_frame"], data)
    _assert_same(mem, dist, numeric=False)


def test_cli_on_a_remote_scheduler_writes_what_the_in_memory_cli_writes(
    remote, certs, files, tmp_path, capsys
):
    address, _ = remote
    tls = _tls_args(certs, "client")
    both = pd.concat([pd.read_parquet(p) for p in sorted(files["cat"].glob("*.parquet"))])
    both.to_csv(tmp_path / "all.csv", index=False)
    outputs = {}
    for engine in ("memory", "dask"):
        out = tmp_path / f"{engine}.csv"
        probas = tmp_path / f"{engine}-p.csv"
        source = str(tmp_path / "all.csv") if engine == "memory" else str(files["cat"])
        extra = ["--engine", "dask", "--scheduler", address, *tls] if engine == "dask" else []
        code, _, err = run(
            ["infer", source, "-m", "one-coin-ds", "-o", str(out), "--probas-output", str(probas)]
            + extra,
            capsys,
        )
        assert code == 0, err
        outputs[engine] = (pd.read_csv(out), pd.read_csv(probas))
    assert outputs["dask"][0].equals(outputs["memory"][0])
    np.testing.assert_allclose(outputs["dask"][1].iloc[:, 1:], outputs["memory"][1].iloc[:, 1:])
    # -o NAME.parquet: a folder of Parquet files the workers wrote, the same truths.
    folder = tmp_path / "dask.parquet"
    args = ["infer", str(files["cat"]), "-m", "one-coin-ds", "-o", str(folder)]
    code, _, err = run([*args, "--engine", "dask", "--scheduler", address, *tls], capsys)
    assert code == 0, err
    got = pd.read_parquet(folder).set_index("task")["truth"]  # pyarrow reads the folder
    mem = outputs["memory"][0].set_index("task")["truth"]
    assert got.loc[mem.index].to_numpy().tolist() == mem.to_numpy().tolist()
    code, _, err = run([*args, "--engine", "dask", "--scheduler", address, *tls], capsys)
    assert code == 2 and "is a directory" in err  # click refuses an existing folder
    code, _, err = run([*args[:-1], str(tmp_path / "m.parquet")], capsys)
    assert code == 2 and "--engine dask" in err and not (tmp_path / "m.parquet").exists()


def test_a_worker_killed_mid_fit_is_survived_with_the_same_labels(files):
    """Kill one of two worker processes (its nanny restarts it) during an iteration: Dask
    recomputes the lost shards from the files and the lost passes from their lineage, and the
    fit ends as an undisturbed one. DS reads nothing of the previous pass, WV and CRH carry
    their truths from pass to pass, aware-one-coin runs its own EM with jumps."""
    import signal

    cases = {
        "ds": {"max_iter": 6, "tol": 0.0},
        "wv": {"max_iter": 5},
        "crh": {"max_iter": 5},
        "aware-one-coin": {"max_iter": 6},
    }
    with connect(workers=2) as cl:
        data = ingest(files["cat"], cl, partitions=4)
        for method, params in cases.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                calm = fit_distributed(make_estimator(method, **params), data)
                victim = sorted(cl.scheduler_info()["workers"])[0]
                pid = cl.run(os.getpid, workers=[victim])[victim]
                est = make_estimator(method, **params)
                killed = []

                def kill(n_iter, max_iter, pid=pid, killed=killed):
                    if n_iter == 2 and not killed:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(n_iter)

                est.progress = kill
                fit_distributed(est, data)
            assert killed, method
            assert est.truths_.equals(calm.truths_), method
            assert est.n_iter_ == calm.n_iter_, method
            np.testing.assert_allclose(est.objective_, calm.objective_, rtol=1e-12)
            cl.wait_for_workers(2, timeout=120)  # a restart is slow on a loaded machine


def test_the_local_cluster_listens_on_loopback_only_without_a_dashboard(client):
    import urllib.error
    import urllib.request

    def sockets(dask_scheduler):
        http = [s.getsockname() for s in dask_scheduler.http_server._sockets.values()]
        return dask_scheduler.address, http

    address, http = client.run_on_scheduler(sockets)
    assert address.startswith("tls://127.0.0.1:") and {h for h, _ in http} == {"127.0.0.1"}
    assert all(w.startswith("tls://127.0.0.1:") for w in client.scheduler_info()["workers"])
    # Its HTTP port answers health checks only: no dashboard page.
    port = http[0][1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as page:
        assert page.status == 200
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5)
    assert info.value.code == 404


def test_missing_cells_error_by_default_and_drop_as_in_memory(files, client, tmp_path):
    frame = files["num_frame"].copy()
    frame.loc[[5, 700], "answer"] = np.nan
    for i, part in enumerate(_split(frame, 2)):
        part.to_csv(tmp_path / f"p{i}.csv", index=False)
    with pytest.raises(ValidationError, match="2 row"):
        ingest(tmp_path, client)
    data = ingest(tmp_path, client, partitions=3, on_missing="drop")
    assert data.notes == ("dropped 2 row(s) with a missing task, worker or answer",)
    mem = Answers.from_frame(frame, on_missing="drop")
    assert data.n_answers == mem.n_answers and data.n_tasks == mem.n_tasks
    dist = fit_distributed(make_estimator("crh"), data)
    ref = make_estimator("crh").fit(mem)
    np.testing.assert_allclose(dist.truths_, ref.truths_, rtol=1e-9)
    assert dist.truths_.index.equals(ref.truths_.index)


GOLD_CASES = [
    ("cat", "mv", {}),
    ("cat", "wv", {"max_iter": 4}),
    ("cat", "ds", {"max_iter": 5, "tol": 0.0}),
    ("cat", "one-coin-ds", {"max_iter": 5, "tol": 0.0}),
    ("cat", "aware-ds", {"max_iter": 6}),
    ("bin", "aware-one-coin", {"max_iter": 6}),
    ("cat", "crh", {"max_iter": 4}),
    ("bin", "lc", {"max_iter": 5, "tol": 0.0}),
    ("num", "median", {}),
    ("num", "crh", {"max_iter": 4, "tol": 0.0}),
    ("num", "gtm", {}),
    ("cat", "zbs", {"max_iter": 20}),
    ("bin", "private-ds", {"max_iter": 10}),
]


@pytest.mark.parametrize(("kind", "method", "params"), GOLD_CASES)
def test_gold_truths_fix_the_same_tasks_as_in_memory(kind, method, params, files, ingested):
    frame = files[f"{kind}_frame"]
    tasks = pd.unique(frame["task"])[::7]
    if kind == "num":
        gold = pd.Series(np.linspace(0.0, 20.0, len(tasks)), index=tasks)
    else:  # a label other than the majority's, where the gold changes something
        gold = pd.Series(frame.groupby("task")["answer"].min().loc[tasks].to_numpy(), index=tasks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mem = make_estimator(method, **params).fit(Answers.from_frame(frame), gold=gold)
        dist = fit_distributed(make_estimator(method, **params), ingested(kind, 3), gold=gold)
    _assert_same(mem, dist, numeric=kind == "num")
    # GTM maps a gold truth through its per-task standardisation and back: equal to round-off.
    np.testing.assert_allclose(dist.truths_.loc[tasks].to_numpy(float), gold.to_numpy(float))


def test_gold_naming_an_unknown_task_or_label_is_one_line(ingested):
    data = ingested("cat", 3)
    with pytest.raises(ValidationError, match="1 task"):
        fit_distributed(make_estimator("mv"), data, gold={"no-such-task": 0})
    with pytest.raises(ValidationError, match="outside the answer domain"):
        fit_distributed(make_estimator("mv"), data, gold={"t0": 99})


def _held(shard):
    """The names of the per-answer arrays a shard keeps, and the dtype kinds of all it keeps."""
    arrays = {k: v for k, v in vars(shard).items() if isinstance(v, np.ndarray)}
    per_answer = sorted(k for k, v in arrays.items() if len(v) == shard.n_answers)
    return per_answer, {v.dtype.kind for v in arrays.values()}


@pytest.mark.parametrize("method", ["one-coin-ds", "ds", "mv"])
def test_shards_are_lean_and_give_the_same_fit(method, files, client, tmp_path):
    """Integer task ids (the fast hash), more shards than threads: the fit is the in-memory
    one, and a shard keeps only worker and label codes per answer (no task codes) and no
    floats."""
    frame = files["bin_frame"].copy()
    frame["task"] = frame["task"].str[1:].astype(np.int64) * 7919  # spread, not 0..n
    frame["worker"] = frame["worker"].str[1:].astype(np.int64)
    for i, part in enumerate(_split(frame, 2)):
        part.to_parquet(tmp_path / f"part-{i}.parquet", index=False)
    data = ingest(tmp_path, client, partitions=5)
    assert data.n_answers == len(frame) and data.n_partitions == 5
    params = {"max_iter": 6, "tol": 0.0} if method != "mv" else {}
    mem, dist = _both(method, params, frame, data)
    _assert_same(mem, dist, numeric=False)
    for per_answer, kinds in client.gather([client.submit(_held, s) for s in data.shards]):
        assert per_answer == ["value", "worker"]
        assert kinds <= {"i", "u"}


def _count_reads(log: str | None) -> None:
    """Run on every worker: ``read_file`` appends the path it reads to ``log`` (None: undo)."""
    from privtd.inference.distributed import _shard

    original = getattr(_shard, "_uncounted_read_file", _shard.read_file)
    if log is None:
        _shard.read_file = original
        return
    _shard._uncounted_read_file = original  # type: ignore[attr-defined]

    def read_file(path, *args):
        with open(log, "a") as f:
            f.write(path + "\n")
        return original(path, *args)

    _shard.read_file = read_file


@pytest.mark.parametrize(("kind", "partitions"), [("cat", 7), ("num", None)])
def test_ingest_reads_each_file_once(kind, partitions, files, client, tmp_path):
    """However many shards: each file is read by one worker, once; and the shards are those
    of an ingest of the concatenated answers."""
    log = tmp_path / "reads.log"
    client.run(_count_reads, str(log))
    try:
        data = ingest(files[kind], client, partitions=partitions)
    finally:
        client.run(_count_reads, None)
    paths = sorted(str(p) for p in Path(files[kind]).iterdir())
    assert sorted(log.read_text().split()) == paths
    frame = files[f"{kind}_frame"]
    assert data.n_answers == len(frame)
    assert data.workers.tolist() == pd.unique(frame["worker"]).tolist()
    method = "ds" if kind == "cat" else "crh"
    params = {"max_iter": 4, "tol": 0.0}
    mem, dist = _both(method, params, frame, data)
    _assert_same(mem, dist, numeric=kind == "num")


def test_ingest_group_answers_is_deprecated(files, client):
    with pytest.warns(FutureWarning, match="group_answers is deprecated"):
        data = ingest(files["bin"], client, partitions=2, group_answers=100)
    assert data.n_answers == len(files["bin_frame"])


def test_tree_reduction_adds_in_float64_and_takes_the_largest_change():
    from privtd.inference.distributed._shard import Largest, combine

    a = (np.array([1, 2], dtype=np.int64), Largest(0.5), 3, None)
    b = (np.array([0.25, 0.5]), Largest(0.125), 4, None)
    arr, largest, count, nothing = combine(a, b)
    assert arr.dtype == np.float64 and arr.tolist() == [1.25, 2.5]
    assert isinstance(largest, Largest) and largest == 0.5
    assert count == 7 and nothing is None


@pytest.mark.parametrize(
    ("method", "kind"), [("one-coin-ds", "cat"), ("wv", "cat"), ("gtm", "num")]
)
def test_results_written_by_the_workers_as_parquet(method, kind, files, ingested, tmp_path):
    params = {"one-coin-ds": {"max_iter": 5, "tol": 0.0}, "wv": {"max_iter": 4}, "gtm": {}}[method]
    frame = files[f"{kind}_frame"]
    mem = make_estimator(method, **params).fit(Answers.from_frame(frame))
    out = tmp_path / "truths.parquet"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        dist = fit_distributed(make_estimator(method, **params), ingested(kind, 3), output=out)
    assert dist.output_ == str(out) and not hasattr(dist, "truths_")
    parts = sorted(out.iterdir())
    assert [p.name for p in parts] == [f"part-{i:05d}.parquet" for i in range(3)]
    assert [p.name for p in tmp_path.iterdir()] == ["truths.parquet"]  # no temporary left
    got = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True).set_index("task")
    assert len(got) == len(mem.truths_) and not got.index.duplicated().any()
    got = got.loc[mem.truths_.index]
    if kind == "num":
        np.testing.assert_allclose(got["truth"], mem.truths_, rtol=1e-9)
        assert list(got.columns) == ["truth"]
    else:
        assert (got["truth"].to_numpy() == mem.truths_.to_numpy()).all()
        probas = got[[f"p_{label}" for label in mem.probas_.columns]].to_numpy()
        np.testing.assert_allclose(probas, mem.probas_.to_numpy(), atol=1e-9)
    np.testing.assert_allclose(dist.weights_["weight"], mem.weights_["weight"], rtol=1e-9)


def test_parquet_output_is_all_or_nothing(ingested, tmp_path):
    out = tmp_path / "truths.parquet"
    with pytest.raises(ValidationError, match="binary"):  # fails mid-fit, after the folder
        fit_distributed(make_estimator("lc"), ingested("cat", 3), output=out)
    assert list(tmp_path.iterdir()) == []
    out.mkdir()
    with pytest.raises(ValidationError, match="exists"):
        fit_distributed(make_estimator("mv"), ingested("cat", 3), output=out)


@pytest.mark.parametrize("method", ["aware-ds", "mv"])
def test_service_aggregates_a_campaign_through_the_cluster(method, client, files):
    """``privtd serve --dask-scheduler``: the campaign's reports (integer-coded, read from the
    database) go to the cluster as Parquet; the campaign's label domain is kept, a label
    with no report included; the same truths as the in-memory fit."""
    pytest.importorskip("sqlalchemy")
    from privtd.mechanisms import OneLayerRR
    from privtd.service.aggregate import fit_on_cluster

    frame = files["bin_frame"].sample(frac=1.0, random_state=8)  # reports in arrival order
    codes = Answers.from_frame(frame)
    answers = Answers(
        task=codes.task,
        worker=codes.worker,
        value=codes.value,
        tasks=pd.Index([f"t{t}" for t in codes.tasks]),
        workers=codes.workers,
        labels=pd.Index([0, 1, 2], name="label"),  # the campaign's domain: 2 never reported
    )
    params = {"mechanism": OneLayerRR(0.2, n_labels=3), "max_iter": 8} if method != "mv" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mem = make_estimator(method, **params).fit(answers)
        dist = fit_on_cluster(
            make_estimator(method, **params),
            answers,
            client.scheduler.address,
            security=client.security,
        )
    assert list(dist.probas_.columns) == [0, 1, 2]
    assert dist.truths_.equals(mem.truths_)
    np.testing.assert_allclose(dist.probas_, mem.probas_, atol=1e-9)


def test_reports_sent_to_the_cluster_are_private_to_the_server_and_removed(
    files, tmp_path, monkeypatch
):
    """What the service writes for a cluster fit is only what the requester already holds
    (task, worker, perturbed answer), in a folder no other local user can read, gone after
    the fit, even a failed one."""
    import privtd.inference.distributed as distributed
    from privtd.service.aggregate import fit_on_cluster

    answers = Answers.from_frame(files["bin_frame"])
    seen: dict[str, object] = {}

    @contextlib.contextmanager
    def no_cluster(**_):
        yield None

    def spy(estimator, path, **_):
        folder = os.path.dirname(path)
        seen["mode"] = stat.S_IMODE(os.stat(folder).st_mode)
        seen["columns"] = list(pd.read_parquet(path).columns)
        seen["folder"] = folder
        raise RuntimeError("the cluster fell over")

    monkeypatch.setattr(distributed, "connect", no_cluster)
    monkeypatch.setattr(distributed, "fit_distributed", spy)
    with pytest.raises(RuntimeError, match="fell over"):
        fit_on_cluster(make_estimator("mv"), answers, "tcp://127.0.0.1:1", str(tmp_path))
    assert seen["mode"] == 0o700
    assert seen["columns"] == ["task", "worker", "answer"]
    assert not os.path.exists(str(seen["folder"])) and list(tmp_path.iterdir()) == []


def test_a_served_campaign_is_aggregated_on_the_cluster(client, tmp_path, monkeypatch):
    """``create_app(dask_scheduler=...)`` (``privtd serve --dask-scheduler``): a campaign's run
    goes through the cluster and reports what an in-memory fit of its reports gives."""
    pytest.importorskip("fastapi")
    import sqlalchemy as sa
    from fastapi.testclient import TestClient

    from privtd.service import aggregate, create_app
    from privtd.service.schema import campaigns as t_campaigns

    calls: list[str] = []
    real = aggregate.fit_on_cluster

    def recorded(estimator, *args, **kwargs):
        calls.append(type(estimator).__name__)
        return real(estimator, *args, **kwargs)

    monkeypatch.setattr(aggregate, "fit_on_cluster", recorded)
    token = "requester-secret-token-for-dask-tests"
    auth = {"Authorization": f"Bearer {token}"}
    app = create_app(
        f"sqlite:///{tmp_path / 's.db'}",
        requester_token=token,
        dask_scheduler=client.scheduler.address,
        dask_dir=str(tmp_path),
        dask_security=client.security,
    )
    body = {
        "name": "smiles",
        "tasks": [{"key": f"t{i}", "text": f"image {i}"} for i in range(30)],
        "mechanism": "one-layer",
        "epsilon": 2.0,
        "labels": ["no", "yes", "maybe"],
        "budget": 100.0,
    }
    gen = np.random.default_rng(4)
    with TestClient(app) as api:
        made = api.post("/campaigns", json=body, headers=auth).json()
        cid = made["id"]
        method = made["method"]  # the campaign's perturbation-aware default
        assert method in DISTRIBUTED_METHODS
        for w in range(6):
            code = api.post(f"/campaigns/{cid}/codes", json={"count": 1}, headers=auth)
            enrolled = api.post(
                f"/campaigns/{cid}/workers",
                json={"name": f"w{w}", "code": code.json()["codes"][0]},
            )
            reports = [  # "maybe" is never reported
                {"task": f"t{i}", "value": ["no", "yes"][int(gen.random() < 0.7)]}
                for i in range(30)
            ]
            mechanism = {"name": "one-layer", "params": made["mechanism"]["params"]}
            sent = api.post(
                f"/campaigns/{cid}/submissions",
                json={"mechanism": mechanism, "reports": reports},
                headers={
                    "Authorization": f"Bearer {enrolled.json()['token']}",
                    "Idempotency-Key": f"k{w}",
                },
            )
            assert sent.status_code == 201, sent.text
        run = api.post(f"/campaigns/{cid}/runs", headers=auth).json()
        deadline = time.monotonic() + 60
        while run["status"] not in ("done", "failed") and time.monotonic() < deadline:
            time.sleep(0.05)
            run = api.get(f"/campaigns/{cid}/runs/{run['run_id']}", headers=auth).json()
        assert run["status"] == "done", run
        result = api.get(f"/campaigns/{cid}/results", headers=auth).json()
        with app.state.engine.connect() as conn:
            row = conn.execute(sa.select(t_campaigns).where(t_campaigns.c.id == cid)).first()
        answers, mech = aggregate.load(app.state.engine, row)
    assert not list(tmp_path.glob("privtd-run-*"))  # the reports' Parquet file is removed
    mem = make_estimator(method, mechanism=mech).fit(answers)
    assert calls == [type(mem).__name__]  # the run went through the cluster
    expected = {k: v for k, v in mem.truths_.items() if k in result["truths"]}
    assert set(result["truths"]) == {f"t{i}" for i in range(30)}
    assert mem.probas_.shape[1] == 3  # the campaign's domain, "maybe" included
    assert result["truths"] == {str(k): str(v) for k, v in expected.items()}
    app.state.engine.dispose()


# ---------------------------------------------------------------------- strangers and stalls
@contextlib.contextmanager
def _silent_scheduler():
    """A TCP port on 127.0.0.1 that accepts every connection and never sends a byte."""
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        server.close()


def _stranger_refused(address, **connection_args):
    """Whether a Dask handshake with ``address`` fails: without it, no request of any kind
    (running code, reading data) reaches the server. Bounded by its own deadline."""
    import asyncio

    from distributed.comm import connect as comm_connect

    async def attempt():
        comm = await asyncio.wait_for(comm_connect(address, timeout=5, **connection_args), 15)
        try:  # the handshake is through: ask the server to identify itself
            await comm.write({"op": "identity", "reply": True})
            await asyncio.wait_for(comm.read(), 10)
        finally:
            await comm.close()

    try:
        asyncio.run(attempt())
    except Exception:  # noqa: BLE001 - any failure to talk is a refusal
        return True
    return False


def _listening_addresses(cl):
    """The scheduler's, every worker's and every nanny's address."""
    info = cl.scheduler_info(n_workers=-1)
    workers = info["workers"]
    return [cl.scheduler.address, *workers, *(w["nanny"] for w in workers.values() if w["nanny"])]


def _strangers(address):
    """A stranger's ways in: the address as given and as tcp:// without credentials, TLS
    without a certificate, TLS with a certificate of its own making."""
    import ssl

    from distributed.security import Security

    plain = address.replace("tls://", "tcp://")
    bare = ssl.create_default_context()
    bare.check_hostname, bare.verify_mode = False, ssl.CERT_NONE
    own = Security.temporary().get_connection_args("client")
    return {
        "tcp, no credentials": (plain, {}),
        "tls, no certificate": (address, {"ssl_context": bare}),
        "tls, own certificate": (address, own),
    }


def test_the_local_cluster_refuses_a_stranger_on_every_port(client):
    """Another local process that reaches the loopback ports of the cluster `--engine dask`
    starts cannot talk to its scheduler, workers or nannies; privtd's own client can."""
    addresses = _listening_addresses(client)
    assert len(addresses) == 5  # a scheduler, two workers, two nannies
    for address in addresses:
        assert address.startswith("tls://127.0.0.1:")
        for way, (target, args) in _strangers(address).items():
            assert _stranger_refused(target, **args), (address, way)
    # The same probe with the cluster's own credentials goes through: the refusals are the
    # certificate's doing.
    own = client.security.get_connection_args("client")
    assert not _stranger_refused(client.scheduler.address, **own)


def test_a_tls_cluster_of_privtd_certificates_refuses_a_stranger(remote):
    import distributed

    address, security = remote
    with connect(scheduler=address, security=security) as cl:
        addresses = _listening_addresses(cl)
    for target in addresses:
        for way, (aim, args) in _strangers(target).items():
            assert _stranger_refused(aim, **args), (target, way)
    # As a Dask client, too: no code runs.
    with pytest.raises(Exception):  # noqa: B017, PT011 - refused, whatever the error
        with distributed.Client(address, timeout="3s", set_as_default=False) as cl:
            cl.run(os.getpid)
    assert not _stranger_refused(address, **security.get_connection_args("client"))


def test_a_plain_tcp_scheduler_is_refused_without_the_flag(files, tmp_path, capsys):
    from privtd.inference.distributed import check_scheduler

    with pytest.raises(ValidationError, match="anyone who can reach this address runs code"):
        with connect(scheduler="tcp://127.0.0.1:8786"):
            pass
    with pytest.raises(ValidationError, match="plain TCP"):
        check_scheduler("127.0.0.1:8786")  # Dask's default scheme is tcp
    with pytest.raises(ValidationError, match="tls://"):
        check_scheduler("ws://127.0.0.1:8786", allow_plain_tcp=True)
    out = tmp_path / "t.csv"
    args = ["infer", str(files["cat"]), "-m", "mv", "-o", str(out), "--engine", "dask"]
    code, _, err = run([*args, "--scheduler", "tcp://127.0.0.1:8786"], capsys)
    assert code == 2 and "--allow-plain-tcp" in err and not out.exists()
    assert len(err.strip().splitlines()) == 1
    code, out_text, _ = run(["infer", "--help"], capsys)
    help_text = " ".join(out_text.split())
    assert "anyone who can reach this address runs code here" in help_text
    code, out_text, _ = run(["serve", "--help"], capsys)
    assert "anyone who can reach this address runs code here" in " ".join(out_text.split())
    # The service refuses it at start-up, before it touches the database.
    pytest.importorskip("fastapi")
    from privtd.service import create_app

    with pytest.raises(ValidationError, match="plain TCP"):
        create_app(f"sqlite:///{tmp_path / 's.db'}", dask_scheduler="tcp://127.0.0.1:8786")
    assert not (tmp_path / "s.db").exists()


def test_tls_without_certificates_and_a_bad_file_are_one_line(files, tmp_path, capsys):
    out = tmp_path / "t.csv"
    args = ["infer", str(files["cat"]), "-m", "mv", "-o", str(out), "--engine", "dask"]
    code, _, err = run([*args, "--scheduler", "tls://127.0.0.1:8786"], capsys)
    assert code == 2 and "--tls-ca-file" in err and len(err.strip().splitlines()) == 1
    code, _, err = run([*args, "--tls-cert", "c.pem"], capsys)
    assert code == 2 and "go with a --scheduler" in err
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    code, _, err = run(["infer", str(bad), *args[2:], "--workers", "1"], capsys)
    assert code == 2 and "Cannot read" in err
    assert err.strip().splitlines() == [err.strip().splitlines()[0]]  # no worker traceback
    assert "Traceback" not in err and not out.exists()


def test_more_workers_than_the_machine_runs_fail_fast(files, tmp_path, capsys):
    from privtd.inference.distributed import max_workers

    out = tmp_path / "t.csv"
    args = ["infer", str(files["cat"]), "-m", "mv", "-o", str(out), "--engine", "dask"]
    start = time.monotonic()
    code, _, err = run([*args, "--workers", "10000"], capsys)
    assert time.monotonic() - start < 5  # no cluster was started
    assert code == 2 and f"workers={max_workers()} or fewer" in err and "core" in err
    assert err.strip().endswith("(CLI: --workers, --scheduler).")
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    assert 1 <= max_workers() <= 2 * (os.cpu_count() or 1)


def test_a_silent_scheduler_is_a_one_line_error_within_the_connect_timeout(files, certs, tmp_path):
    """A scheduler that accepts and never answers: `privtd infer` stops within the connect
    timeout (3 s) with one line, over tcp:// (Dask's handshake read had no deadline) and
    over tls:// (the TLS handshake). Run as a command, so that a hang fails the test."""
    from privtd.inference.distributed import CONNECT_TIMEOUT

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "t.csv"
    with _silent_scheduler() as port:
        for scheme, extra in (("tcp", ["--allow-plain-tcp"]), ("tls", _tls_args(certs, "client"))):
            # The heavy imports first: the clock inside measures the command's own work.
            command = [
                sys.executable,
                "-c",
                "import sys, time, distributed, pandas, privtd.cli.infer\n"
                "import privtd.inference.distributed\n"
                "from privtd.cli import main\n"
                "t = time.monotonic()\n"
                "try: main(sys.argv[1:])\n"
                "finally: print(f'elapsed {time.monotonic() - t:.2f}', file=sys.stderr)",
            ]
            args = ["infer", str(files["cat"]), "-m", "mv", "-o", str(out), "--engine", "dask"]
            args += ["--scheduler", f"{scheme}://127.0.0.1:{port}", *extra]
            done = subprocess.run(
                command + args, env=env, capture_output=True, text=True, timeout=120
            )
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 2, done.stderr
            assert len(lines) == 2 and "Cannot reach the Dask scheduler" in lines[0], lines
            # Inside the command (after Python's start-up), the connect timeout plus the
            # closing of the half-made client, with room for a loaded machine.
            assert float(lines[1].split()[1]) < 3 * CONNECT_TIMEOUT + 5, lines
            assert not out.exists()


def test_a_stalled_step_ends_the_fit_with_one_line(client, monkeypatch):
    from privtd.errors import PrivtdError
    from privtd.inference.distributed._cluster import gather

    monkeypatch.setattr(client, "pass_timeout", 0.5)
    start = time.monotonic()
    with pytest.raises(PrivtdError, match="within 0.5 s") as info:
        gather(client, [client.submit(time.sleep, 5, pure=False)])
    assert time.monotonic() - start < 4.5 and "\n" not in str(info.value)


def _after(seconds, _previous):
    time.sleep(seconds)
    return seconds


def test_a_step_that_keeps_finishing_parts_outlasts_the_timeout(client, monkeypatch):
    """Five parts one after another, each within the timeout, all of them well past it: the
    step goes on (ingest's 200 shards at 1e9 answers)."""
    from privtd.inference.distributed._cluster import gather

    monkeypatch.setattr(client, "pass_timeout", 1.5)
    parts = [client.submit(_after, 0.6, None, pure=False)]
    for _ in range(4):
        parts.append(client.submit(_after, 0.6, parts[-1], pure=False))
    start = time.monotonic()
    assert gather(client, parts) == [0.6] * 5
    assert time.monotonic() - start > 1.5


def _service_with_two_requesters(tmp_path, **kwargs):
    from fastapi.testclient import TestClient

    from privtd.service import create_app, requesters

    tokens = ["requester-one-token-for-dask-stall-tests", "requester-two-token-for-dask-stalls"]
    app = create_app(f"sqlite:///{tmp_path / 's.db'}", requester_token=tokens[0], **kwargs)
    requesters.ensure(app.state.engine, tokens[1])
    return app, TestClient(app), [{"Authorization": f"Bearer {t}"} for t in tokens]


def _campaign_with_reports(api, auth, method):
    body = {
        "name": "stall",
        "tasks": [{"key": f"t{i}"} for i in range(10)],
        "mechanism": "one-layer",
        "epsilon": 2.0,
        "labels": ["no", "yes"],
        "budget": 100.0,
        "method": method,
    }
    made = api.post("/campaigns", json=body, headers=auth)
    assert made.status_code == 201, made.text
    cid = made.json()["id"]
    for w in range(3):
        code = api.post(f"/campaigns/{cid}/codes", json={"count": 1}, headers=auth)
        enrolled = api.post(
            f"/campaigns/{cid}/workers", json={"name": f"w{w}", "code": code.json()["codes"][0]}
        )
        sent = api.post(
            f"/campaigns/{cid}/submissions",
            json={
                "mechanism": {"name": "one-layer", "params": made.json()["mechanism"]["params"]},
                "reports": [{"task": f"t{i}", "value": "yes"} for i in range(10)],
            },
            headers={
                "Authorization": f"Bearer {enrolled.json()['token']}",
                "Idempotency-Key": f"{cid}-{w}",
            },
        )
        assert sent.status_code == 201, sent.text
    return cid


def _wait_run(api, auth, cid, run_id, seconds):
    deadline = time.monotonic() + seconds
    while True:
        run_ = api.get(f"/campaigns/{cid}/runs/{run_id}", headers=auth).json()
        if run_["status"] in ("done", "failed") or time.monotonic() > deadline:
            return run_
        time.sleep(0.05)


def test_a_service_run_on_a_silent_scheduler_fails_fast_and_leaves_no_file(certs, tmp_path):
    """`privtd serve --dask-scheduler` on a scheduler that accepts and never answers: the run
    fails within the connect timeout with one line, frees the runner (the requester's next
    run starts at once) and leaves no reports file behind."""
    pytest.importorskip("fastapi")
    from privtd.inference.distributed import CONNECT_TIMEOUT, tls_security

    security = tls_security(certs["ca"][0], *certs["client"])
    with _silent_scheduler() as port:
        app, api, auth = _service_with_two_requesters(
            tmp_path,
            dask_scheduler=f"tls://127.0.0.1:{port}",
            dask_dir=str(tmp_path),
            dask_security=security,
        )
        with api:
            cid = _campaign_with_reports(api, auth[0], "mv")
            for _ in range(2):  # the second run is not held behind the first
                start = time.monotonic()
                run_id = api.post(f"/campaigns/{cid}/runs", headers=auth[0]).json()["run_id"]
                run_ = _wait_run(api, auth[0], cid, run_id, 60)
                assert run_["status"] == "failed", run_
                assert "Cannot reach the Dask scheduler" in run_["error"]
                assert "\n" not in run_["error"]
                assert time.monotonic() - start < 3 * CONNECT_TIMEOUT + 5
                assert not list(tmp_path.glob("privtd-run-*"))
        app.state.engine.dispose()


def test_requesters_runs_never_wait_on_each_others_cluster(tmp_path, monkeypatch):
    """One requester's cluster run stalls (a cluster that takes its time): another requester's
    runs, on the cluster and in memory, finish meanwhile."""
    pytest.importorskip("fastapi")
    import threading

    from privtd.service import aggregate

    release = threading.Event()
    real = aggregate.fit_on_cluster
    stalled: list[str] = []

    def slow_for_the_first(estimator, answers, *args, **kwargs):
        if not stalled:
            stalled.append("first")
            release.wait(60)
            raise aggregate.PrivtdError("the cluster gave up")
        return estimator.fit(answers)  # a cluster that answers at once

    monkeypatch.setattr(aggregate, "fit_on_cluster", slow_for_the_first)
    app, api, auth = _service_with_two_requesters(
        tmp_path, dask_scheduler="tls://127.0.0.1:8786", dask_security=object()
    )
    try:
        with api:
            first = _campaign_with_reports(api, auth[0], "mv")
            on_cluster = _campaign_with_reports(api, auth[1], "mv")
            in_memory = _campaign_with_reports(api, auth[1], "glad")
            held = api.post(f"/campaigns/{first}/runs", headers=auth[0]).json()["run_id"]
            deadline = time.monotonic() + 30
            while not stalled and time.monotonic() < deadline:
                time.sleep(0.05)
            for cid in (on_cluster, in_memory):
                run_id = api.post(f"/campaigns/{cid}/runs", headers=auth[1]).json()["run_id"]
                assert _wait_run(api, auth[1], cid, run_id, 60)["status"] == "done"
            assert _wait_run(api, auth[0], first, held, 0)["status"] == "running"
            release.set()
            assert _wait_run(api, auth[0], first, held, 60)["status"] == "failed"
    finally:
        release.set()
        app.state.engine.dispose()
    assert real is not aggregate.fit_on_cluster


def test_cluster_certs_command_writes_private_keys_and_refuses_to_overwrite(tmp_path, capsys):
    folder = tmp_path / "tls"
    code, out, err = run(["cluster-certs", str(folder), "--workers", "2"], capsys)
    assert code == 0, err
    names = sorted(p.name for p in folder.iterdir())
    parties = ["client", "scheduler", "worker-1", "worker-2"]
    assert names == sorted(["ca.pem", *(f"{p}{s}" for p in parties for s in (".pem", "-key.pem"))])
    for path in folder.iterdir():
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0 if path.name.endswith("-key.pem") else mode & 0o022 == 0
    assert "dask scheduler --protocol tls" in out and "--tls-key" in out
    code, _, err = run(["cluster-certs", str(folder)], capsys)
    assert code == 2 and "exists" in err


@pytest.mark.parametrize("n_parts", [1, 3, 256, 257, 70_000])
def test_split_keeps_each_partitions_rows_in_file_order(n_parts):
    """Each piece holds exactly the rows whose task hashes to it, in the file's order, however
    many partitions (8-bit, 16-bit and 64-bit partition numbers sort differently)."""
    from privtd.inference.distributed import _shard

    rng = np.random.default_rng(7)
    frame = pd.DataFrame(
        {
            "task": rng.integers(0, 10**9, 20_000),
            "worker": rng.integers(0, 50, 20_000),
            "answer": rng.integers(0, 3, 20_000),
        }
    )
    _, local = _shard.summarise(frame, "categorical")
    pieces = _shard.split(frame, local, n_parts)
    part = _shard.task_partition(frame["task"], n_parts).astype(np.int64)
    for p, piece in enumerate(pieces):
        expected = np.flatnonzero(part == p)
        assert np.array_equal(piece["row"], expected)
        assert np.array_equal(piece["task"], frame["task"].to_numpy()[expected])


@pytest.mark.parametrize("n_repeats", [0, 1, 37])
def test_repeated_pairs_counted_as_a_hash_table_counts_them(n_repeats):
    from privtd.inference.distributed import _shard

    rng = np.random.default_rng(n_repeats)
    n_tasks, per_task, n_workers = 2_000, 5, 400
    task = np.repeat(np.arange(n_tasks), per_task)
    worker = np.concatenate([rng.choice(n_workers, per_task, replace=False) for _ in task[::5]])
    where = rng.choice(task.size // per_task, n_repeats, replace=False) * per_task
    worker[where + 1] = worker[where]  # answer 2 of those tasks repeats answer 1's worker
    row = np.arange(task.size)
    count, example = _shard._repeated_pair(task, worker, n_workers, row)
    pair = task * n_workers + worker
    assert count == int(pd.Series(pair).duplicated().sum()) == n_repeats
    if n_repeats:
        first = int(where.min())
        assert example == (int(task[first]), int(worker[first]), first, first + 1)
    else:
        assert example is None


@pytest.mark.parametrize(
    ("dtypes", "offsets", "expected"),
    [
        (("int64", "int64"), (0, 0), "int64"),  # moved as int32, given back as int64
        (("int64", "int64"), (0, 2**40), "int64"),  # one file's ids need 64 bits
        (("int32", "int32"), (0, 0), "int32"),
        (("int32", "int64"), (0, 0), "int64"),  # as pandas concatenates them in memory
    ],
)
def test_shard_gives_task_ids_back_in_their_files_dtype(dtypes, offsets, expected):
    from privtd.inference.distributed import _shard

    pieces = []
    for f, (dtype, offset) in enumerate(zip(dtypes, offsets, strict=True)):
        frame = pd.DataFrame(
            {
                "task": (np.arange(6) + offset + 10 * f).astype(dtype),
                "worker": np.arange(6) % 3,
                "answer": np.arange(6) % 2,
            }
        )
        _, local = _shard.summarise(frame, "categorical")
        (piece,) = _shard.split(frame, local, 1)
        maps = (np.arange(3, dtype=np.int32), np.arange(2, dtype=np.int8), np.int64(6 * f))
        pieces.append(_shard.recode(piece, maps))
    shard = _shard.Shard(pieces, 3, 2)
    ids = shard.task_ids
    assert ids.dtype == np.dtype(expected)
    want = np.concatenate([np.arange(6) + off + 10 * f for f, off in enumerate(offsets)]).astype(
        expected
    )
    assert np.array_equal(ids.to_numpy(), want)


@pytest.mark.parametrize("sorted_pieces", [True, False])
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint64"])
def test_a_shard_groups_tasks_as_a_hash_table_does(sorted_pieces, dtype):
    """Pieces whose ids ascend are merged by a sort, others hashed: either way the tasks come
    in order of first appearance, each task's answers in input order (what factorize and a
    stable sort of its codes give)."""
    from privtd.inference.distributed import _shard

    rng = np.random.default_rng(3)
    pieces = []
    for size in (0, 1, 500, 2_000, 37):
        ids = rng.integers(0, 300, size)
        pieces.append({"task": (np.sort(ids) if sorted_pieces else ids).astype(dtype)})
    order, counts, uniques = _shard._group_by_task(pieces)
    ids = np.concatenate([p["task"] for p in pieces])
    codes, expected_uniques = pd.factorize(ids, sort=False)
    assert np.array_equal(order, np.argsort(codes, kind="stable"))
    assert np.array_equal(counts, np.bincount(codes))
    assert np.array_equal(uniques, expected_uniques) and uniques.dtype == ids.dtype


@pytest.mark.parametrize(
    "values",
    [
        np.array([5, 3, 5, 0, 3, 9], dtype=np.int64),
        np.array([7, 7, 2], dtype=np.uint32),
        np.array([2**40, 1, 2**40], dtype=np.int64),  # too large for a table: hashed
        np.array([-1, 4, -1], dtype=np.int64),  # negative: hashed
        np.array([1, 0, 1], dtype=np.int8),
        np.array([], dtype=np.int64),
        np.random.default_rng(0).integers(0, 50_000, 10_000),
    ],
)
def test_factorize_of_small_integers_is_pandas_factorize(values):
    from privtd.inference.distributed import _shard

    col = pd.Series(values)
    codes, uniques = _shard._factorize(col)
    want_codes, want_uniques = pd.factorize(col, sort=False)
    assert np.array_equal(codes, want_codes) and codes.dtype == want_codes.dtype
    assert uniques.equals(want_uniques) and uniques.dtype == want_uniques.dtype
