"""`python -m pgsched`: the same as the `pgsched` command."""

from pgsched.cli import main

main()
