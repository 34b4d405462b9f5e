"""Entry point of a Dataplane worker process (``python -m fastpath._worker``)."""
import sys

from .dataplane import worker_entry

if __name__ == "__main__":
    sys.exit(worker_entry(sys.argv[1:]))
