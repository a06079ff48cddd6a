"""PySpark jobs over binlog history: `binlog-spark replay` (bulk replay) and `audit` / `audit-binlog`."""
