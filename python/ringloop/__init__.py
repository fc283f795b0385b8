"""ringloop: a fast, trustworthy asyncio runtime for Linux.

The loop (`Loop`, `new_event_loop`, `run`, `EventLoopPolicy`, `install`) runs on io_uring with
an epoll fallback; `ringloop.watch` finds the line that blocked the loop.
"""

from ._core import io_uring_available
from .loop import Loop, new_event_loop
from .runner import EventLoopPolicy, install, run

__version__ = "0.1.0"

__all__ = [
    "EventLoopPolicy",
    "Loop",
    "__version__",
    "install",
    "io_uring_available",
    "new_event_loop",
    "run",
]
