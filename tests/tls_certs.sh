#!/bin/sh
# Writes the certificates of the TLS tests into DIR with the openssl command-line tool:
#   ca.pem/ca.key              the cluster's CA
#   server.pem/server.key      signed by it, for 127.0.0.1 and localhost, valid 2 days
#   client.pem/client.key      signed by it (a consumer's or producer's client certificate)
#   expired.pem/expired.key    signed by it, for 127.0.0.1 and localhost, expired yesterday
#   other_ca.pem               another CA, which signed
#   other.pem/other.key        a certificate for 127.0.0.1 and localhost
# Usage: tests/tls_certs.sh DIR
set -eu
dir=$1
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > san.ext
for ca in ca other_ca; do
  key "$ca.key"
  openssl req -x509 -new -key "$ca.key" -out "$ca.pem" -subj "/CN=croupier test $ca" -days 2 2>/dev/null
done
# sign NAME CA DAYS: a certificate for NAME's key signed by CA (DAYS -1: expired a day ago)
sign() {
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=croupier test $1" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days "$3" \
    -extfile san.ext -out "$1.pem" 2>/dev/null
}
sign server ca 2
sign client ca 2
sign expired ca -1
sign other other_ca 2
rm -f ./*.csr ./*.srl san.ext
