"""``rmq admin``: mqadmin-style commands over the RocketMQ remoting protocol (SPEC §3, §9, §10)."""
