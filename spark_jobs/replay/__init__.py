"""`binlog-spark replay`: binlog history -> final image per row -> a downstream (MySQL, sqlite, parquet)."""
