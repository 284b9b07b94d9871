"""rmq.server: the asyncio listeners over one set of broker services: the remoting server and client,
the broker's remoting processors and listener with its NameServer registration (broker_listener),
and the embedded process that hosts every listener (app)."""
