"""The web console and Prometheus /metrics (issue 25), served on the broker process's asyncio loop;
see docs/console.md."""
from .app import Console, ConsoleError, start_console
from .context import ConsoleContext

__all__ = ["Console", "ConsoleContext", "ConsoleError", "start_console"]
