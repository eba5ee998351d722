"""Masking credentials by their shape, whoever put them there.

mask.py and `dispatch.log.hide` mask the values dispatch resolved itself. A credential a job
carried in a plain env value, read from a file or printed from elsewhere is not one of those, so
what dispatch writes (every log line, a run's error text, the captured output) is also scrubbed
of the shapes well-known credentials have:

    sk-...          OpenAI keys: 32 to 256 letters and digits, a digit among the first 64 (a
                    dash would make it a name: `sk-prod-2024-eu-west`)
    sk-proj-...     OpenAI project, service account and admin keys (sk-proj- sk-svcacct-
                    sk-admin-) and Anthropic keys (sk-ant-): 20 to 256 of A-Z a-z 0-9 _ -, a
                    digit among the first 64
    gh?_...         GitHub tokens (ghp_ gho_ ghu_ ghs_ ghr_): 36 to 255 letters and digits
    github_pat_...  GitHub fine-grained tokens: 22 to 255 of A-Z a-z 0-9 _
    glpat-...       GitLab tokens: 20 to 255 of A-Z a-z 0-9 _ . -
    AKIA... ASIA... AWS access key ids: exactly 16 upper-case letters or digits
    AWS secret      40 of A-Z a-z 0-9 / + after aws_secret_access_key (or AWS_SECRET_ACCESS_KEY,
                    SecretAccessKey, secretAccessKey) and = or :, quoted or not: only the label
                    tells such a secret from any other 40 characters
    xox?-...        Slack tokens (xoxa- xoxb- xoxp- xoxr- xoxs-): 10 to 255, a digit among the
                    first 64
    eyJ...          JWTs: three base64url parts joined by dots (12 to 1024, 4 to 16384 and 16
                    to 1024 characters)
    Authorization   the credentials after `Authorization:` (so `Proxy-Authorization:` too) and a
                    scheme (Bearer, Basic, Token, Negotiate, NTLM): 8 to 4096 characters
    private key     a PEM private key's body, from its BEGIN line to its END line

A shape begins at a word's edge: not right after a letter or digit (`disk-...` holds no key,
`KAKIA...` no key id), except right after an escape (`\\n` in a JSON string) or a colour code
(`\\x1b[32m`), which glue text to what follows. Exact classes, minimum lengths and the digit
asked of the looser shapes keep near misses readable: `sk-learn`, a git SHA, a UUID, a base64
blob, `eyJ` alone, the word Authorization in a sentence or before `$TOKEN`.

The mask is `***` in place of the secret part, after a short prefix kept as it was: `ghp_***`,
`sk-proj-***`, `AKIA***`, `eyJ***`, `Authorization: Bearer ***`, `aws_secret_access_key=***`,
`-----BEGIN RSA PRIVATE KEY-----***-----END RSA PRIVATE KEY-----`. The prefix is public (its
provider documents it) and holds none of the secret, and it tells an operator what leaked, so
what to revoke.

Cost: every shape begins with one of `LEADS`, literals, so a regex of literals alone finds the
candidates at C speed (about 2 microseconds for a log line without any) and the shapes are
tried only where a lead begins. Every repeat has an upper bound (no real token is longer) and is
possessive: a job is untrusted, and output such as `-sk-sk-sk-...` must not make each lead scan
the rest of the chunk (unbounded, a 64 KiB chunk of it took 6 s; now about 30 ms).

A stream (`PatternStream`: a job's output) arrives cut anywhere. No shape spans a line, so what
a newline ended is decided and goes out at once. On the unfinished last line, everything from
the first place a shape may still begin or grow (a lead not matched yet, a match that reaches
the end, the start of a lead at the very end) is held for the next chunk, at most `MAX_HOLD`
bytes, and the last two bytes given out are kept for the edge of a shape that begins the next
chunk. Whatever the cuts, the stream is masked as it would be whole, while no line holds more.
A private key is masked line by line: after a line that ends with a `BEGIN ... PRIVATE KEY`
marker, every line is `***` up to its END line, at most `MAX_KEY_LINES` of them (a marker quoted
without a key must not blank the rest of the output).

Not caught: a credential of another shape (a password, a provider not listed), one encoded,
split or reversed, an unsigned JWT, the part of a line past `MAX_HOLD` bytes held for a token's
end. Pure: this module imports nothing of dispatch, so the log, the reasons and the output file
can all use it.
"""

from __future__ import annotations

import re
from typing import AnyStr, Generic

MASK = "***"
MAX_HOLD = 64 * 1024  # what a stream holds back at most for an unfinished line
MAX_KEY_LINES = 256  # a 16384-bit RSA key has about 200

