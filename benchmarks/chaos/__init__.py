"""The chaos suite: faults against real workers on a Postgres cluster of its own.

`harness` (the cluster, the workers, a producer, the figures), `scenarios` (one function
per fault, sized by its arguments) and `app` (the handlers the workers run). The short
form is `pytest tests/chaos` (CI); the long form is `python -m benchmarks.chaos`.
"""
