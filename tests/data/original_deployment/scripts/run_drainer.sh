#!/bin/sh
# Start a drainer as the original's deployments did (TiDB-Ansible's run_drainer.sh): the original's flags
# only.  PD_URLS, DRAINER_ADDR, NODE_ID and BIN_DIR are filled in by the deployment; run from the deploy
# directory.
set -e
ulimit -n 1000000 2>/dev/null || true

exec "${BIN_DIR}/drainer" \
    -node-id="${NODE_ID}" \
    -addr="${DRAINER_ADDR}" \
    -pd-urls="${PD_URLS}" \
    -data-dir="data.drainer" \
    -detect-interval 1 \
    -initial-commit-ts 0 \
    -log-file="log/drainer.log" \
    -config conf/drainer.toml \
    -L info
