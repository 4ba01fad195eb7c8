"""A test's own script put into a copy of the feed page: the page's Content-Security-Policy
allows only the page's script (by hash), so the copy's policy is widened by exactly the probe's
hash (the page itself is unchanged; a probe that is not allowed so would not run)."""

from __future__ import annotations

import base64
import hashlib
import re


def with_probe(page: str, probe: str) -> str:
    """``page`` with ``probe`` (a ``<script>...</script>`` element) before ``</body>``, its hash
    added to the ``script-src`` of the page's policy."""
    found = re.fullmatch(r"<script>(.*)</script>", probe, flags=re.DOTALL)
    assert found is not None, "a probe is one inline script element"
    digest = base64.b64encode(hashlib.sha256(found.group(1).encode()).digest()).decode()
    widened, n = re.subn(
        r"script-src ([^;\"]+)", rf"script-src \1 'sha256-{digest}'", page, count=1
    )
    assert n == 1, "the page carries no script-src policy"
    assert widened.count("</body>") == 1
    return widened.replace("</body>", probe + "</body>")
