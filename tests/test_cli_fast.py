"""The fast command line (docs/scale.md): lazy imports, static choice lists, and the pyarrow CSV
reader giving exactly what pandas gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from privtd import _csv
from privtd.answers import Answers

SRC = str(Path(__file__).resolve().parent.parent / "src")
# scipy's top level is light (numba imports it); its stats and special modules are not.
HEAVY = ("numpy", "pandas", "scipy.stats", "scipy.special", "numba", "pyarrow")


def _loaded_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter has imported after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps(sorted(set(sys.modules) & {set(HEAVY)!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [["--help"], ["infer", "--help"], ["perturb", "--help"]])
def test_help_imports_neither_numpy_nor_pandas(args):
    code = (
        "from privtd.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
    )
    assert _loaded_after(code) == []


def test_import_privtd_is_light_and_its_names_still_resolve():
    assert _loaded_after("import privtd") == []
    # The lazy attributes load what they name, and only then.
    assert "pandas" in _loaded_after("import privtd; privtd.Answers")
    loaded = _loaded_after("import privtd; privtd.inference; privtd.mechanisms")
    assert "scipy.stats" not in loaded and "scipy.special" not in loaded


def test_lazy_attributes_are_the_real_objects():
    import privtd
    import privtd.inference as inference

    assert privtd.inference is inference
    assert privtd.METHODS is inference.METHODS
    assert privtd.make_estimator is inference.make_estimator
    assert privtd.Answers is Answers
    assert set(privtd.__all__) <= set(dir(privtd))
    with pytest.raises(AttributeError):
        privtd.no_such_name  # noqa: B018


def _modules_after(code: str, **env: str) -> list[str]:
    """Every module a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", **env},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["auto", "numpy"])
def test_a_ds_fit_through_the_cli_imports_only_what_it_runs(tmp_path, backend):
    from privtd import datasets
    from privtd.inference import _METHOD_SPECS

    answers = datasets.make_categorical(2000, 50, 2, answers_per_task=5, rng=0)[0]
    answers.to_frame().to_csv(tmp_path / "a.csv", index=False)
    code = (
        "from privtd.cli import main\n"
        "try:\n"
        f"    main(['infer', {str(tmp_path / 'a.csv')!r}, '-m', 'ds', '-o', "
        f"{str(tmp_path / 'o.csv')!r}])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
    )
    loaded = _modules_after(code, PRIVTD_BACKEND=backend)
    assert len(pd.read_csv(tmp_path / "o.csv")) == 2000  # the fit ran
    inference = {m for m in loaded if m.startswith("privtd.inference")}
    # 10,000 answers x 30 planned passes: numpy's kernels under "auto" too, so no numba.
    assert inference == {
        "privtd.inference",
        "privtd.inference._base",
        "privtd.inference._channel",  # the one-class warning's channel law
        "privtd.inference._em",
        "privtd.inference._kernels",
        "privtd.inference._kernels._numpy",
        "privtd.inference._ops",
        "privtd.inference._tags",  # the tags: is ds aware (takes_mechanism)?
        "privtd.inference.dawid_skene",
        "privtd.inference.decision",
    }
    estimators = {f"privtd.inference.{spec.split(':')[0]}" for spec in _METHOD_SPECS.values()}
    assert estimators & set(loaded) == {"privtd.inference.dawid_skene"}
    heavy = [m for m in loaded if m.split(".")[0] in ("numba", "dask", "distributed", "scipy")]
    assert heavy == []
    assert not any(m.startswith("privtd.mechanisms") for m in loaded)


def test_every_public_name_resolves_in_a_fresh_process():
    code = (
        "import privtd, privtd.inference as inference\n"
        "for module in (privtd, inference):\n"
        "    assert set(module.__all__) <= set(dir(module)), module\n"
        "    for name in module.__all__:\n"
        "        assert getattr(module, name) is not None, name\n"
        "from privtd.inference import GLAD, AwareNull, fit_distributed, decide, Estimator\n"
        "assert inference.METHODS['glad'] is GLAD and inference.RELEASE_METHODS['aware-null'] "
        "is AwareNull\n"
        "assert issubclass(GLAD, Estimator) and inference.glad.GLAD is GLAD\n"
    )
    loaded = _modules_after(code)
    assert "privtd.inference.distributed" in loaded and "privtd.inference.zencrowd" in loaded
    with pytest.raises(AttributeError):
        import privtd.inference

        privtd.inference.NoSuchEstimator  # noqa: B018


def test_the_method_table_lists_without_importing_and_resolves_on_use():
    loaded = _modules_after(
        "from privtd.inference import METHODS, RELEASE_METHODS\n"
        "names = [*METHODS, *RELEASE_METHODS]"
    )
    assert [m for m in loaded if m.startswith("privtd.inference")] == ["privtd.inference"]
    assert "numpy" not in loaded
    from privtd.inference import METHODS, RELEASE_METHODS, DawidSkene, make_estimator

    assert METHODS["ds"] is DawidSkene and METHODS.get("aware-null") is None
    assert "aware-null" in RELEASE_METHODS and "aware-null" not in METHODS
    assert len(METHODS) == 28 and len(RELEASE_METHODS) == 1
    assert type(make_estimator("ds")) is DawidSkene
    with pytest.raises(KeyError):
        METHODS["no-such-method"]


