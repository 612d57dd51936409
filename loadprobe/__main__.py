"""``python -m loadprobe`` runs the command line, like the ``loadprobe`` script."""

from loadprobe.cli import main

main()
