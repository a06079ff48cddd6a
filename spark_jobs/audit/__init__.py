"""`binlog-spark audit` / `audit-binlog`: replica and binlog-stream audits on Spark.

Pure cores: ``plan`` (chunks of a key space), ``hashing`` (canonical row bytes and hashes),
``meta`` (table definitions of both sides merged), ``compare`` (DataFrame transforms),
``report`` (JSON and table output).  Edges: ``read`` (endpoints, discovery, chunk readers run by
Spark tasks), ``job`` (the audit's steps), ``binlog`` (the binlog-stream audit), ``cli``.
"""
