"""Helpers for tests of the `rebalancer` command: the tree of its parsers, and Python source that
makes packages unimportable, as on an install without the extra that brings them.

A module, not a conftest: test files import it (`from cli_helpers import ...`).
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Iterator

__all__ = ["blocker", "command_tree"]


def command_tree(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """`parser` and every sub-command's parser below it, each with its path of sub-command names."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from command_tree(sub, (*path, name))


def blocker(names: str) -> str:
    """Python source that makes the top-level packages in `names` (a Python expression for a set of
    names) fail to import, and `importlib.util.find_spec` with them, from then on."""
    return textwrap.dedent(f"""
        import sys
        from importlib.abc import MetaPathFinder

        BLOCKED = {names}


        class Blocker(MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None


        sys.meta_path.insert(0, Blocker())
    """)
