# The fixtures and helpers of pgsched.testing (pgsched_app, pgsched_dsn, pgsched_tx).
pytest_plugins = ["pgsched.testing"]
