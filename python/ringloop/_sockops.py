"""Low-level socket operations (`loop.sock_*`). Placeholder: being written."""


class SockOpsMixin:
    pass
