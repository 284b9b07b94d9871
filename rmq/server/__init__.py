"""rmq.server: the asyncio process that hosts every listener over one set of broker services."""
