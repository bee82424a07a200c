"""The ``otel-rl`` command line (the console script's entry point): ``otel-rl stack ...``, ``otel-rl report``,
``otel-rl status``, ``otel-rl samples``, ``otel-rl replay``, ``otel-rl alerts`` and ``otel-rl agent ...``.

Each subcommand module registers its subparser with an ``add_*_command(subparsers)`` function that sets a
``handler`` default (a function of the parsed arguments returning the exit status); :func:`main` parses and calls
``args.handler(args)``. Errors the user can act on (a stack that does not start, a build that fails, the package's
data missing or from another release, a bad setting) end in one ``otel-rl: error: ...`` line and exit status 1.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from otel_rl_ops.alerts.cli import add_alerts_command
from otel_rl_ops.replay.cli import add_replay_command
from otel_rl_ops.report.cli import add_report_command
from otel_rl_ops.samples import add_samples_command
from otel_rl_ops.stack.agent import add_agent_command
from otel_rl_ops.stack.cli import add_stack_command
from otel_rl_ops.stack.gotools import InstallError
from otel_rl_ops.stack.services import StackError
from otel_rl_ops.status import add_status_command


def build_parser() -> argparse.ArgumentParser:
    """Return the ``otel-rl`` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="otel-rl", description="otel-rl tooling")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO level")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_stack_command(subparsers)
    add_report_command(subparsers)
    add_status_command(subparsers)
    add_samples_command(subparsers)
    add_replay_command(subparsers)
    add_alerts_command(subparsers)
    add_agent_command(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``otel-rl`` command line; return the exit status (also the console script's entry point)."""
    args = build_parser().parse_args(argv)
    if args.verbose or args.command == "stack":
        # The CLI owns this process, so configuring logging output here touches no library user's handlers.
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        status: int = args.handler(args)
    except (StackError, InstallError, OSError, ValueError) as error:
        print(f"otel-rl: error: {error}", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
