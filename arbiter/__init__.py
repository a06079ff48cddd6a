"""The arbiter: reads the drainer's Kafka topic and applies it to MySQL (`arbiter` command, `arbiter.main`).

Parts: `config` (keys and defaults), `reader` (Kafka, partition 0, start offset by binary search),
`position` (the pure search and duplicate rule), `bytequeue`, `checkpoint` (`arbiter_checkpoint`
table), `app` (wiring and lifecycle), `http_api` and `metrics`.
"""
