"""Schema objects, DDL jobs and their history, shared by the upstream writer and the drainer."""
