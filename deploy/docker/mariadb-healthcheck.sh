#!/bin/sh
# The `mariadb` image's health check: root logs in over TCP on 127.0.0.1:3306 with MARIADB_ROOT_PASSWORD
# (as the drainer does from its container) and runs a query.  Exit 0 = healthy.
MYSQL_PWD=${MARIADB_ROOT_PASSWORD:-}
export MYSQL_PWD
exec mariadb --protocol=tcp --host=127.0.0.1 --port=3306 --user=root --connect-timeout=5 -e 'SELECT 1' >/dev/null
