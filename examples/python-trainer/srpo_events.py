"""The SRPO event contract in Python: decode and encode `schemas/*.avsc` events.

Two framings are read, as by the TypeScript codec (libs/events/src/event-codec.ts):

- Avro single-object encoding: ``C3 01``, the 8-byte little-endian CRC-64-AVRO
  fingerprint of the writer schema's parsing canonical form, the Avro binary body.
  Writer schemas are ``schemas/*.avsc`` and the older versions in ``schemas/history/``;
  a body written with an older schema is resolved into the current one.
- The Confluent wire format: ``00``, a 4-byte big-endian schema id, the body; the
  writer schema is fetched by id from a schema registry (``--schema-registry-url``).

Events are written (PolicyUpdate, PolicyVersion) in single-object encoding only, as the
learner writes its own events.
"""

from __future__ import annotations

import base64
import glob
import io
import json
import os
import struct
import urllib.request
from typing import Any, Dict, Optional, Tuple

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

MAGIC = b"\xc3\x01"
NAMESPACE = "dev.srpo.events"


class DecodeError(Exception):
    """Bytes that are not a known SRPO event (the learner would dead-letter them)."""


def _parse(schema: Dict[str, Any]) -> Tuple[Any, bytes]:
    parsed = fastavro.parse_schema(schema, named_schemas={})
    return parsed, bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))


class EventCodec:
    """Reader schemas from ``schemas/*.avsc``, writer schemas indexed by fingerprint (and registry id)."""

    def __init__(self, schemas_dir: str, registry_url: Optional[str] = None, registry_auth: Optional[str] = None) -> None:
        self.readers: Dict[str, Any] = {}
        self.headers: Dict[str, bytes] = {}
        self.writers: Dict[bytes, Tuple[str, Any]] = {}  # fingerprint -> (type name, parsed writer schema)
        self.by_id: Dict[int, Tuple[str, Any]] = {}
        self.registry_url = registry_url.rstrip("/") if registry_url else None
        self.registry_auth = registry_auth
        for path in sorted(glob.glob(os.path.join(schemas_dir, "*.avsc"))):
            with open(path, encoding="utf-8") as f:
                schema = json.load(f)
            parsed, fp = _parse(schema)
            self.readers[schema["name"]] = parsed
            self.headers[schema["name"]] = MAGIC + fp
            self.writers[fp] = (schema["name"], parsed)
        for path in sorted(glob.glob(os.path.join(schemas_dir, "history", "*.avsc"))):
            with open(path, encoding="utf-8") as f:
                schema = json.load(f)
            parsed, fp = _parse(schema)
            self.writers.setdefault(fp, (schema["name"], parsed))

    def fingerprint_hex(self, name: str) -> str:
        return self.headers[name][2:].hex()

    def decode(self, data: Optional[bytes]) -> Tuple[str, Dict[str, Any]]:
        """``(type name, record)``; raises DecodeError for anything else."""
        if not data or len(data) < 5:
            raise DecodeError(f"{0 if not data else len(data)} bytes: too short for an event")
        if data[:2] == MAGIC and len(data) >= 10:
            writer = self.writers.get(bytes(data[2:10]))
            if writer is None:
                raise DecodeError(f"unknown schema fingerprint {bytes(data[2:10]).hex()} (add its writer schema to schemas/history/)")
            body = data[10:]
        elif data[0] == 0:
            writer = self._registry_schema(struct.unpack(">I", data[1:5])[0])
            body = data[5:]
        else:
            raise DecodeError(f"unknown framing (first bytes {bytes(data[:2]).hex()})")
        name, writer_schema = writer
        reader = self.readers.get(name)
        if reader is None:
            raise DecodeError(f"event type {name} has no schema in schemas/")
        try:
            record = fastavro.schemaless_reader(io.BytesIO(body), writer_schema, reader if reader is not writer_schema else None)
        except Exception as e:  # fastavro raises several types for a corrupt body
            raise DecodeError(f"{name}: undecodable body ({e})") from e
        return name, record

    def decode_as(self, name: str, data: bytes) -> Dict[str, Any]:
        got, record = self.decode(data)
        if got != name:
            raise DecodeError(f"expected a {name}, got a {got}")
        return record

    def encode(self, name: str, record: Dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(self.headers[name])
        fastavro.schemaless_writer(buf, self.readers[name], record, strict=True)
        return buf.getvalue()

    def _registry_schema(self, schema_id: int) -> Tuple[str, Any]:
        if schema_id in self.by_id:
            return self.by_id[schema_id]
        if not self.registry_url:
            raise DecodeError(f"Confluent-framed event (schema id {schema_id}) but no --schema-registry-url")
        req = urllib.request.Request(f"{self.registry_url}/schemas/ids/{schema_id}", headers={"Accept": "application/vnd.schemaregistry.v1+json"})
        if self.registry_auth:
            req.add_header("Authorization", "Basic " + base64.b64encode(self.registry_auth.encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=10) as res:
                schema = json.loads(json.loads(res.read())["schema"])
        except Exception as e:
            raise DecodeError(f"schema id {schema_id}: registry lookup failed ({e})") from e
        name = schema["name"].split(".")[-1]
        self.by_id[schema_id] = (name, _parse(schema)[0])
        return self.by_id[schema_id]


def coordinates(c: Dict[str, Any]) -> Dict[str, Any]:
    return {"topic": c["topic"], "partition": int(c["partition"]), "offset": int(c["offset"])}


def ledger_entry(group: Dict[str, Any], source: Dict[str, Any]) -> Dict[str, Any]:
    """The ledger row the learner records for a consumed group (libs/store/src/ledger-entry.ts)."""
    return {
        "groupId": group["groupId"],
        "groupKey": group["groupKey"],
        "source": coordinates(source),
        "setIds": [gs["set"]["setId"] for gs in group["sets"]],
        "advantages": [gs["advantage"] for gs in group["sets"]],
        "sources": [
            {
                "setId": gs["set"]["setId"],
                "set": coordinates(gs["setSource"]),
                "transition": coordinates(gs["set"]["transitionSource"]),
                "outcome": coordinates(gs["set"]["outcomeSource"]) if gs["set"]["outcomeSource"] else None,
                "members": [{"outputId": m["outputId"], "source": coordinates(m["source"])} for m in gs["set"]["members"]],
            }
            for gs in group["sets"]
        ],
        "objectiveConfig": group["objectiveConfig"],
    }
