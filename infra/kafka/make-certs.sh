#!/usr/bin/env bash
# Makes a throwaway certificate authority and a broker key store for a local
# TLS listener on 127.0.0.1 (tests and local experiments; never production keys).
#
#   make-certs.sh DIR [PASSWORD]
# Writes DIR/ca.pem (trust this in clients: KAFKA_SSL_CA_FILE), DIR/broker.p12
# (PKCS12 key store for the broker) and DIR/password.
set -euo pipefail
DIR="${1:?usage: make-certs.sh DIR [PASSWORD]}"
PASS="${2:-$(head -c 12 /dev/urandom | base64 | tr -d '/+=')}"
mkdir -p "$DIR"
cd "$DIR"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=srpo-test-ca" -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout broker.key -out broker.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > broker.ext
openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile broker.ext -out broker.pem 2>/dev/null
openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -name broker -passout "pass:$PASS" -out broker.p12
printf '%s' "$PASS" > password
chmod 600 ca.key broker.key password
echo "$DIR"
