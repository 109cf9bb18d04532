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
from datetime import datetime
from pathlib import Path
from types import EllipsisType
from typing import TYPE_CHECKING, Any

from cronfleet.clock import Clock, SystemClock, from_ts
from cronfleet.errors import CronfleetError
from cronfleet.extras import require

try:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
except ImportError:
    require("http", "the secret vault")  # one line naming the pip install
    raise

if TYPE_CHECKING:
    from cronfleet.store.side import SecretStore

__all__ = [
    "DEFAULT_NAMESPACE",
    "KEY_ENV",
    "KEY_FILE_ENV",
    "PREVIOUS_KEYS_ENV",
    "REDACTED",
    "BoundSecret",
    "Keyring",
    "Redactor",
    "SecretError",
    "SecretInfo",
    "SecretKey",
    "UnknownSecret",
    "Vault",
    "VaultLocked",
    "check_hosts",
    "check_secret_name",
    "expand",
    "generate_key",
    "host_allowed",
    "redact",
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
    hosts: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "key_id": self.key_id,
            "hosts": None if self.hosts is None else list(self.hosts),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
MAX_HOSTS = 100


def check_hosts(hosts: Iterable[object]) -> tuple[tuple[str, ...], list[str]]:
    """The host names a secret may be sent to, normalised (lower case, no trailing dot),
    and the problem with each bad entry. ``*.example.com`` allows every sub-domain of
    ``example.com`` (not the name itself); an IP address is written as is."""
    import ipaddress

    out: list[str] = []
    problems: list[str] = []
    entries = list(hosts)
    if len(entries) > MAX_HOSTS:
        return (), [f"at most {MAX_HOSTS} hosts, got {len(entries)}"]
    for i, entry in enumerate(entries):
        if not isinstance(entry, str) or not entry.strip():
            problems.append(f"hosts[{i}]: expected a host name, got {entry!r}")
            continue
        host = entry.strip().lower().rstrip(".")
        try:
            out.append(str(ipaddress.ip_address(host.strip("[]"))))
            continue
        except ValueError:
            pass
        name = host[2:] if host.startswith("*.") else host
        labels = name.split(".")
        if len(name) > 253 or not all(_HOST_LABEL.match(label) for label in labels):
            problems.append(f"hosts[{i}]: {entry!r} is not a host name (e.g. api.example.com "
                            "or *.example.com; no scheme, port or path)")
            continue
        out.append(host)
    return tuple(dict.fromkeys(out)), problems


def host_allowed(host: str, hosts: Iterable[str] | None) -> bool:
    """Whether a request to ``host`` may carry a secret bound to ``hosts``."""
    if not hosts:
        return False
    host = host.strip("[]").lower().rstrip(".")
    for allowed in hosts:
        if allowed.startswith("*."):
            if host.endswith(allowed[1:]) and len(host) > len(allowed) - 1:
                return True
        elif host == allowed:
            return True
    return False


@dataclass(frozen=True)
class BoundSecret:
    """A secret's value and the hosts it may be sent to (None: no hosts set)."""

    value: str = field(repr=False)
    hosts: tuple[str, ...] | None


class Vault:
    """Encrypted secrets in a :class:`~cronfleet.store.side.SecretStore`."""

    def __init__(self, store: SecretStore, keyring: Keyring | None = None, *,
                 clock: Clock | None = None) -> None:
        self.store = store
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.keyring = keyring if keyring is not None else Keyring.from_env()

    def __repr__(self) -> str:
        current = self.keyring.current.id if self.keyring.current else None
        return f"Vault({self.store!r}, key={current})"

    def _now(self) -> datetime:
        return from_ts(self.clock.now())

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

    async def set(self, name: str, value: str, namespace: str = DEFAULT_NAMESPACE,
                  hosts: Iterable[str] | EllipsisType | None = ...) -> bool:
        """Store (create or replace) a secret and the hosts it may be sent to (``None`` or
        empty: none -- only admins' jobs and config tasks may use it; ``...``, the default:
        keep the hosts it has); True when it was created."""
        problem = check_secret_name(name)
        if problem:
            raise SecretError(problem)
        if not isinstance(value, str) or value == "":
            raise SecretError(f"secret {name!r}: the value is empty")
        bound: tuple[str, ...] | None = None
        if hosts is ...:
            old = await self.store.get_secret(namespace, name)
            bound = old.hosts if old is not None else None
        elif hosts is not None:
            bound, problems = check_hosts(hosts)
            if problems:
                raise SecretError(f"secret {name!r}: " + "; ".join(problems))
        key = self._key()
        # never write under a key while values exist that this key ring cannot read: the
        # processes holding those keys would then not read this one (and refuse to start)
        await self.check()
        nonce, ct = encrypt(key, namespace, name, value)
        return await self.store.put_secret(namespace, name, key.id, nonce, ct, self._now(),
                                           bound or None)

    async def get(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> str:
        return (await self.get_bound(name, namespace)).value

    async def get_bound(self, name: str, namespace: str = DEFAULT_NAMESPACE) -> BoundSecret:
        """The value and its hosts."""
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
        return BoundSecret(decrypt(key, namespace, name, row.nonce, row.ciphertext), row.hosts)

    async def resolve_bound(self, names: Iterable[str], namespace: str = DEFAULT_NAMESPACE
                            ) -> dict[str, BoundSecret]:
        """Values and hosts of ``names``; raises :class:`UnknownSecret` for the first
        missing."""
        return {n: await self.get_bound(n, namespace) for n in dict.fromkeys(names)}

    async def hosts(self, names: Iterable[str], namespace: str = DEFAULT_NAMESPACE
                    ) -> dict[str, tuple[str, ...] | None]:
        """The hosts of each existing secret of ``names`` (no decryption, no key needed)."""
        out: dict[str, tuple[str, ...] | None] = {}
        for n in dict.fromkeys(names):
            row = await self.store.get_secret(namespace, n)
            if row is not None:
                out[n] = row.hosts
        return out

    async def resolve(self, names: Iterable[str], namespace: str = DEFAULT_NAMESPACE
                      ) -> dict[str, str]:
        """The values of ``names``; raises :class:`UnknownSecret` for the first missing."""
        return {n: await self.get(n, namespace) for n in dict.fromkeys(names)}

    async def entries(self, namespace: str | None = DEFAULT_NAMESPACE) -> list[SecretInfo]:
        """Names and dates (``namespace=None``: every namespace), never values."""
        rows = await self.store.list_secrets(namespace)
        return [SecretInfo(r.namespace, r.name, r.key_id, r.created_at, r.updated_at, r.hosts)
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
            await self.store.put_secret(row.namespace, row.name, key.id, nonce, ct, self._now(),
                                        full.hosts)
            count += 1
        return count



# -- references and redaction -----------------------------------------------------------


def references(*texts: str | None) -> list[str]:
    """The secret names referenced as ``${secrets.NAME}`` in ``texts``, in order."""
    out: list[str] = []
    for text in texts:
        if text and "${" in text:  # most texts reference none: no regex scan
            out.extend(m.group(1) for m in _REF.finditer(text))
    return list(dict.fromkeys(out))


def expand(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``${secrets.NAME}`` replaced by its value."""
    return _REF.sub(lambda m: values[m.group(1)], text)


def _char_forms(ch: str) -> list[str]:
    """Every spelling of one character a target, a library or a log may use: raw,
    percent-encoded bytes (either case, ``+`` for a space), JSON escapes (``\\uXXXX`` in
    either case, surrogate pairs, ``\\/``, ``\\"``, ``\\n`` ...), HTML references and
    the ``\\xNN`` escapes of Python's repr (library error texts quote bytes that way)."""
    code = ord(ch)
    forms = {ch}
    utf8 = ch.encode("utf-8")
    for case in (str.upper, str.lower):
        forms.add("".join(f"%{case(f'{b:02x}')}" for b in utf8))
    if ch == " ":
        forms.add("+")
    units = ([code] if code < 0x10000 else
             [0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)])
    for case in (str.lower, str.upper):
        forms.add("".join(f"\\u{case(f'{u:04x}')}" for u in units))
        forms.add(f"&#x{case(f'{code:x}')};")
    forms.add(f"&#{code};")
    if code > 0x7E or code < 0x20:  # Python's repr of text and of bytes (error messages)
        forms.add("".join(f"\\x{b:02x}" for b in utf8))
        forms.add(f"\\x{code:02x}" if code < 0x100 else f"\\U{code:08x}")
    forms.update(_SHORT_ESCAPES.get(ch, ()))
    return sorted(forms, key=len, reverse=True)


_SHORT_ESCAPES = {
    '"': ('\\"', "&quot;"), "\\": ("\\\\",), "/": ("\\/",), "\n": ("\\n",),
    "\r": ("\\r",), "\t": ("\\t",), "\b": ("\\b",), "\f": ("\\f",),
    "&": ("&amp;",), "<": ("&lt;",), ">": ("&gt;",), "'": ("&#39;", "&apos;", "\\'"),
}


def _value_pattern(value: str) -> str:
    """A regular expression matching ``value`` in any mix of the forms of each character,
    or the base64 of its UTF-8 bytes (standard or URL-safe, padded or not). Linear: one
    alternation per character, no nested repetition."""
    parts = ["(?:" + "|".join(re.escape(f) for f in _char_forms(ch)) + ")" for ch in value]
    raw = value.encode("utf-8")
    b64 = {base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()}
    b64 |= {b.rstrip("=") for b in b64}
    return "|".join([*(re.escape(b) for b in sorted(b64, key=len, reverse=True)),
                     "".join(parts)])


class Redactor:
    """Replaces every known secret value with ``[REDACTED]`` in any text, in every form it
    can take: raw, percent-encoded (either case, ``+`` for a space), JSON-escaped (``\\/``
    and ``\\uXXXX`` included), HTML-escaped, httpx's normalised URL form (a mix of the
    above) and base64 of the raw value. One instance per run: :meth:`add` each value as it
    is read, then call it on every string that is stored, shown or logged."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        for v in values:
            self.add(v)

    def add(self, value: str) -> None:
        if value and value not in self._values:
            self._values.add(value)
            self._pattern = None

    def __bool__(self) -> bool:
        return bool(self._values)

    def _compiled(self) -> re.Pattern[str]:
        if self._pattern is None:
            # longest first so that a value containing another is hidden whole
            ordered = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(f"(?:{_value_pattern(v)})" for v in ordered))
        return self._pattern

    def __call__(self, text: str) -> str:
        if not self._values or not text:
            return text
        return self._compiled().sub(REDACTED, text)

    def data(self, value: Any) -> Any:
        """Redact every string inside a JSON-like structure (a copy; ``value`` itself when
        no secret is known: an HTTP run without secrets is not walked twice)."""
        if not self._values:
            return value
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self(str(k)): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value


def redact(text: str, values: Iterable[str]) -> str:
    """``text`` with each of ``values`` replaced by ``[REDACTED]`` in every form it can take
    (see :class:`Redactor`; keep one Redactor when redacting many strings)."""
    return Redactor(values)(text)