def test_static_choice_lists_equal_the_registries():
    from privtd.cli._names import MECHANISM_NAMES, METHOD_NAMES
    from privtd.inference import METHODS, RELEASE_METHODS
    from privtd.mechanisms import MECHANISMS

    assert list(METHOD_NAMES) == [*METHODS, *RELEASE_METHODS]
    assert list(MECHANISM_NAMES) == list(MECHANISMS)


def test_every_command_loads_lazily_and_lists_in_help():
    from click.testing import CliRunner

    from privtd.cli._common import COMMANDS, cli

    out = CliRunner().invoke(cli, ["--help"])
    assert out.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in out.output
        assert cli.get_command(None, name).name == name  # type: ignore[arg-type, union-attr]


# ---------------------------------------------------------------------- the CSV readers
TRICKY = {
    "quoted": 'task,worker,answer\n"t,1","w ""a""",yes\n"t\n2",w2,no\nt3,"w,3","ma, be"\n',
    "integer_ids": "task,worker,answer\n007,1,1\n7,01,0\n1.0,1,1\n007,01,0\n",
    "blank_cells": "task,worker,answer\nt1,w1,1\n,w2,0\nt2,,1\nt3,w3,\nt4,w4,0\n",
    "na_tokens": "task,worker,answer\nNA,w1,a\nt2,null,b\nt3,w3,None\nt4,n/a,NaN\nt5,w5,b\n",
    "unicode": "task,worker,answer\nété,ワーカー,✓\nété,wörker,✗\n日本,ワーカー,✓\n",
    "bom": "\ufefftask,worker,answer\nt1,w1,1\nt2,w1,2\n",
    "floats": "task,worker,answer\nt1,w1,0.1\nt1,w2,1e-3\nt2,w1,-2.5E1\nt2,w2,3\n",
    "infinite": "task,worker,answer\nt1,w1,inf\nt2,w1,-inf\nt3,w2,1\n",
    "bools": "task,worker,answer\nt1,w1,True\nt1,w2,false\nt2,w1,TRUE\n",
    "int_with_blank": "task,worker,answer\nt1,w1,1\nt1,w2,\nt2,w1,2\n",
    "mixed_labels": "task,worker,answer\nt1,w1,1\nt1,w2,a\nt2,w1, 2\n",
    "spaces": "task,worker,answer\n t1 ,w1 , 1\nt1,w1,1 \n",
    "extra_column": "task,worker,answer,note\nt1,w1,1,x\nt2,w1,0,\n",
    "crlf": "task,worker,answer\r\nt1,w1,a\r\nt2,w2,b\r\n",
    "big_int": "task,worker,answer\nt1,w1,99999999999999999999\nt2,w1,1\n",
}
# Input pyarrow leaves to pandas: pandas reads them its own way, or fails with its own error.
TO_PANDAS = {
    "ragged": "task,worker,answer\nt1,w1,1\nt2,w2\n",
    "extra_field": "task,worker,answer\nt1,w1,1,9\n",
    "duplicate_names": "task,worker,answer,answer\nt1,w1,1,2\n",
    "blank_name": "task,worker,answer,\nt1,w1,1,2\n",
    "header_only": "task,worker,answer\n",
    "empty": "",
    "latin1": "task,worker,answer\nt\xe9,w1,1\n",
}


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.csv"
    path.write_bytes(text.encode("latin-1" if name == "latin1" else "utf-8"))
    return str(path)


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_pyarrow_reads_what_pandas_reads(name, tmp_path):
    path = _write(tmp_path, name, TRICKY[name])
    fast = _csv._read_pyarrow(path, ["task", "worker"])
    assert fast is not None, "the pyarrow path should read this file itself"
    pd.testing.assert_frame_equal(fast, _csv._read_pandas(path, ["task", "worker"]))


@pytest.mark.parametrize("name", sorted(TO_PANDAS))
def test_what_pyarrow_refuses_goes_to_pandas(name, tmp_path):
    path = _write(tmp_path, name, TO_PANDAS[name])
    assert _csv._read_pyarrow(path, ["task", "worker"]) is None
    try:
        expected = _csv._read_pandas(path, ["task", "worker"])
    except Exception as exc:  # noqa: BLE001 - the same error, whatever it is
        with pytest.raises(type(exc)):
            _csv.read_csv(path, ["task", "worker"])
    else:
        pd.testing.assert_frame_equal(_csv.read_csv(path, ["task", "worker"]), expected)


@pytest.mark.parametrize("name", ["quoted", "integer_ids", "unicode", "floats", "blank_cells"])
def test_answers_from_csv_same_either_way(name, tmp_path, monkeypatch):
    path = _write(tmp_path, name, TRICKY[name])
    fast = Answers.from_csv(path, on_missing="drop")
    monkeypatch.setattr(_csv, "_read_pyarrow", lambda *_: None)
    slow = Answers.from_csv(path, on_missing="drop")
    pd.testing.assert_frame_equal(fast.to_frame(), slow.to_frame())
    pd.testing.assert_index_equal(fast.tasks, slow.tasks)
    pd.testing.assert_index_equal(fast.workers, slow.workers)
    assert fast.notes == slow.notes
    if fast.labels is None:
        assert slow.labels is None
    else:
        pd.testing.assert_index_equal(pd.Index(fast.labels), pd.Index(slow.labels))
