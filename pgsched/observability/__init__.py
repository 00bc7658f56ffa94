"""What an operator sees of a running process: its log lines (text or one JSON object per
line) and, with the `metrics` extra, its Prometheus metrics and health endpoints."""
