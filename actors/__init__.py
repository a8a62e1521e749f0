"""The servers: `actors.registry` (RocketMQ's NameServer) and `actors.broker`.

Each keeps its state in actors (`supervisors.Actor`): plain state with no I/O, frozen command
classes, one request-code table. docs/actors.md lists every actor, the state it alone owns,
its commands, its supervisor and what a restart loses. Registry and broker never import each
other.
"""