# a word's edge, or right after a JSON escape or a colour code (the docstring says why)
_EDGE = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt])|(?<=[0-9]m))"
_EDGE_WIDTH = 2  # how far back it looks: a stream keeps that much of what it gave out
_SEP = r"""\\?["']?[ \t]*[:=][ \t]*\\?["']?"""  # `: ` or `=`, quoted or JSON-escaped or neither
_SCHEME = r"(?:Bearer|Basic|Token|Negotiate|NTLM|bearer|basic|token)[ \t]+"
# base64, headers, escapes. Greedy, not possessive: nothing follows it, so its first try is the
# match, and Debian 12's CPython (3.11.2) ends a possessive repeat of this group too late,
# taking the END line's dashes with the body (3.11.7 does not)
_PEM_BODY = r"(?:[A-Za-z0-9+/=:,. \t{newlines}\\]|-(?!----)){16,}"

# name, the literals it begins with, what else is kept, what is masked
_SHAPES: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    (
        "sk_scoped",  # before "sk": the same lead, and a body that holds dashes
        ("sk-proj-", "sk-svcacct-", "sk-admin-", "sk-ant-"),
        "",
        r"(?=[A-Za-z0-9_-]{0,63}[0-9])[A-Za-z0-9_-]{20,256}+",
    ),
    ("sk", ("sk-",), "", r"(?=[A-Za-z0-9]{0,63}[0-9])[A-Za-z0-9]{32,256}+"),
    ("github", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), "", r"[A-Za-z0-9]{36,255}+"),
    ("github_pat", ("github_pat_",), "", r"[A-Za-z0-9_]{22,255}+"),
    ("gitlab", ("glpat-",), "", r"[A-Za-z0-9_.-]{20,255}+"),
    ("aws_key_id", ("AKIA", "ASIA"), "", r"[A-Z0-9]{16}(?![A-Za-z0-9])"),
    (
        "aws_secret",
        ("aws_secret_access_key", "AWS_SECRET_ACCESS_KEY", "SecretAccessKey", "secretAccessKey"),
        _SEP,
        r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
    ),
    (
        "slack",
        ("xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-"),
        "",
        r"(?=[A-Za-z0-9-]{0,63}[0-9])[A-Za-z0-9-]{10,255}+",
    ),
    (
        "jwt",
        ("eyJ",),
        "",
        r"[A-Za-z0-9_-]{12,1024}+\.[A-Za-z0-9_-]{4,16384}+\.[A-Za-z0-9_-]{16,1024}+",
    ),
    (
        "authorization",
        ("Authorization", "authorization", "AUTHORIZATION"),
        _SEP + _SCHEME,
        r"[A-Za-z0-9._~+/=-]{8,4096}+",
    ),
    ("private_key", ("-----BEGIN ",), r"[A-Z0-9 ]{0,32}PRIVATE KEY-----", _PEM_BODY),
)
LEADS: tuple[str, ...] = tuple(lead for _, leads, _, _ in _SHAPES for lead in leads)
_LONGEST_LEAD = max(map(len, LEADS))


def _shapes_source(newlines: str) -> str:
    """One alternative per shape, its kept prefix the shape's only group. `newlines`: what a
    private key's body may hold besides (a text holds a key whole; a stream's lines come one by
    one)."""
    alternatives = [
        f"(?P<{name}>(?:{'|'.join(map(re.escape, leads))}){kept})(?:{masked})"
        for name, leads, kept, masked in _SHAPES
    ]
    return _EDGE + "(?:" + "|".join(alternatives).replace("{newlines}", newlines) + ")"


class _Matcher(Generic[AnyStr]):
    """The shapes over str or bytes: `hint` finds where a lead begins, `shape` matches there."""

    hint: re.Pattern[AnyStr]
    shape: re.Pattern[AnyStr]
    mask: AnyStr

    def __init__(self, hint: re.Pattern[AnyStr], shape: re.Pattern[AnyStr], mask: AnyStr) -> None:
        self.hint = hint
        self.shape = shape
        self.mask = mask

    def scrub(self, text: AnyStr, start: int, end: int) -> AnyStr:
        """`text[start:end]` with every shape masked: a shape's edge may look back before
        `start`, and nothing looks past `end`."""
        pieces: list[AnyStr] = []
        done = start
        while (found := self.first(text, done, end)) is not None:
            kept = found.group(found.lastgroup or 0)
            pieces += (text[done : found.start()], kept, self.mask)
            done = found.end()
        if not pieces:
            return text[start:end]
        pieces.append(text[done:end])
        return self.mask[:0].join(pieces)

    def first(self, text: AnyStr, pos: int, end: int) -> re.Match[AnyStr] | None:
        """The leftmost match in `text[pos:end]`, as `shape.search` would find it, but fast."""
        while (lead := self.hint.search(text, pos, end)) is not None:
            found = self.shape.match(text, lead.start(), end)
            if found is not None:
                return found
            pos = lead.start() + 1
        return None


def _hint_source(leads: tuple[str, ...]) -> str:
    """The leads as one regex of literals, grouped by first character: at each place the scan
    stops, one group is tried, not every lead."""
    by_first: dict[str, list[str]] = {}
    for lead in leads:
        by_first.setdefault(lead[0], []).append(re.escape(lead[1:]))
    return "|".join(f"{re.escape(c)}(?:{'|'.join(rest)})" for c, rest in by_first.items())


