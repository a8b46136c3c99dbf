#!/usr/bin/env sh
# Creates deploy/secrets/ for compose: one bearer token per role and the database password.
# Never commit the result (it is git-ignored). Re-running keeps existing secrets.
set -eu
dir="$(dirname "$0")/secrets"
mkdir -p "$dir"
chmod 700 "$dir"
random() { python3 -c 'import secrets; print(secrets.token_urlsafe(32))'; }

if [ ! -f "$dir/tokens.json" ]; then
  printf '{"world": "%s", "service": "%s", "operator": "%s"}\n' "$(random)" "$(random)" "$(random)" \
    > "$dir/tokens.json"
fi
# Bind-mounted into containers that run as uid 10001: readable by this file's group, which the
# containers join (compose's group_add reads EGBE_SECRETS_GID from deploy/.env), and by no one else.
# A production service refuses a tokens file others can read.
chmod 640 "$dir/tokens.json"
printf 'EGBE_SECRETS_GID=%s\n' "$(stat -c %g "$dir/tokens.json")" > "$(dirname "$0")/.env"

if [ ! -f "$dir/egbe.env" ]; then
  password="$(random)"
  umask 077
  printf 'POSTGRES_PASSWORD=%s\nEGBE_DATABASE_URL=postgresql://egbe:%s@postgres:5432/egbe\n' \
    "$password" "$password" > "$dir/egbe.env"
fi
echo "secrets in $dir: tokens.json (world/service/operator bearer tokens), egbe.env (database); deploy/.env (the secrets group)"
