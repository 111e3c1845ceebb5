"""Every public exception class privtd raises lives in privtd.errors."""

from __future__ import annotations

import ast
from pathlib import Path

import privtd.errors

SRC = Path(__file__).resolve().parents[1] / "src" / "privtd"


def _exception_classes(path: Path) -> list[str]:
    """Classes in a module whose bases end in Error, Exception or Warning."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
            if any(b.endswith(("Error", "Exception", "Warning")) for b in bases):
                found.append(node.name)
    return found


def test_public_exceptions_are_defined_in_errors():
    elsewhere = {
        f"{path.relative_to(SRC)}:{name}"
        for path in SRC.rglob("*.py")
        if path.name != "errors.py"
        for name in _exception_classes(path)
        if not name.startswith("_")  # private control flow inside one module
    }
    assert elsewhere == set()
    assert set(privtd.errors.__all__) == set(_exception_classes(SRC / "errors.py"))


def test_moved_exceptions_are_still_importable_where_they_were():
    from privtd.client import CeilingExceededError, ServiceError
    from privtd.secure import DropoutError
    from privtd.secure.parties import DropoutError as FromParties

    assert CeilingExceededError is privtd.errors.CeilingExceededError
    assert issubclass(CeilingExceededError, privtd.errors.BudgetExceededError)
    assert ServiceError is privtd.errors.ServiceError
    assert DropoutError is FromParties is privtd.errors.DropoutError
    assert issubclass(DropoutError, privtd.errors.ProtocolError)