_HINT = _hint_source(LEADS)
_TEXT = _Matcher(re.compile(_HINT), re.compile(_shapes_source(r"\r\n")), MASK)
_MASK_BYTES = MASK.encode()
# a stream's, whose private keys are masked line by line
_BYTES = _Matcher(re.compile(_HINT.encode()), re.compile(_shapes_source("").encode()), _MASK_BYTES)
_EDGE_AT = re.compile(_EDGE.encode())
# a lead cut by the end of a chunk (`gh`, `-----BEG`)
_LEAD_STARTS = {lead[:n] for lead in LEADS for n in range(1, len(lead))}
_PARTIAL = re.compile(
    (_EDGE + "(?:" + "|".join(map(re.escape, sorted(_LEAD_STARTS))) + r")\Z").encode()
)
_PEM_MARK = b"PRIVATE KEY-----"
_BEGIN_LINE = re.compile(rb"-----BEGIN [A-Z0-9 ]{0,32}PRIVATE KEY-----[ \t\r\n]*\Z")
_END = re.compile(rb"-----END [A-Z0-9 ]{0,32}PRIVATE KEY-----")


def scrub_patterns(text: str) -> str:
    """`text` with every credential shape masked."""
    return _TEXT.scrub(text, 0, len(text))


def scrub_patterns_bytes(data: bytes) -> bytes:
    """`data`, a whole stream, masked as `PatternStream` masks it."""
    stream = PatternStream()
    return stream.feed(data) + stream.flush()


class PatternStream:
    """Works on one buffer: the last bytes given out (what an edge looks back at), the bytes
    held back, then the new chunk; positions index it."""

    def __init__(self) -> None:
        self._seen = b""
        self._tail = b""
        self._key_lines = -1  # lines masked of the private key being printed; -1 outside one

    def feed(self, data: bytes) -> bytes:
        """What of `data` is decided, masked; the rest waits for the next chunk."""
        buf = self._seen + self._tail + data
        if self._key_lines < 0 and _PEM_MARK not in buf:
            return self._release(buf, len(self._seen))  # the common case: one pass
        return self._by_lines(buf, len(self._seen))

    def flush(self) -> bytes:
        """The bytes held back, masked, at the end of the stream."""
        buf, start = self._seen + self._tail, len(self._seen)
        self._seen = self._tail = b""
        return self._line(buf, start, len(buf)) if len(buf) > start else b""

    def _hold(self, buf: bytes, hold: int) -> None:
        self._seen = buf[max(hold - _EDGE_WIDTH, 0) : hold]
        self._tail = buf[hold:]

    def _release(self, buf: bytes, start: int) -> bytes:
        hold = max(_undecided(buf, start), len(buf) - MAX_HOLD)
        self._hold(buf, hold)
        return _BYTES.scrub(buf, start, hold)

    def _by_lines(self, buf: bytes, start: int) -> bytes:
        out = []
        while end := buf.find(b"\n", start) + 1:
            out.append(self._line(buf, start, end))
            start = end
        if self._key_lines >= 0 and len(buf) - start <= MAX_HOLD:
            self._hold(buf, start)  # a key's line: masked whole once it ends
        else:
            self._key_lines = -1  # a key has no such line: whatever this is, it is not one
            out.append(self._release(buf, start))
        return b"".join(out)

    def _line(self, buf: bytes, start: int, end: int) -> bytes:
        if self._key_lines >= 0:
            return self._key_line(buf, start, end)
        if _BEGIN_LINE.search(buf, start, end):
            self._key_lines = 0
        return _BYTES.scrub(buf, start, end)

    def _key_line(self, buf: bytes, start: int, end: int) -> bytes:
        found = _END.search(buf, start, end)
        if found is None and self._key_lines < MAX_KEY_LINES:
            self._key_lines += 1
            line = buf[start:end]
            return _MASK_BYTES + line[len(line.rstrip(b"\r\n")) :]
        self._key_lines = -1
        if found is None:
            return self._line(buf, start, end)
        head = _MASK_BYTES if found.start() > start else b""
        return head + _BYTES.scrub(buf, found.start(), end)


def _undecided(buf: bytes, start: int) -> int:
    """Where the part of `buf` that more bytes could still make (or grow) a match begins; its
    length when nowhere. Shapes never span lines: only the unfinished last one is looked at."""
    pos = max(buf.rfind(b"\n") + 1, start)
    while (lead := _BYTES.hint.search(buf, pos)) is not None:
        at = lead.start()
        found = _BYTES.shape.match(buf, at)
        if found is not None and found.end() < len(buf):
            pos = found.end()  # a whole match: decided
        elif found is not None or _EDGE_AT.match(buf, at):
            return at  # it may grow, or become one
        else:
            pos = at + 1  # inside a word: never one
    partial = _PARTIAL.search(buf, max(pos, len(buf) - _LONGEST_LEAD))
    return len(buf) if partial is None else partial.start()
