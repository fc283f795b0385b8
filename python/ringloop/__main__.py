"""`python -m ringloop serve module:app`: the same command line as the `ringloop` script."""

import sys

from ringloop.server.cli import main

if __name__ == "__main__":
    sys.exit(main())
