"""Spark jobs over BoltMQ topics, each a function taking a SparkSession and a script that
spark-submit runs (``spark-submit pipeline/jobs/stats.py --help``); ``boltmq pipeline ...``
runs the same functions on a local session.

- ``stats``: message counts, bytes and produce-to-store latency per topic, tag and hour of
  store time, to Parquet partitioned by topic.
- ``export``: a topic range (offsets or store times) to Parquet, one row per message.
- ``replay``: Parquet rows (an export) sent back into a topic.
- ``common``: what the three share: time arguments, the local session, progress lines.
"""
