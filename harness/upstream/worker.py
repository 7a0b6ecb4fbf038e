"""Upstream bridge worker: `python -u worker.py --profile NAME` (protocol in PROTOCOL.md).

Reads JSON-line requests on stdin and writes exactly one JSON-line reply per request on
stdout; everything else (library prints, warnings, jax logs) goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time


def exit_when_orphaned(poll_seconds: float = 1.0) -> None:
    """Exit at once when the harness that started this worker is gone.

    A harness killed by a signal cannot shut its worker down, and a worker busy in a long
    request (a compilation, a hung library call) would not read the closed stdin until it
    finished: so a daemon thread watches the parent process id, which changes (to the
    init process or a subreaper) when the parent dies.
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True,
                        help="name of the pinned profile this interpreter runs "
                             "(profiles/<name>.txt); reported by hello")
    args = parser.parse_args(argv)
    exit_when_orphaned()
    # Must be set before jax is imported (harness_upstream imports it lazily).
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from harness_upstream.protocol import serve
    return serve(args.profile)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
