"""``python -m gputrain`` is the ``gputrain`` command (handy where the script is not on PATH)."""

from gputrain.cli.main import main

main()
