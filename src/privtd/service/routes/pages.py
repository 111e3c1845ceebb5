"""The browser client: a page that perturbs in the browser (``static/perturb.js``), served
beside the API and left out of its description."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

STATIC = Path(__file__).parent.parent / "static"

router = APIRouter()


@router.get("/collect", include_in_schema=False)
def collect() -> FileResponse:
    return FileResponse(STATIC / "collect.html", media_type="text/html")
