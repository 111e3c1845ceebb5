"""Run privtd's command line in-process, as the CLI tests do."""

from privtd.cli import main


def run_cli(args, capsys):
    """``(exit code, stdout, stderr)`` of ``privtd ARGS``; arguments may be paths or numbers."""
    code = 0
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err
