"""Deterministic SageMaker names: the same resource at the same generation gets the same name.

A create after a crash must find its own resource instead of making a twin, so
every name is a pure function of (namespace, name, uid, generation, role). The
readable part (namespace-name) is truncated to fit; the hash suffix keeps two
resources whose readable parts collide apart. Every name fits SageMaker's
`[a-zA-Z0-9](-*[a-zA-Z0-9])*` pattern and 63-character limit.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

MAX_LENGTH = 63
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_HASH_LENGTH = 8
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9-]+")
# `-g{generation}-{hash8}` at the end of a resource name (the role comes before it).
_SUFFIX = re.compile(r"-g([0-9]{1,9})-[0-9a-f]{8}$")
# Room the readable part always has: 63 less the longest suffix a role of plan.Names makes
# ("-nospec-promoted-g999999999-" and the hash) leaves 26; a hint of 24 fits inside it.
_HINT_LENGTH = 24


def _slug(text: str) -> str:
    return _NOT_ALLOWED.sub("-", text).strip("-")


def is_valid(name: str) -> bool:
    return bool(NAME_PATTERN.match(name))


@dataclass(frozen=True)
class Owner:
    """Identity of the OptimizedEndpoint a SageMaker resource belongs to."""

    namespace: str
    name: str
    uid: str

    def resource_name(self, role: str, generation: int) -> str:
        """A name for the SageMaker resource with `role` (e.g. `base`, `cand`) at `generation`.

        ``{namespace}-{name}`` truncated + ``-{role}-g{generation}-{hash8}``.
        """
        role_slug = _slug(role) or "r"
        digest = hashlib.sha256(
            f"{self.namespace}/{self.name}/{self.uid}/{generation}/{role}".encode()
        ).hexdigest()[:_HASH_LENGTH]
        suffix = f"-{role_slug}-g{generation}-{digest}"
        if len(suffix) > MAX_LENGTH - 1:
            raise ValueError(f"role {role!r} is too long for a SageMaker name")
        room = MAX_LENGTH - len(suffix)
        readable = _slug(f"{self.namespace}-{self.name}")[:room].strip("-") or "eo"
        name = readable + suffix
        assert is_valid(name), name
        return name

    def search_hint(self) -> str:
        """A substring every resource name of this owner contains (for a List call's
        NameContains): the readable part as far as the longest suffix leaves room for."""
        return _slug(f"{self.namespace}-{self.name}")[:_HINT_LENGTH].strip("-") or "eo"

    def made(self, name: str) -> bool:
        """Whether `name` is one of this owner's resource names, at any generation and role:
        the hash covers the uid, so a resource of the same name made before a re-create, or
        a person's lookalike, is not."""
        found = _SUFFIX.search(name)
        if found is None:
            return False
        head, generation = name[: found.start()], int(found.group(1))
        return any(
            self.resource_name(head[dash + 1 :], generation) == name
            for dash, char in enumerate(head)
            if char == "-" and head[dash + 1 :]
        )

    def variant_name(self, role: str, generation: int) -> str:
        """A production-variant name; short, because consoles show it in narrow columns."""
        digest = hashlib.sha256(
            f"{self.namespace}/{self.name}/{self.uid}/{generation}/{role}".encode()
        ).hexdigest()[:6]
        return f"{_slug(role)[:40] or 'v'}-g{generation}-{digest}"

    def tag_value(self) -> str:
        """The value of the ownership tag put on every resource the operator makes."""
        return f"{self.namespace}/{self.name}/{self.uid}"


OWNER_TAG_KEY = "optimizer.dev/owner"
