# One image for the target app, its consumers and the Locust master/workers
# (docker-compose.yml builds it once as idempotency-harness:local):
#   app:       gunicorn --bind 0.0.0.0:8000 --workers 4 target_app.wsgi:app
#   consumer:  python -m target_app.consumer --heartbeat /tmp/consumer.heartbeat
#   locust:    locust -f harness/locustfiles/mixed.py --master | --worker
#
# The base is pinned by digest (python 3.11.10, Debian bookworm slim), the digest as
# a public, bot-maintained pin recorded it; a rebuild of the tag cannot change it.
# To move on: docker buildx imagetools inspect python:3.11-slim-bookworm.
FROM python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16

# The code runs from the source tree, as in a checkout (PYTHONPATH); the locustfiles
# and plans ship inside the package (harness/locustfiles, harness/plans; harness/bundled.py).
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONPATH=/srv/harness

WORKDIR /srv/harness

# Dependencies first, from pyproject.toml alone: a change to the code reuses this layer,
# only a change to the dependencies reinstalls them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --requirement /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# Then the code (the build context is narrowed by .dockerignore).
COPY target_app ./target_app
COPY harness ./harness

# Not root: nothing here needs it. Compose runs the Locust services as the caller's
# uid instead (HARNESS_UID), so that their histories on the host are the caller's.
RUN useradd --create-home --uid 10001 harness
USER 10001

EXPOSE 8000 8089
CMD ["gunicorn", "--bind", "0.0.0.0:8000", "--workers", "4", "--worker-class", "gthread", "--threads", "8", "target_app.wsgi:app"]
