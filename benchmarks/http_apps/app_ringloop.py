"""Run one app of this directory on ringloop's server: ``python app_ringloop.py INTERFACE
SPEC PORT`` (``asgi app_asgi:hello 8000``).

Through ``ringloop.server.serve`` with the benchmarking settings: one worker, no access log,
warnings only, and a keep-alive timeout of 60 s (the idle-connection scenario holds its
connections for several seconds; every server in the suite gets a timeout at least that long
where it has one).
"""

import sys

from ringloop.server import serve

if __name__ == "__main__":
    interface, spec, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.exit(
        serve(
            spec,
            host="127.0.0.1",
            port=port,
            interface=interface,
            access_log=False,
            log_level="warning",
            timeout_keep_alive=60,
        )
    )
