"""Readers that turn binlog storage (pump value logs, drainer file sinks, DDL history) into DataFrames."""
