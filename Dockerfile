# tierd for one node: `docker run`, or a Kubernetes DaemonSet (deploy/kubernetes/).
# How to build, run and give it capabilities: docs/operations.md, "Container image".
#
#   docker build -t tierd --build-arg REVISION=$(git rev-parse HEAD) .
#
# BASE is any image of Debian 12 (bookworm) or alike that provides python3 >= 3.11 on PATH
# with the venv module and ensurepip (Debian: python3 and python3-venv), sh, and useradd.
# The wheels pip installs are manylinux ones: glibc, not musl (no Alpine).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

# pip's own settings, for a mirror or an offline wheelhouse (PIP_INDEX_URL, PIP_FIND_LINKS,
# PIP_NO_INDEX=1, PIP_TRUSTED_HOST): build arguments, so none of them stays in the image.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
ARG PIP_TRUSTED_HOST

# The daemon's user (uid and gid 8470, like the port). Its home holds what it writes: the
# SQLite catalog, when there is one. Give it capabilities, or run as root: docs/operations.md.
RUN useradd --system --uid 8470 --user-group --home-dir /var/lib/tierd --no-create-home \
        --shell /usr/sbin/nologin tierd \
    && install -d -o 8470 -g 8470 -m 0750 /var/lib/tierd \
    && install -d -m 0755 /etc/tierd

# The libraries first, in a layer of their own (it changes with constraints.txt only), at
# the versions the tests run with: pyproject.toml's dependencies, pinned by constraints.txt.
WORKDIR /opt/tierd
# The daemon's distribution depends on tierd-client, built from the same tree (client/): it is
# installed from there, not from an index.
COPY pyproject.toml constraints.txt ./
RUN python3 -m venv /opt/tierd/venv \
    && python3 -c 'import tomllib; deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; print(*[d for d in deps if not d.startswith("tierd-client")], sep="\n")' \
        > requirements.txt \
    && venv/bin/pip install --no-cache-dir --disable-pip-version-check -c constraints.txt -r requirements.txt

COPY README.md ./
COPY client ./client
COPY tierd ./tierd
# The revision tierd_build_info reports (tierd/REVISION; "unknown" when not given).
ARG REVISION=unknown
RUN printf '%s\n' "$REVISION" > tierd/REVISION \
    && venv/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps ./client . \
    && rm -rf build ./*.egg-info client/build

# A read-only root file system is the way to run it: nothing is written beside the code.
ENV PATH=/opt/tierd/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    TIERD_CONFIG=/etc/tierd/config.yaml \
    MALLOC_ARENA_MAX=2
USER 8470:8470
WORKDIR /var/lib/tierd
EXPOSE 8470
# SIGTERM drains in-flight copies for drain_timeout_seconds (30 s): stop with a longer grace
# (docker stop -t 60; terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
# Liveness: the process and its event loop (/livez; no catalog or tier check). It asks port
# 8470 on the loopback: keep api.listen on that port (0.0.0.0:8470 for a probe from outside).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8470/livez', timeout=4)"]
# Last, so a new revision rebuilds no layer above (a build argument is part of the cache key
# of every RUN after it).
ARG BASE
ARG VERSION=unknown
ARG REVISION=unknown
LABEL org.opencontainers.image.title="tierd" \
      org.opencontainers.image.description="Checkpoint tiering daemon for ML training clusters" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${BASE}"
# Migrate at every start (tierd db upgrade: safe for many nodes at once), then run.
CMD ["sh", "-c", "tierd db upgrade && exec tierd run"]
