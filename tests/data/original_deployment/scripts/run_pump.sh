#!/bin/sh
# Start a pump as the original's deployments did (TiDB-Ansible's run_pump.sh): the original's flags only.
# PD_URLS, PUMP_ADDR, NODE_ID and BIN_DIR are filled in by the deployment; run from the deploy directory.
set -e
ulimit -n 1000000 2>/dev/null || true

exec "${BIN_DIR}/pump" \
    -node-id="${NODE_ID}" \
    -addr="${PUMP_ADDR}" \
    -advertise-addr="${PUMP_ADDR}" \
    -pd-urls="${PD_URLS}" \
    -data-dir="data.pump" \
    -fake-binlog-interval 1 \
    -heartbeat-interval 1 \
    -log-file="log/pump.log" \
    -config=conf/pump.toml \
    -L info
