"""The floating-point consistency attack on the browser page's numeric releases, before (the
page's samplers at f7fad90) and after (exact.js's grids and discrete laws).

The attack itself is JavaScript (float_page.mjs, run by Node, so that it sees the very doubles
the page computes); this runs it and prints its JSON. Usage::

    python benchmarks/attacks/float_page.py [releases]   # default 200,000 per mechanism
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("float_page.mjs")


def run(releases: int = 200_000) -> dict:
    """The attack's counts (see float_page.mjs) for ``releases`` releases per mechanism."""
    node = shutil.which("node")
    if node is None:
        raise SystemExit("This attack runs the page's code under Node.js: install node (20+).")
    done = subprocess.run(
        [node, str(SCRIPT), str(releases)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000), indent=1))
