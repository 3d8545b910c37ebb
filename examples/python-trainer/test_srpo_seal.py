"""Sealed content without Kafka:  python3 -m unittest examples/python-trainer/test_srpo_seal.py

- srpo_seal.open_output opens libs/events/src/content-seal.spec.ts's known-answer ciphertext (its
  bytes came from Python ``cryptography`` for the documented layout, and Node's sealOutput writes the
  same) to the ids sealed there, and refuses a changed byte, another event's associated data (output,
  episode, subject, key id), another key, no key, another scheme, a short nonce;
- the plaintext count is bounded by its bytes;
- srpo_loss.training_sets opens a sealed member with its key, refuses it without --content-keys (the
  message names the option), with another key or with its key missing (invalid-input);
- ContentKeyStore reads a SQLite store laid out as libs/store's migration makes it (WAL, key hex in
  key_hex), read-only, in one call for many ids, an erased (deleted) key absent; a missing file or
  table and a postgres:// URL without psycopg fail with a message naming --content-keys.
"""

import os
import sqlite3
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import srpo_loss as L  # noqa: E402
import srpo_seal as S  # noqa: E402
from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: E402
from srpo_events import EventCodec  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KEY = bytes(range(32))
NONCE = bytes(range(12))
# libs/events/src/content-seal.spec.ts: sealOutput of ep-1/o1 (episode ep-1, subject user-7), key k1,
# context [1, 2, 300], response [5, 70000].
KNOWN = bytes.fromhex("4402d61bc4e5c21b8f41978b9de8786d86d68734806a5e7c96910903767f05c0c5dbdcb8fd515e44")


def known(**patch):
    o = {"outputId": "ep-1/o1", "episodeId": "ep-1", "subjectId": "user-7", "contextTokenIds": [], "responseTokenIds": [],
         "behaviourLogProbs": [-0.5, -1.25], "sealed": {"scheme": "aes-256-gcm/v1", "keyId": "k1", "nonce": NONCE, "ciphertext": KNOWN}}
    sealed = patch.pop("sealed", {})
    o.update(patch)
    o["sealed"] = {**o["sealed"], **sealed}
    return o


class OpenKnownAnswer(unittest.TestCase):
    def test_opens_the_typescript_vector(self):
        out = S.open_output(known(), KEY)
        self.assertEqual(out["contextTokenIds"], [1, 2, 300])
        self.assertEqual(out["responseTokenIds"], [5, 70000])
        self.assertIsNone(out["sealed"])
        self.assertEqual(out["behaviourLogProbs"], [-0.5, -1.25])
        clear = {"outputId": "x", "sealed": None, "contextTokenIds": [1]}
        self.assertIs(S.open_output(clear, None), clear)

    def test_refuses_changed_bytes_other_aad_other_key(self):
        flipped = bytearray(KNOWN)
        flipped[0] ^= 1
        tag = bytearray(KNOWN)
        tag[-1] ^= 0x80
        cases = {
            "changed ciphertext byte": (known(sealed={"ciphertext": bytes(flipped)}), KEY),
            "changed tag byte": (known(sealed={"ciphertext": bytes(tag)}), KEY),
            "another output id": (known(outputId="ep-1/o2"), KEY),
            "another episode": (known(episodeId="ep-2"), KEY),
            "another subject": (known(subjectId="user-8"), KEY),
            "no subject": (known(subjectId=None), KEY),
            "another key id": (known(sealed={"keyId": "k2"}), KEY),
            "another key": (known(), os.urandom(32)),
            "another nonce": (known(sealed={"nonce": bytes(12)}), KEY),
        }
        for name, (o, key) in cases.items():
            with self.subTest(name):
                with self.assertRaisesRegex(S.SealOpenError, "does not open with key"):
                    S.open_output(o, key)
        with self.assertRaisesRegex(S.SealOpenError, r"no key k1 to open output ep-1/o1"):
            S.open_output(known(), None)
        with self.assertRaisesRegex(S.SealOpenError, "unknown seal scheme 'rot13'"):
            S.open_output(known(sealed={"scheme": "rot13"}), KEY)
        with self.assertRaisesRegex(S.SealOpenError, "nonce has 8 bytes"):
            S.open_output(known(sealed={"nonce": bytes(8)}), KEY)
        with self.assertRaisesRegex(S.SealOpenError, "shorter than its tag"):
            S.open_output(known(sealed={"ciphertext": KNOWN[:15]}), KEY)
        with self.assertRaisesRegex(S.SealOpenError, "has 16 bytes"):
            S.open_output(known(), KEY[:16])

    def test_plaintext_count_is_bounded_by_its_bytes(self):
        with self.assertRaisesRegex(S.SealOpenError, "claims 3 context tokens but holds 2 ids"):
            S.tokens_of_plaintext((3).to_bytes(4, "little") + bytes(8))
        with self.assertRaisesRegex(S.SealOpenError, "whole number of int32s"):
            S.tokens_of_plaintext(bytes(6))
        self.assertEqual(S.tokens_of_plaintext((1).to_bytes(4, "little") + (-2).to_bytes(4, "little", signed=True) + (7).to_bytes(4, "little")),
                         {"contextTokenIds": [-2], "responseTokenIds": [7]})


