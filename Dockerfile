# One image for the target app, its consumers and the Locust master/workers.
#   app:       gunicorn --bind 0.0.0.0:8000 --workers 4 target_app.wsgi:app
#   consumer:  python -m target_app.consumer
#   locust:    locust -f locustfiles/mixed.py --master | --worker
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/harness

COPY pyproject.toml README.md ./
COPY target_app ./target_app
COPY harness ./harness
RUN pip install .

COPY locustfiles ./locustfiles
COPY plans ./plans

RUN useradd --create-home --uid 10001 harness
USER harness

EXPOSE 8000 8089
CMD ["gunicorn", "--bind", "0.0.0.0:8000", "--workers", "4", "--worker-class", "gthread", "--threads", "8", "target_app.wsgi:app"]
