"""`LocalPostgres` lives in `rebalancer.testing` (a test peer, as `MockKafkaCluster` is); its old
import path keeps working. The command is `rebalancer pipeline postgres start|stop --dir DIR`."""

from rebalancer.testing.postgres import URL_FILE, LocalPostgres, free_port, server_bindir

__all__ = ["URL_FILE", "LocalPostgres", "free_port", "server_bindir"]

if __name__ == "__main__":  # `python -m rebalancer.pipeline.sinks.local start --dir DIR`, as before
    import sys

    from rebalancer.cli import main

    sys.exit(main(["pipeline", "postgres", *sys.argv[1:]]))
