"""URL slugs."""

import re


def slugify(title: str) -> str:
    """Lower-case words joined by single hyphens: 'Hello,  World!' -> 'hello-world'."""
    words = re.split(r"\s+", title.strip().lower())
    return "-".join(words)
