"""Sealed content (docs/erasure.md) in Python: open ``aes-256-gcm/v1`` and read the store's content keys.

The scheme, as libs/events/src/content-seal.ts writes it:

- key: 32 bytes per (subjectId, episodeId), hex in the store's ``subject_keys.key_hex``;
- nonce: 12 bytes per event (``AgentOutput.sealed.nonce``);
- plaintext: ``uint32le(|context|) || int32le(context...) || int32le(response...)``;
- associated data: ``srpo-sealed/v1 \\0 outputId \\0 episodeId \\0 subjectId \\0 keyId`` (UTF-8,
  ``subjectId`` empty when null), so a ciphertext moved onto another event does not open;
- ciphertext: GCM's output with its 16-byte tag appended.

A key that is not in the store was erased (``srpo erase`` deleted it): the sets holding it are
left out of their group (srpo_groups.group_without). A key that does not open the bytes (another
key, changed bytes) raises :class:`SealOpenError`. Keys never appear in a message: only key ids.
"""

from __future__ import annotations

import sqlite3
import struct
import urllib.parse
from typing import Any, Dict, Iterable, List, Optional

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

SEAL_SCHEME = "aes-256-gcm/v1"
CONTENT_KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
AAD_LABEL = "srpo-sealed/v1"
OPTION = "--content-keys"
PSYCOPG_INSTALL = 'python3 -m pip install "psycopg[binary]"'
IN_CHUNK = 500  # key ids per IN (...) list: far below SQLite's and PostgreSQL's parameter limits


class SealOpenError(ValueError):
    """The output cannot be opened: no key, an unknown scheme, or bytes the key does not open."""


class KeyStoreError(RuntimeError):
    """The content-key store cannot be opened or read (a configuration error, not a bad group)."""


def associated_data(output_id: str, episode_id: str, subject_id: Optional[str], key_id: str) -> bytes:
    return "\0".join([AAD_LABEL, output_id, episode_id, subject_id or "", key_id]).encode("utf-8")


def tokens_of_plaintext(plain: bytes) -> Dict[str, List[int]]:
    """Inverse of the plaintext layout; the count is checked against the bytes before anything is read."""
    if len(plain) < 4 or len(plain) % 4 != 0:
        raise SealOpenError(f"sealed plaintext of {len(plain)} bytes is not a whole number of int32s")
    total = (len(plain) - 4) // 4
    (n,) = struct.unpack_from("<I", plain, 0)
    if n > total:
        raise SealOpenError(f"sealed plaintext claims {n} context tokens but holds {total} ids")
    ids = list(struct.unpack_from(f"<{total}i", plain, 4))
    return {"contextTokenIds": ids[:n], "responseTokenIds": ids[n:]}


def open_output(output: Dict[str, Any], key: Optional[bytes]) -> Dict[str, Any]:
    """The AgentOutput record with its token ids opened with ``key`` and ``sealed`` None; a clear one as it is."""
    sealed = output.get("sealed")
    if sealed is None:
        return output
    key_id = sealed["keyId"]
    if key is None:
        raise SealOpenError(f"no key {key_id} to open output {output['outputId']}")
    if sealed["scheme"] != SEAL_SCHEME:
        raise SealOpenError(f"unknown seal scheme {sealed['scheme'][:40]!r}; this reader knows {SEAL_SCHEME}")
    if len(key) != CONTENT_KEY_BYTES:
        raise SealOpenError(f"key {key_id} has {len(key)} bytes, expected {CONTENT_KEY_BYTES}")
    nonce, ciphertext = bytes(sealed["nonce"]), bytes(sealed["ciphertext"])
    if len(nonce) != NONCE_BYTES:
        raise SealOpenError(f"nonce has {len(nonce)} bytes, expected {NONCE_BYTES}")
    if len(ciphertext) < TAG_BYTES:
        raise SealOpenError("ciphertext is shorter than its tag")
    aad = associated_data(output["outputId"], output["episodeId"], output.get("subjectId"), key_id)
    try:
        plain = AESGCM(key).decrypt(nonce, ciphertext, aad)  # the tag is the last 16 bytes, as written
    except InvalidTag:
        raise SealOpenError(f"output {output['outputId']} does not open with key {key_id} (another key, or changed bytes)") from None
    return {**output, **tokens_of_plaintext(plain), "sealed": None}


class ContentKeyStore:
    """The store's ``subject_keys`` table (libs/store/src/migrations/1767225600003-subject-keys.ts), read only.

    ``location``: a SQLite file path (opened read-only, ``file:PATH?mode=ro``) or a ``postgres://`` /
    ``postgresql://`` URL (needs psycopg; ``schema`` as SRPO_DATABASE_SCHEMA). No cache: every batch
    asks the store, so an erasure counts from the next batch on.
    """

    def __init__(self, location: str, schema: Optional[str] = None) -> None:
        self.kind = "postgres" if location.startswith(("postgres://", "postgresql://")) else "sqlite"
        self._schema = schema
        if self.kind == "postgres":
            if schema and '"' in schema:
                raise KeyStoreError(f"{OPTION}: schema name {schema!r} holds a double quote")
            try:
                import psycopg  # type: ignore[import-not-found]
            except ImportError:
                raise KeyStoreError(f"{OPTION} is a PostgreSQL URL but the psycopg package is not installed; install it with: {PSYCOPG_INSTALL}") from None
            try:
                self._conn: Any = psycopg.connect(location, autocommit=True)
            except Exception as e:  # never echo the URL: it may carry a password
                raise KeyStoreError(f"{OPTION}: cannot connect to the PostgreSQL store ({type(e).__name__})") from None
            self._table = (f'"{schema}".' if schema else "") + "subject_keys"
        else:
            if schema:
                raise KeyStoreError(f"{OPTION}: a schema only applies to PostgreSQL")
            uri = "file:" + urllib.parse.quote(location) + "?mode=ro"
            try:
                self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            except sqlite3.Error as e:
                raise KeyStoreError(f"{OPTION}: cannot open the SQLite store {location} read-only ({e})") from None
            self._table = "subject_keys"
            self.location = location
        try:  # fail fast: the table must be there (the learner's store after its migrations ran)
            self._query_rows([])
        except Exception as e:
            self.close()
            raise KeyStoreError(f"{OPTION}: the store has no readable subject_keys table ({type(e).__name__}: {str(e)[:200]}); "
                                "point it at the learner's store (SRPO_SQLITE_PATH or SRPO_DATABASE_URL)") from None

    def _query_rows(self, ids: List[str]) -> List[Any]:
        if self.kind == "postgres":
            with self._conn.cursor() as cur:
                cur.execute(f"SELECT key_id, key_hex FROM {self._table} WHERE key_id = ANY(%s)", (ids,))
                return list(cur.fetchall())
        marks = ",".join("?" * len(ids)) or "NULL"
        return list(self._conn.execute(f"SELECT key_id, key_hex FROM {self._table} WHERE key_id IN ({marks})", ids).fetchall())

    def keys_by_id(self, key_ids: Iterable[str]) -> Dict[str, bytes]:
        """The keys of ``key_ids`` the store still has, in one query (per 500 ids); an erased key is absent."""
        unique = list(dict.fromkeys(key_ids))
        out: Dict[str, bytes] = {}
        for i in range(0, len(unique), IN_CHUNK):
            for key_id, key_hex in self._query_rows(unique[i : i + IN_CHUNK]):
                out[key_id] = bytes.fromhex(key_hex)
        return out

    def close(self) -> None:
        try:
            self._conn.close()
        except Exception:
            pass
