"""Does a plain env value look like a credential? For `dispatch submit`'s warning only: a value
given as a value is stored in Redis as it is, and the submitter may not have meant that.

Two signs, and only these, so ordinary values (numbers, paths, URLs, git hashes, UUIDs, dates,
words) pass without a word:

    a known token shape   a provider's prefix followed by as many token characters as its
                          tokens have (sk-, ghp_, github_pat_, xoxb-, AKIA, glpat-, ...), a
                          private key's PEM header, a URL with a password in it
    a long random string  32 characters or more of the base64/url-safe alphabet, with upper
                          case, lower case and digits, at least 4.3 bits of entropy per
                          character (a random 32 have about 4.6), and not shaped like a path

The answer names the sign, never the value: the warning is printed, and terminals are logged.
"""

from __future__ import annotations

import math
import re
from collections import Counter

_EDGE = r"(?<![A-Za-z0-9])"
_KNOWN: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (label, re.compile(pattern))
    for label, pattern in (
        ("sk-", _EDGE + r"sk-(?:[a-z]+-)?[A-Za-z0-9_-]{20,}"),
        ("sk_live_", _EDGE + r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
        ("ghp_", _EDGE + r"gh[pousr]_[A-Za-z0-9]{30,}"),
        ("github_pat_", _EDGE + r"github_pat_[A-Za-z0-9_]{20,}"),
        ("xoxb-", _EDGE + r"xox[abposre]-[A-Za-z0-9-]{10,}"),
        ("xapp-", _EDGE + r"xapp-[A-Za-z0-9-]{10,}"),
        ("AKIA", _EDGE + r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        ("glpat-", _EDGE + r"glpat-[A-Za-z0-9_-]{20,}"),
        ("AIza", _EDGE + r"AIza[A-Za-z0-9_-]{35}"),
        ("hf_", _EDGE + r"hf_[A-Za-z0-9]{30,}"),
        ("npm_", _EDGE + r"npm_[A-Za-z0-9]{36}"),
        ("pypi-", _EDGE + r"pypi-[A-Za-z0-9_-]{50,}"),
        ("a private key", r"-----BEGIN [A-Z ]*PRIVATE KEY"),
        ("a password in a URL", r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@"),
    )
)
_TOKENISH = re.compile(r"[A-Za-z0-9+/=_.-]{32,}")
MIN_BITS_PER_CHAR = 4.3  # random base62 of 32 characters has about 4.6; camelCase words about 4


def credential_sign(value: str) -> str:
    """What makes `value` look like a credential ("" when nothing does)."""
    for label, pattern in _KNOWN:
        if pattern.search(value):
            return label
    return "a long random string" if _random_looking(value) else ""


def _random_looking(value: str) -> bool:
    if not _TOKENISH.fullmatch(value) or value[0] in "/.~":
        return False
    classes = (str.isupper, str.islower, str.isdigit)
    if not all(any(test(c) for c in value) for test in classes):
        return False  # hex digests, words, numbers: one or two classes only
    return bits_per_char(value) >= MIN_BITS_PER_CHAR


def bits_per_char(value: str) -> float:
    counts = Counter(value)
    total = len(value)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def warning(env: dict[str, str]) -> str:
    """One line naming the variables whose values look like credentials ("" when none)."""
    signs = {name: sign for name, value in env.items() if (sign := credential_sign(value))}
    if not signs:
        return ""
    listed = ", ".join(f"{name} ({sign})" for name, sign in sorted(signs.items()))
    return (
        f"warning: env {listed} looks like a credential and is stored in Redis as given; "
        "pass it by reference instead: --secret NAME=<profile>/<name>"
    )
