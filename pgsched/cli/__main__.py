"""`python -m pgsched.cli`: the same as the `pgsched` command (and `python -m pgsched`)."""

from pgsched.cli import main

main(prog_name="pgsched")
