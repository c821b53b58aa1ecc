# syntax=docker/dockerfile:1
# execauth's image (docs/deploy.md). Two stages: the build stage installs the locked
# runtime dependencies and the package into a virtual environment; the final stage copies
# only that environment onto a fresh slim Python and runs it as a non-root user. It is
# meant to run with a read-only root filesystem: the only writable paths it needs are
# /tmp (a tmpfs: `serve --workers N` keeps its writer socket and metrics there) and, for
# SQLite only, the data directory /var/lib/execauth.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/execauth
# Dependencies first, exactly as locked (requirements/runtime.lock pins every one of them),
# so that a source change does not reinstall them.
COPY requirements/runtime.lock requirements/runtime.lock
RUN /opt/execauth/bin/pip install --no-deps -r requirements/runtime.lock
COPY pyproject.toml README.md ./
COPY src ./src
RUN /opt/execauth/bin/pip install --no-deps . \
    && /opt/execauth/bin/python -m compileall -q /opt/execauth/lib

FROM ${PYTHON_IMAGE}
# A fixed numeric user, so that Kubernetes' runAsNonRoot can check it without a lookup.
RUN groupadd --system --gid 10001 execauth \
    && useradd --system --uid 10001 --gid execauth --no-create-home \
        --home-dir /var/lib/execauth --shell /usr/sbin/nologin execauth \
    && install -d -o execauth -g execauth -m 0700 /var/lib/execauth
COPY --from=build /opt/execauth /opt/execauth
# Everything else is configured with EXECAUTH_* variables, or with secret files mounted in
# the directory EXECAUTH_SECRETS_DIR names (docs/deploy.md). Migrations are not a side
# effect of starting a replica: `execauth db upgrade` runs once per release (the compose
# file's and the chart's migration job). Without a database URL, SQLite in the data
# directory, where the generated secret key file lands too (mount a volume there).
ENV PATH=/opt/execauth/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    EXECAUTH_HOST=0.0.0.0 \
    EXECAUTH_PORT=8080 \
    EXECAUTH_MIGRATE_ON_START=false \
    EXECAUTH_DATABASE_URL=sqlite:////var/lib/execauth/execauth.db
WORKDIR /var/lib/execauth
USER 10001:10001
EXPOSE 8080
# The slim image has no curl; Python is there anyway. /healthz: the process serves HTTP.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('EXECAUTH_PORT', '8080'), timeout=2)"]
ENTRYPOINT ["execauth"]
CMD ["serve"]
