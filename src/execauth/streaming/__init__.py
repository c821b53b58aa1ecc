"""Decision streaming: every stored decision delivered to webhooks and NATS JetStream.

``events`` is pure (envelope, ids, signatures); ``sinks`` speak to the other systems;
``dispatcher`` moves each subscription's cursor through its organization's log.
"""
