"""The broker's long-lived behaviour, one module per part of the design card, each handed the
parts it uses by the composition root (`actors.broker.broker`).

`pull_hold` (long polling), `stats` (the statistics collector), `schedule` (delay levels and
timed delivery), `transaction` (half messages, END_TRANSACTION, the check-back), `dedup` (the
dedup index), `registration` (the registrar), `metrics` (the Prometheus collector) and
`request_stats` (request latencies and dead letters). Services use the tables, the store and
replication (`actors.broker.ha`), never a request handler.
"""
