"""Handler modules that worker subprocesses started by the tests import (`--app ...:app`)."""
