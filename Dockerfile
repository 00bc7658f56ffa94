# pgsched: the CLI (migrate, worker, scheduler, ...) with the Redis extra.
#
#   docker build -t pgsched:local .
#   docker run --rm -e PGSCHED_DSN=postgresql://... pgsched:local pgsched migrate
#
# Your handlers: put your module in this folder (it is copied to /app, the working directory,
# which `pgsched worker --app module:app` imports from), or mount it at /app/yourmodule.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# The package first, so that editing your own modules does not reinstall the dependencies.
COPY pyproject.toml README.md ./
COPY pgsched ./pgsched
COPY sql ./sql
RUN pip install ".[redis]"

# The rest of the project (your handler modules, the demo and benchmark apps).
COPY . .

RUN useradd --create-home --uid 10001 pgsched
USER pgsched

CMD ["pgsched", "--help"]
