# syntax=docker/dockerfile:1.7
# endpoint-optimizer operator image: `endpoint-optimizer run` (kopf) as a non-root user.
#
# The base is pinned by tag: no registry is reachable where this file was written, so a
# digest could not be verified. Pin it at release time:
#   docker buildx imagetools inspect python:3.11-slim-bookworm  ->  PYTHON_IMAGE=...@sha256:...
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: the project's wheel and its runtime dependencies' wheels, nothing else ---
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
# No extras: the test extra (pytest, kmock, scipy, helm, ...) never reaches the image.
RUN pip wheel --wheel-dir /wheels .

# --- runtime ---
FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN groupadd --system --gid 10001 optimizer \
 && useradd --system --uid 10001 --gid optimizer --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin optimizer
# Install offline from the build stage's wheels only; the wheels are bind-mounted, not
# copied, so they do not stay in a layer. pip and setuptools are not needed at run time.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --no-index --find-links=/wheels endpoint-optimizer \
 && /opt/venv/bin/pip uninstall --yes pip setuptools
USER 10001:10001
# 8080: Prometheus /metrics; 8081: kopf's liveness endpoint /healthz (see the Helm chart).
EXPOSE 8080 8081
ENTRYPOINT ["endpoint-optimizer", "run"]
