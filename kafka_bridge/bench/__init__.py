"""kafka_bridge.bench: the Kafka-side benchmarks: stock clients against rmq and Tansu (clients), the
produce and fetch handlers in-process (handlers), and the codec micro-benchmarks (protocol, records).
They sit above the bridge's packages; `rmq bench` gets its commands through the plugin."""
