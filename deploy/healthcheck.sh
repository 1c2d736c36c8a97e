#!/bin/sh
# The image's HEALTHCHECK: liveness of the replica in this container (`GET /healthz`, which
# does not touch Redis, so a Redis outage never marks a replica unhealthy). Follows DSH_BIND's
# port and speaks HTTPS when DSH_TLS_CERT is set (the certificate names the public host, not
# 127.0.0.1, hence -k).
set -eu
port=${DSH_BIND##*:}
scheme=http
[ -z "${DSH_TLS_CERT:-}" ] || scheme=https
exec curl -fsSk --max-time 2 -o /dev/null "$scheme://127.0.0.1:$port/healthz"
