"""The broker's request handlers: request code -> handler, in one table (`table`).

Each handler is built from exactly the parts it uses (a frozen record where it uses more than
a few); handlers use services, replication and tables, and nothing here owns long-lived state.
"""
