"""Kafka API handlers, one module per API family, each calling rmq/broker services (SPEC §11).

Every handler is `async def handler(bridge, conn, version, body) -> dict | None`; None means
"send no response" (Produce with acks=0)."""
