"""JSON objects that refuse a key given twice.

`json.loads` keeps the last of two equal keys without a word, so `{"0": 5, "0": 9}` as offsets, or two
reports for one broker, would lose data silently. Stdlib only and nothing else of ours, so that any
package may import it.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["DuplicateKeyError", "loads_unique"]


class DuplicateKeyError(Exception):
    """A JSON object with `key` twice. Not a ValueError, so that callers catching malformed JSON
    (json.JSONDecodeError is one) do not mistake it for a syntax error."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise DuplicateKeyError(key)
        found[key] = value
    return found


def loads_unique(text: str | bytes) -> Any:
    """`json.loads`, raising DuplicateKeyError for an object that names a key twice."""
    return json.loads(text, object_pairs_hook=_unique_keys)