def agent_output(output_id, context, response, subject, key_id=None, key=None):
    o = {"outputId": output_id, "episodeId": f"ep-{output_id}", "step": 0, "agentId": "a", "role": "solver", "policyId": "solver",
         "policyVersion": 0, "contextRef": "ctx", "contextTokenIds": context, "responseTokenIds": response,
         "behaviourLogProbs": [-1.0] * len(response), "lossMask": [True] * len(response),
         "sampling": {"temperature": 1.0, "topK": 0, "maxNewTokens": len(response), "seed": None, "stopTokenIds": []},
         "startedAtMs": 1, "eventTimeMs": 1, "tokenIdOrigin": "sampled", "turn": 0, "parentOutputId": None, "tokenDrift": None,
         "malformedToolCall": False, "subjectId": subject, "sealed": None}
    if key is not None:  # sealed as content-seal.ts lays it out
        plain = len(context).to_bytes(4, "little") + b"".join(t.to_bytes(4, "little", signed=True) for t in context + response)
        nonce = os.urandom(12)
        ct = AESGCM(key).encrypt(nonce, plain, S.associated_data(output_id, o["episodeId"], subject, key_id))
        o.update(contextTokenIds=[], responseTokenIds=[], sealed={"scheme": "aes-256-gcm/v1", "keyId": key_id, "nonce": nonce, "ciphertext": ct})
    return o


class TrainingSetsOfSealedMembers(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.codec = EventCodec(os.path.join(REPO, "schemas"))

    def group(self, key):
        o = agent_output("g/o0", [3, 4], [5, 6, 7], "alice", "kA", key)
        member = {"outputId": "g/o0", "temperature": 1.0, "output": self.codec.encode("AgentOutput", o)}
        return {"sets": [{"advantage": 1.0, "set": {"setId": "g/s0", "members": [member]}}]}

    def test_opens_with_its_key_and_refuses_otherwise(self):
        key = os.urandom(32)
        sets = L.training_sets(self.codec, self.group(key), {"kA": key})
        self.assertEqual([(m["context"], m["response"]) for m in sets[0]["members"]], [([3, 4], [5, 6, 7])])
        with self.assertRaisesRegex(L.InvalidInput, r"member g/o0 is sealed \(key kA\); pass --content-keys"):
            L.training_sets(self.codec, self.group(key))
        with self.assertRaisesRegex(L.InvalidInput, r"set g/s0: output g/o0 does not open with key kA"):
            L.training_sets(self.codec, self.group(key), {"kA": os.urandom(32)})
        with self.assertRaisesRegex(L.InvalidInput, r"set g/s0: no key kA"):
            L.training_sets(self.codec, self.group(key), {})
        clear = L.training_sets(self.codec, self.group(None))  # in the clear: no keys needed
        self.assertEqual(clear[0]["members"][0]["response"], [5, 6, 7])


# The columns of libs/store/src/migrations/1767225600003-subject-keys.ts.
DDL = ("CREATE TABLE subject_keys (key_id varchar(64) PRIMARY KEY NOT NULL, subject_id varchar(256) NOT NULL, "
       "episode_id varchar(256) NOT NULL, key_hex varchar(64) NOT NULL, created_at_ms bigint NOT NULL)")


class KeyStoreOnSqlite(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "learner store.sqlite")  # a space: the URI is quoted
        self.keys = {f"k{i}": os.urandom(32) for i in range(1200)}
        db = sqlite3.connect(self.path)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(DDL)
        db.executemany("INSERT INTO subject_keys VALUES (?, ?, ?, ?, ?)",
                       [(k, "alice" if i % 2 else "bob", f"ep-{i}", v.hex(), 1) for i, (k, v) in enumerate(self.keys.items())])
        db.commit()
        self.writer = db  # kept open, as the learner keeps its store open

    def tearDown(self):
        self.writer.close()
        self.dir.cleanup()

    def test_reads_keys_in_one_call_read_only_and_erased_ones_are_absent(self):
        store = S.ContentKeyStore(self.path)
        try:
            got = store.keys_by_id(list(self.keys) + ["never-made", "k1"])
            self.assertEqual(got, self.keys)
            self.writer.execute("DELETE FROM subject_keys WHERE subject_id = 'bob'")  # srpo erase --subject bob
            self.writer.commit()
            got = store.keys_by_id(["k0", "k1", "k2", "k3"])
            self.assertEqual(got, {"k1": self.keys["k1"], "k3": self.keys["k3"]})
            self.assertEqual(store.keys_by_id([]), {})
            with self.assertRaisesRegex(sqlite3.OperationalError, "readonly"):
                store._conn.execute("DELETE FROM subject_keys")
        finally:
            store.close()

    def test_fails_fast_naming_the_option(self):
        with self.assertRaisesRegex(S.KeyStoreError, "--content-keys: cannot open the SQLite store"):
            S.ContentKeyStore(os.path.join(self.dir.name, "missing.sqlite"))
        empty = os.path.join(self.dir.name, "empty.sqlite")
        sqlite3.connect(empty).close()
        with self.assertRaisesRegex(S.KeyStoreError, "--content-keys: the store has no readable subject_keys table"):
            S.ContentKeyStore(empty)
        with mock.patch.dict(sys.modules, {"psycopg": None}):  # psycopg not installed
            with self.assertRaisesRegex(S.KeyStoreError, r"--content-keys is a PostgreSQL URL but the psycopg package is not installed; install it with: python3 -m pip install"):
                S.ContentKeyStore("postgres://u:secret@127.0.0.1:1/db")
        try:
            S.ContentKeyStore("postgresql://u:secret@127.0.0.1:1/db")
        except S.KeyStoreError as e:
            self.assertNotIn("secret", str(e))


if __name__ == "__main__":
    unittest.main()
