"""Shared code of TiDB-Binlog in Python: protos, codecs, config, registry, TSO."""
