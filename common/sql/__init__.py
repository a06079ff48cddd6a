"""SQL for the downstream and the upstream's tables: value mapping per column type, the MySQL and sqlite
dialects, DML rendering, and the choice of collation downstream.  Pure library code: no component imports."""
