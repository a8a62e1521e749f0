"""The broker's tables: each one plain state beside the actor that alone changes it.

`topics` (topics.json), `offsets` (consumerOffset.json), `groups` (subscriptionGroup.json),
`clients` (connections and subscriptions, memory only), `locks` (orderly consumption's queue
locks, memory only), and `delay_offsets` (delayOffset.json, timerOffset.json: the schedule
service's progress). `table_actor` is the actor base: a mailbox, and the file written after a
change through `supervisors.config_file`. Tables import nothing of the broker's but its config.
"""
