"""The broker, in wings that import only downward.

`broker` is the composition root (`Broker`, `open_broker`): it builds the parts in three
phases (tables and store; services and replication; handlers), hands each part the parts it
uses, and supervises them; nothing inside imports it. Below it: `handlers` (the request-code
table and the handlers), `services` (long polling, statistics, schedule, transactions, dedup,
registration, metrics), `ha` (replication: master, slave, config sync), `tables` (topics,
offsets, groups, clients, locks, delay offsets), and `config` / `ports` at the bottom.
"""
