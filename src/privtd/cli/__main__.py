"""``python -m privtd.cli``: the same as the ``privtd`` command."""

from privtd.cli import main

main()
