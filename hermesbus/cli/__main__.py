"""``python -m hermesbus.cli`` is the ``hermesbus`` command."""

from . import main

main()
