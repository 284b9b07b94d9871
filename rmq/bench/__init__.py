"""rmq.bench: the benchmark commands of `rmq bench` that belong to rmq itself: the store's put path
(rmq.bench.store) and the RocketMQ clients against a NameServer and broker it starts
(rmq.bench.client). They sit above every layer, like the CLI, so no library package imports a bench."""
