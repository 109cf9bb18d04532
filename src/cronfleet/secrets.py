"""The secrets vault: named values encrypted with AES-256-GCM under a server key.

* Each secret belongs to a namespace (``default`` unless the caller says otherwise).
* The server key comes from ``CRONFLEET_SECRET_KEY`` (base64 of 32 bytes) or from the file
  named by ``CRONFLEET_SECRET_KEY_FILE`` (the same base64 text). Its *key id* -- the first
  16 hex digits of SHA-256 over the key -- is stored with each value, so rotation can tell
  which key encrypted what. Previous keys (``CRONFLEET_SECRET_KEY_PREVIOUS``, comma
  separated base64) still decrypt; :meth:`Vault.rotate` re-encrypts everything under the
  current key.
* Every value gets a fresh random 96-bit nonce; the associated data binds the ciphertext to
  its ``namespace`` and ``name``, so rows cannot be swapped in the database.
* ``${secrets.NAME}`` references are expanded with :func:`expand` right before a request is
  sent; :class:`Redactor` hides the expanded values in everything that is recorded.

Values never leave this module except through :meth:`Vault.get` / :meth:`Vault.resolve`;
no ``repr``, message or exception here contains one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cronfleet.errors import CronfleetError
from cronfleet.extras import require

try:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
except ImportError:
    require("http", "the secret vault")  # one line naming the pip install
    raise

if TYPE_CHECKING:
    from cronfleet.store.secrets import SecretStore

__all__ = [
    "DEFAULT_NAMESPACE",
    "KEY_ENV",
    "KEY_FILE_ENV",
    "PREVIOUS_KEYS_ENV",
    "REDACTED",
    "Keyring",
    "Redactor",
    "SecretError",
    "SecretInfo",
    "SecretKey",
    "UnknownSecret",
    "Vault",
    "VaultLocked",
    "check_secret_name",
    "expand",
    "generate_key",
    "references",
]

KEY_ENV = "CRONFLEET_SECRET_KEY"
KEY_FILE_ENV = "CRONFLEET_SECRET_KEY_FILE"
PREVIOUS_KEYS_ENV = "CRONFLEET_SECRET_KEY_PREVIOUS"
DEFAULT_NAMESPACE = "default"
REDACTED = "[REDACTED]"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")
_REF = re.compile(r"\$\{secrets\.([^}]*)\}")


class SecretError(CronfleetError):
    """A vault problem (bad key, bad name, undecryptable value); never carries a value."""


class VaultLocked(SecretError):
    """No server key is configured (or it is not the one the values were encrypted with)."""


class UnknownSecret(SecretError):
    def __init__(self, name: str, namespace: str) -> None:
        super().__init__(f"unknown secret {name!r} in namespace {namespace!r}")
        self.name = name
        self.namespace = namespace


def check_secret_name(name: object) -> str | None:
    """The problem with a secret name, or None."""
    if not isinstance(name, str) or not _NAME.match(name):
        return (f"invalid secret name {name!r}: use 1-128 characters from letters, digits and "
                "_.- starting with a letter or _")
    return None


# -- keys ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SecretKey:
    """A 32-byte AES-256 key and its id. ``repr`` never shows the key."""

    material: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.material) != 32:
            raise SecretError(f"a secret key must be 32 bytes, got {len(self.material)}")

    @property
    def id(self) -> str:
        return hashlib.sha256(self.material).hexdigest()[:16]

    @classmethod
    def from_base64(cls, text: str, where: str) -> SecretKey:
        try:
            raw = base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise SecretError(f"{where}: not base64 text (generate a key with "
                              "'cronfleet secrets generate-key')") from None
        if len(raw) != 32:
            raise SecretError(f"{where}: the key must decode to 32 bytes, got {len(raw)}")
        return cls(raw)


def generate_key() -> str:
    """A new random key as base64 text (for ``CRONFLEET_SECRET_KEY``)."""
    return base64.b64encode(os.urandom(32)).decode()


@dataclass(frozen=True)
class Keyring:
    """The current key (encrypts; may be None: the vault is locked) and older keys that
    still decrypt."""

    current: SecretKey | None
    previous: tuple[SecretKey, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Keyring:
        env = os.environ if env is None else env
        current = None
        if env.get(KEY_ENV, "").strip():
            current = SecretKey.from_base64(env[KEY_ENV], KEY_ENV)
        elif env.get(KEY_FILE_ENV, "").strip():
            path = Path(env[KEY_FILE_ENV].strip())
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise SecretError(f"{KEY_FILE_ENV}={path}: cannot read the key file: "
                                  f"{exc.strerror or exc}") from None
            current = SecretKey.from_base64(text, f"{KEY_FILE_ENV}={path}")
        previous = tuple(
            SecretKey.from_base64(part, f"{PREVIOUS_KEYS_ENV} (entry {i + 1})")
            for i, part in enumerate(p for p in env.get(PREVIOUS_KEYS_ENV, "").split(",")
                                     if p.strip())
        )
        return cls(current, previous)

    def find(self, key_id: str) -> SecretKey | None:
        for key in (self.current, *self.previous):
            if key is not None and key.id == key_id:
                return key
        return None


def _aad(namespace: str, name: str) -> bytes:
    return f"cronfleet-secret\0{namespace}\0{name}".encode()


def encrypt(key: SecretKey, namespace: str, name: str, value: str) -> tuple[bytes, bytes]:
    nonce = os.urandom(12)
    return nonce, AESGCM(key.material).encrypt(nonce, value.encode(), _aad(namespace, name))


def decrypt(key: SecretKey, namespace: str, name: str, nonce: bytes, ciphertext: bytes) -> str:
    try:
        return AESGCM(key.material).decrypt(nonce, ciphertext, _aad(namespace, name)).decode()
    except InvalidTag:
        raise SecretError(
            f"secret {name!r} in namespace {namespace!r} does not decrypt under key "
            f"{key.id}: the stored value was tampered with or the key is wrong"
        ) from None


# -- the vault --------------------------------------------------------------------------


@dataclass(frozen=True)
class SecretInfo:
    """What may be shown about a secret: never its value."""

    namespace: str
    name: str
    key_id: str
    created_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "key_id": self.key_id,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


class Vault:
    """Encrypted secrets in a :class:`~cronfleet.store.secrets.SecretStore`."""

    def __init__(self, store: SecretStore, keyring: Keyring | None = None) -> None:
        self.store = store
        self.keyring = keyring if keyring is not None else Keyring.from_env()

    def __repr__(self) -> str:
        current = self.keyring.current.id if self.keyring.current else None
        return f"Vault({self.store!r}, key={current})"

    def _key(self) -> SecretKey:
        if self.keyring.current is None:
            raise VaultLocked(
                f"no secret key: set {KEY_ENV} (base64 of 32 bytes) or {KEY_FILE_ENV}; "
                "'cronfleet secrets generate-key' prints a new one"
            )
        return self.keyring.current

    async def check(self) -> None:
        """Raise :class:`VaultLocked` when encrypted secrets exist that no configured key
        can decrypt (e.g. the process started without its key). A clear error at start."""
        rows = await self.store.list_secrets(None)
        if not rows:
            return
        unknown = sorted({r.key_id for r in rows if self.keyring.find(r.key_id) is None})
        if not unknown:
            return
        if self.keyring.current is None:
            raise VaultLocked(
                f"{len(rows)} encrypted secret(s) exist but no secret key is configured: set "
                f"{KEY_ENV} or {KEY_FILE_ENV} (they were encrypted under key id(s) "
                f"{', '.join(unknown)})"
            )
        raise VaultLocked(
            f"secrets encrypted under key id(s) {', '.join(unknown)} cannot be decrypted with "
            f"the configured key {self.keyring.current.id}; add the old key to "
            f"{PREVIOUS_KEYS_ENV} and run 'cronfleet secrets rotate-key'"
        )

    async def set(self, name: str, value: str, namespace: str = DEFAULT_NAMESPACE) -> bool:
        """Store (create or replace) a secret; True when it was created."""
        problem = check_secret_name(name)
        if problem:
            raise SecretError(problem)
        if not isinstance(value, str) or value == "":
            raise SecretError(f"secret {name!r}: the value is empty")
        key = self._key()
        nonce, ct = encrypt(key, namespace, name, value)
        return await self.store.put_secret(namespace, name, key.id, nonce, ct, _now())

    async def get(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> str:
        row = await self.store.get_secret(namespace, name)
        if row is None:
            raise UnknownSecret(name, namespace)
        key = self.keyring.find(row.key_id)
        if key is None:
            if self.keyring.current is None:
                raise VaultLocked(
                    f"secret {name!r} is encrypted but no secret key is configured: set "
                    f"{KEY_ENV} or {KEY_FILE_ENV}"
                )
            raise VaultLocked(
                f"secret {name!r} was encrypted under key {row.key_id}, which is not "
                f"configured (current key {self.keyring.current.id}; list old keys in "
                f"{PREVIOUS_KEYS_ENV})"
            )
        return decrypt(key, namespace, name, row.nonce, row.ciphertext)

    async def resolve(self, names: Iterable[str], namespace: str = DEFAULT_NAMESPACE
                      ) -> dict[str, str]:
        """The values of ``names``; raises :class:`UnknownSecret` for the first missing."""
        return {n: await self.get(n, namespace) for n in dict.fromkeys(names)}

    async def entries(self, namespace: str | None = DEFAULT_NAMESPACE) -> list[SecretInfo]:
        """Names and dates (``namespace=None``: every namespace), never values."""
        rows = await self.store.list_secrets(namespace)
        return [SecretInfo(r.namespace, r.name, r.key_id, r.created_at, r.updated_at)
                for r in rows]

    async def delete(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> bool:
        return await self.store.delete_secret(namespace, name)

    async def rotate(self) -> int:
        """Re-encrypt every secret not already under the current key; returns how many."""
        key = self._key()
        await self.check()
        count = 0
        for row in await self.store.list_secrets(None):
            if row.key_id == key.id:
                continue
            old = self.keyring.find(row.key_id)
            assert old is not None  # check() passed
            full = await self.store.get_secret(row.namespace, row.name)
            if full is None:
                continue
            value = decrypt(old, row.namespace, row.name, full.nonce, full.ciphertext)
            nonce, ct = encrypt(key, row.namespace, row.name, value)
            await self.store.put_secret(row.namespace, row.name, key.id, nonce, ct, _now())
            count += 1
        return count


def _now() -> datetime:
    return datetime.now(UTC)


# -- references and redaction -----------------------------------------------------------


def references(*texts: str | None) -> list[str]:
    """The secret names referenced as ``${secrets.NAME}`` in ``texts``, in order."""
    out: list[str] = []
    for text in texts:
        if text:
            out.extend(m.group(1) for m in _REF.finditer(text))
    return list(dict.fromkeys(out))


def expand(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``${secrets.NAME}`` replaced by its value."""
    return _REF.sub(lambda m: values[m.group(1)], text)


class Redactor:
    """Replaces every known secret value (and its URL-encoded form) with ``[REDACTED]``."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: set[str] = set()
        for v in values:
            self.add(v)

    def add(self, value: str) -> None:
        from urllib.parse import quote, quote_plus

        if not value:
            return
        # the forms a value takes inside a URL: fully escaped, path-escaped, query-escaped
        forms = (value, quote(value, safe=""), quote(value), quote_plus(value),
                 quote(value, safe="!$&'()*+,;=:@/"), quote(value, safe="!$&'()*+,;=:@/?"))
        for form in forms:
            if form:
                self._values.add(form)

    def __bool__(self) -> bool:
        return bool(self._values)

    def __call__(self, text: str) -> str:
        # longest first so that a value containing another is hidden whole
        for v in sorted(self._values, key=len, reverse=True):
            if v in text:
                text = text.replace(v, REDACTED)
        return text

    def data(self, value: Any) -> Any:
        """Redact every string inside a JSON-like structure."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self(str(k)): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value
